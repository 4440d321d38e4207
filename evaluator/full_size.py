"""One run at the sizes a GPU runs: the CPU evaluation's check of the paths a kernel takes only at a config's sizes.

In: an evaluation's results on the CPU, where the interpreter checked some configs at smaller sizes
(``interpreter_sizes``), and the candidate's process (``Sandbox``). Out: each such config's result with a note
saying at which sizes it also ran, or the candidate's failure there (Mismatch, RunFailed, CompileFailed,
GuardViolation) with the config's result marked incorrect.
Why: a kernel that picks its schedule from the sizes forward gets (tokens per block, splits of a sequence, key tiles
per split) takes paths at a config's own sizes that the smaller checks never reach; the played LLM (session 24) had
a rope kernel's multi-token blocks and a decode kernel's rescale across key tiles pass the CPU check broken. The
interpreter's cost is its blocks and loop steps, not the elements the size rule counts: both of those run at their
full sizes in a few seconds.
Guarantees: each config is run once (one seed, the reference's first distribution, the two calls and comparison
rules of every check) at the largest of: its sizes as stated, then its free dims cut to two thirds step by step
toward the sizes checked (while over the element limit, one whose cut frees less than half what another's does
waits), whose inputs and model tensors hold at most ``FULL_RUN_ELEMENTS`` and whose calls the interpreter finishes
within ``CALL_BUDGET_S`` each (``compiler.interp.time_limit``: it gives up after a kernel's first block when the rest
would not fit); where none of those sizes fits, at the sizes checked with the last size the check shrank (a row's
length: a vocabulary, a head dim) as stated and the others halved toward 1 (``row_attempts``).
An attempt that timed out tells how long a call needs: later ones that would need longer are skipped, and after the
listed sizes up to ``SCALED_ATTEMPTS`` sized to the slowest rate seen are tried (``_scaled``). An evaluation's runs
share ``EvalRequest.full_size_s`` (none when it is 0), each config a share of the time left. Sizes that could not run
are named in the note; they never fail a candidate (a candidate that stops itself there only loses this run).
"""

from __future__ import annotations

import time

from tileagent.evaluator.errors import CandidateError, Timeout
from tileagent.evaluator.interpreter_sizes import model_elements

FULL_RUN_ELEMENTS = 1 << 26
"""The most elements (inputs, parameters and buffers) a config's full-size run allocates on the CPU."""

CALL_BUDGET_S = 20.0
"""The most time one call of the candidate may take in the interpreter at the larger sizes."""

RULE = (f"once the checks pass, each config also runs once at its own sizes, or as near them as the interpreter "
        f"finishes a call in {CALL_BUDGET_S:g} s (the free dims cut to two thirds one at a time, to odd sizes, in "
        f"FREE_DIMS order, a dim that holds little of the memory waiting while the inputs exceed 2**26 elements; where "
        f"none fits, the last size the check shrank as stated and the others halved toward 1), compared with the "
        f"reference as every check is: a path your kernel takes only at large sizes runs")
"""The full-size run, as the prompt and the feedback say it."""

RAN, NOT_RAN = "also run once at", "not run at larger sizes than checked"
"""How a full-size run's note on a config's result reads, after the config's sizes."""

SCALED_ATTEMPTS = 3
"""The most sizes tried after the listed ones, each scaled to the interpreter's slowest rate seen so far (the rate is
not linear in the sizes: a 1024-wide row's first estimate ran 60% over)."""

MAX_ATTEMPTS = 5
"""The most sizes tried for one config (each costs a compile and a kernel's first block)."""


def sizes_text(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def attempts(spec, config: dict, checked: dict) -> list[dict]:
    """The sizes to run ``config`` (checked at ``checked``) at, largest first: as stated; while its inputs and model
    tensors hold more than ``FULL_RUN_ELEMENTS``, the first free dim whose cut frees at least half what the best cut
    does; then its free dims
    cut to two thirds one dim at a time in FREE_DIMS order (the first down to its value in ``checked`` before the
    next: a batch dim listed first gives way before a sequence), each made odd (4096 -> 2731 -> 1821 -> 1215: the
    large path meets a tail too, played LLM session 25: a grid of M // block_m passed at even sizes; and not one past
    a power of two, as halves plus one were, where a kernel that drops the rows past the first 1024 errs by 1/1025,
    inside the tolerance: played LLM session 36), at most ``MAX_ATTEMPTS``; sizes whose inputs and model tensors hold
    more than ``FULL_RUN_ELEMENTS`` (or cannot be counted on the meta device) left out; when that leaves none,
    ``row_attempts``."""
    free = [k for k in spec.free_dims if type(config.get(k)) is int and type(checked.get(k)) is int]
    sizes, run = [dict(config)], dict(config)
    while (over := _elements(spec, run)) is not None and over > FULL_RUN_ELEMENTS:
        # memory first: a dim whose cut frees less than half what another's does waits (played LLM session 44c: an
        # embedding bag's batch was cut to its checked size, the multi-block path with it, before its 1M-row table
        # shrank to fit)
        cuts = [{**run, k: _cut(run[k], checked[k])} for k in free if run[k] > checked[k]]
        counted = [(over - n, cut) for cut in cuts if (n := _elements(spec, cut)) is not None]
        if not counted:
            break
        most = max(freed for freed, _ in counted)
        run = next(cut for freed, cut in counted if 2 * freed >= most)
        sizes.append(run)
    for k in free:
        while run[k] > checked[k]:
            run = {**run, k: _cut(run[k], checked[k])}
            sizes.append(run)
    out = [run for run in sizes if run != checked and _fits(spec, run)][:MAX_ATTEMPTS]
    return out or [run for run in row_attempts(config, checked, free) if _fits(spec, run)][:MAX_ATTEMPTS]


def _cut(size: int, floor: int) -> int:
    """``size`` cut to two thirds, made odd (a tail there too), not below ``floor``."""
    cut = size * 2 // 3
    cut += 1 - cut % 2 if cut + 1 - cut % 2 < size else 0
    return max(floor, cut)


def _scaled(spec, run: dict, at: dict, elements: float) -> dict | None:
    """``run`` with its first free dim that can shrink (toward ``at``) at the largest odd size whose inputs and model
    tensors hold at most ``elements``; None when none does."""
    for k in (k for k in spec.free_dims if type(run.get(k)) is int and type(at.get(k)) is int and run[k] > at[k]):
        lo, hi, best = at[k], run[k] - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            if (n := _elements(spec, {**run, k: mid})) is not None and n <= elements:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        if best is not None and best > at[k]:
            return {**run, k: best - 1 + best % 2}
    return None


def row_attempts(config: dict, checked: dict, free: list) -> list[dict]:
    """When no size nearer ``config`` fits: the sizes checked with the last key the check shrank (besides the free
    dims ``free``, in ``config``'s order) as ``config`` states it, then the other shrunk keys and the free dims halved
    together down to 1, largest first. Played LLM, session 39: log-softmax rows of a 151936-word vocabulary were
    checked at V=2374 (16 rows a batch kept S from shrinking further), where a kernel without its rescale across
    vocabulary tiles took one tile; at B=1, S=1, V=151936 it failed in 11 s."""
    shrunk = [k for k, v in config.items() if k not in free and type(v) is int and type(checked.get(k)) is int
              and checked[k] < v]
    if not shrunk:
        return []
    others = [*shrunk[:-1], *(k for k in free if type(checked.get(k)) is int)]
    run = {**config, **checked, shrunk[-1]: config[shrunk[-1]]}
    out = [run]
    while any(run[k] > 1 for k in others):
        run = {**run, **{k: max(1, run[k] // 2) for k in others}}
        out.append(run)
    return out


def _fits(spec, run: dict) -> bool:
    """Whether the inputs and model tensors of ``run`` hold at most ``FULL_RUN_ELEMENTS`` (False when they cannot be
    counted on the meta device)."""
    return (elements := _elements(spec, run)) is not None and elements <= FULL_RUN_ELEMENTS


def _elements(spec, run: dict) -> int | None:
    try:
        weights = model_elements(spec, run)
        return None if weights is None else spec.input_elements(run) + weights
    except Exception:  # noqa: BLE001 - get_inputs needs real values: not counted, not run
        return None


def uncountable(spec, config: dict) -> str | None:
    """Why the elements of ``config``'s inputs and model cannot be counted on the meta device, or None when they
    can."""
    if model_elements(spec, config) is None:
        return "the Model's constructor needs real values"
    try:
        spec.input_elements(config)
    except Exception as e:  # noqa: BLE001 - get_inputs needs real values
        return f"get_inputs needs real values ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
    return None


def stands_for_gpu_sizes(c, stated: list[dict]) -> bool:
    """Whether the check of a config result ``c`` stands for the sizes a GPU runs (``stated``: the configs it stands
    for): a note says it also ran at larger sizes (or tried), or it was checked at stated sizes themselves. A config
    that passed in an evaluation that failed elsewhere had no such run (they follow the checks that all pass)."""
    return any(RAN in n or NOT_RAN in n for n in c.notes) or (c.evaluated_at or c.config) in stated


def run_full_sizes(request, spec, result, sandbox, progress) -> None:
    """Run each config a GPU runs (``request.plan_configs``, else the configs checked) whose check ran at smaller
    sizes once at larger ones (``attempts``), in order, within ``request.full_size_s`` (each config a share of the
    time left, the configs after it counted: ``left / (configs left)``); note the outcome on the
    result of the config that checked it, or mark that result incorrect and raise the candidate's failure there
    (with ``request.keep_going``, after every config has run)."""
    from tileagent.configs import reduce_for_device

    if request.full_size_s <= 0:
        return
    deadline, first = time.monotonic() + request.full_size_s, None
    passed = {i for i, c in enumerate(result.configs) if c.correct}  # by their checks
    todo = []
    for config in request.plan_configs or [c.config for c in result.configs]:
        reduced = reduce_for_device(spec, [config], "cpu")[0].eval  # as the loop and the CLI give it on the CPU
        index = next((i for i, c in enumerate(result.configs) if c.config in (config, reduced)), None)
        if index is not None and index in passed:
            at = result.configs[index].evaluated_at or result.configs[index].config
            if at != config:
                todo.append((config, index, at))
    for n, (config, index, at) in enumerate(todo):
        progress.phase("full", index, config)
        share = (deadline - time.monotonic()) / (len(todo) - n)  # the configs left share the time left (played
        # LLM session 36: the first configs' attempts spent it, and a vocabulary of 128256 ran at M <= 2 only)
        note, error = _run_config(request, spec, sandbox, config, at, result.configs[index].seed,
                                  time.monotonic() + share)
        now = result.configs[index]
        result.configs[index] = now.model_copy(update={"notes": [*now.notes, note],
                                                       "correct": now.correct and error is None})
        if error is not None and not request.keep_going:
            raise error
        first = first or error
    if first is not None:
        raise first


def _run_config(request, spec, sandbox, config: dict, at: dict, seed, deadline: float):
    """(the note, the candidate's failure or None) of ``config`` (checked at ``at``) run at the largest of its
    ``attempts`` that the interpreter finishes before ``deadline``."""
    from tileagent.evaluator.correctness import check_candidate

    over, rate = [], None  # elements a second the interpreter got through in an attempt that timed out

    def sizes():
        tried = None
        for tried in attempts(spec, config, at):
            yield tried
        for _ in range(SCALED_ATTEMPTS):  # every size left would time out: one sized to the slowest rate seen (played
            # LLM session 45: five cuts of two thirds stopped at M=361 where a row of 32000 needed M < 300)
            left = deadline - time.monotonic()
            scaled = _scaled(spec, tried, at, 0.7 * rate * min(CALL_BUDGET_S, left / 2)) if rate and tried else None
            if scaled is None or scaled == tried:
                return
            tried = scaled
            yield scaled

    for run in sizes():
        left = deadline - time.monotonic()
        if left < 1.0:
            break
        budget = min(CALL_BUDGET_S, left / 2)
        if rate is not None and (_elements(spec, run) or 0) > rate * budget:
            continue  # it would need longer than the one that timed out allowed for its size
        try:
            (done,) = check_candidate(spec, request.kernel_path, "cpu", configs=[run], seeds=1,
                                      distributions=spec.distributions[:1], static_checks=False, sandbox=sandbox,
                                      seed=seed, tails=False, budget_s=budget)
        except Timeout as e:
            needed = e.details.get("needed_s")
            if needed:
                rate = min(rate if rate is not None else float("inf"), (_elements(spec, run) or 0) / needed)
            over.append(f"{sizes_text(run)} ({f'about {needed:.3g} s a call' if needed else 'past it in a block'}, "
                        f"{budget:.3g} s allowed then)")
            continue
        except CandidateError as e:
            e.message = (f"at {sizes_text(run)} (run once on the CPU interpreter at the sizes nearest the config's "
                         f"own after its checks at {sizes_text(at)} passed: a path the kernel takes only at larger "
                         f"sizes): {e.message}")
            e.args = (e.message,)
            e.details["full_size"] = run
            return e.message, e
        where = "its own sizes" if run == config else sizes_text(run)
        inputs = f"{spec.distributions[0]} inputs" if spec.drawn(run) else "inputs as get_inputs draws them"
        return (f"{sizes_text(config)}: {RAN} {where} on the CPU interpreter ({inputs}): "
                f"correct, max abs err {done.max_abs_err:.3g}"), None
    if over:
        why = (f"the interpreter would need more than it allows a call (at most {CALL_BUDGET_S:g} s, and half the "
               f"time left for such runs) at {'; '.join(over)}")
    elif time.monotonic() >= deadline - 1.0:
        why = f"this config's share of the {request.full_size_s:g} s this evaluation gives such runs was spent"
    elif (problem := uncountable(spec, config)) is not None:
        why = (f"its sizes could not be counted: {problem}; not the kernel's to change: the reference's get_inputs "
               f"/ Model, built on the meta device (without boolean-mask indexing, .item() or nonzero on values), "
               f"would let these runs happen")
    else:
        why = f"every larger size holds more than {FULL_RUN_ELEMENTS:,} input and model elements"
    return (f"{sizes_text(config)}: {NOT_RAN} ({why}): a path the kernel takes only at larger sizes was compiled "
            f"for them, not run"), None
