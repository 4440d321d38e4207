"""Feedback: what a drafter is told about one evaluated candidate, rendered from ``prompts/feedback.md``.

In: an ``EvalResult`` (or a malformed answer's problem), the device in words and the target speedup. Out: the text
(``render_feedback``) and a one-line summary for tables and logs (``summary``).
Guarantees: every status maps to one template (compile errors -> ``compile_error`` with the compiler's diagnostic;
mismatches -> ``mismatch``, hidden distributions named as such; guard violations; load/run failures; timeouts and
crashes; a correct candidate -> ``timing`` when timed); numbers are formatted before they are inserted.
"""

from __future__ import annotations

from tileagent.evaluator.records import ConfigResult, EvalResult
from tileagent.evaluator.full_size import NOT_RAN, RAN, RULE as FULL_RUN_RULE
from tileagent.evaluator.interpreter_sizes import RULE as INTERPRETER_RULE, TAILS_NOT_CHECKED
from tileagent.evaluator.other_distributions import sentence
from tileagent.prompts import render
from tileagent.target import meets_target

UNTIMED_OK = ("Your kernel is correct on every config ({configs} checked). Timing is unavailable on {device}, so "
              "there is nothing to speed up here.")
UNTIMED_SPILLS = ("Your kernel is correct on every config ({configs} checked). Timing is unavailable on {device}, but "
                  "one thing is sure to make it slow on the GPU: {where} keeps {bytes} B a thread in local memory "
                  "({registers} registers a thread; spilled registers or a local array), which is as slow as global "
                  "memory and is read again at every use. Hold fewer values a thread (a smaller tile a block, more "
                  "threads, or a loop over a long row in parts instead of keeping it whole) until the resources "
                  "below show no local memory.")
UNTIMED_IDLE = ("Your kernel is correct on every config ({configs} checked). Timing is unavailable on {device}, but "
                "one thing is sure to make it slow on the GPU: at {config}, {kernel} runs {blocks} block(s) on the "
                "GPU's {sms} SMs, each streaming {kib} KiB of the {mib} MiB of inputs: most SMs stay idle while a few "
                "move the data. Give the work to more blocks (fewer rows a block, or a long row or K split across "
                "blocks with a second pass or kernel combining the parts) until {sms} or more run.")
UNTIMED_NARROW = ("Your kernel is correct on every config ({configs} checked). Timing is unavailable on {device}, but "
                  "one thing is sure to make it slow on the GPU: at {config}, {kernel} reads or writes {tensor} "
                  "{bits} bits at a time, because its last dim is a run-time size (a `T.dynamic` row length): its "
                  "rows may start at any address, so no access can be wider than one element, and a memory-bound "
                  "kernel moves its data several times slower than with 128-bit accesses. Pass that length to the "
                  "factory instead (one compile for each value it takes) until the resources below show no run-time "
                  "row length.")
IDLE_SM_SHARE, IDLE_BLOCK_BYTES = 4, 256 << 10
"""A correct kernel's launch is the GPU idling when it runs blocks for fewer than 1 / ``IDLE_SM_SHARE`` of the SMs,
each with at least ``IDLE_BLOCK_BYTES`` of the inputs to stream (``idle_launch``; played LLM sessions 43b and 44b: a
decode GEMM of 32 blocks and a min-p filter of one block a 128256-wide row ended the CPU loop as done)."""
GROSS_REL_L2 = 0.05
"""A mismatch's relative L2 error above which the feedback calls it a wrong element rather than precision (played LLM
session 37: an index bug at 0.257, 384x the reference's own error, was told it was less accurate arithmetic)."""
GROSS_ELEMENT = 0.1
"""... or the relative error of the element shown above which it does, where its expected value is 10 atol or more
and at most half the elements differ (played LLM session 45: 9 of 200 elements, one 47% off, relative L2 0.3%; an
fp16-accumulating GEMM differs at 419 of 512, one near-zero element shown 93% off, relative L2 0.1%: precision)."""
SPILL_BYTES = 256
"""Local memory a thread of a correct kernel may use at the GPU's sizes before the CPU loop asks for another kernel
(``UNTIMED_SPILLS``; played LLM session 36: 2352 B a thread, 255 registers, reported as done on the CPU)."""


def _num(x, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _cfg(config: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (config or {}).items()) or "default"


def timing_rows(configs: list[ConfigResult]) -> str:
    rows = []
    for c in configs:
        rows.append(render("feedback.timing_row", config=_cfg(c.config),
                           time_ms=_num(c.candidate.median_ms if c.candidate else None),
                           eager_ms=_num(c.eager.median_ms if c.eager else None),
                           compile_ms=_num(c.compiled.median_ms if c.compiled else None),
                           speedup_eager=_num(c.speedup_eager, 3), speedup_compiled=_num(c.speedup_compiled, 3),
                           roofline_pct=_num(c.roofline_pct, 3), bound=c.bound or "memory"))
    return "\n".join(rows)


def resources(plans: list[dict]) -> str:
    """The ``resources`` section for a result's plans (``EvalResult.plans``), or "" when there are none."""
    from tileagent.compiler.resources import render_launch

    rows, where = [], None
    for plan in plans:
        for launch in plan.get("launches") or []:
            rows.append(f"- {_cfg(plan['config'])}: {render_launch(launch)}")
            where = where or launch
        if "unavailable" in plan:
            rows.append(f"- {_cfg(plan['config'])}: not sized: {plan['unavailable']}")
    if where is None:
        return ""
    sms = f"{where['sms']} SMs" if where["sm_source"] == "device" else f"assumed {where['sm_source']}"
    return render("feedback.resources", arch=where["arch"], sms=sms, rows="\n".join(rows))


def most_local_memory(plans: list[dict]) -> tuple[int, dict | None, dict | None]:
    """(bytes, launch, its plan's config) of the launch whose threads keep the most local memory (spills or local
    arrays) among ``plans`` (``EvalResult.plans``); (0, None, None) when none."""
    return max(((launch.get("frame_bytes") or 0, launch, plan["config"]) for plan in plans
                for launch in plan.get("launches") or []), default=(0, None, None), key=lambda x: x[0])


def idle_launch(launches: list[dict]) -> dict | None:
    """Of ``launches`` (``KernelResources.to_dict()`` each with its plan's 'config' and 'bytes'), the one that leaves
    the GPU idlest, or None: per config its launch of the most blocks, where that has fewer than 1 /
    ``IDLE_SM_SHARE`` of the SMs' count and each block streams ``IDLE_BLOCK_BYTES`` or more of the inputs and model
    tensors (a small op's few blocks are its launch latency, not idle SMs)."""
    busiest: dict[str, dict] = {}
    for x in launches:
        key = _cfg(x.get("config"))
        if x.get("bytes") and (key not in busiest or x["blocks"] > busiest[key]["blocks"]):  # sized with its bytes
            busiest[key] = x
    idle = [x for x in busiest.values() if IDLE_SM_SHARE * x["blocks"] < x["sms"]
            and x["bytes"] >= IDLE_BLOCK_BYTES * x["blocks"]]
    return min(idle, key=lambda x: x["blocks"] / x["bytes"], default=None)


def narrow_rows(launches: list[dict]) -> dict | None:
    """Of ``launches`` (as for ``idle_launch``), the first that reads or writes a tensor larger than
    ``compiler.resources.SMALL_TENSOR_BYTES`` an element at a time because its last dim is a run-time size
    (``runtime_rows``), with that tensor's name as 'tensor', or None (played LLM 45 and 47: a `T.dynamic` row
    length, 16-bit accesses, a maxpool at 0.31-0.40x torch.compile on the GPU, ended the CPU loop as done)."""
    return next(({**x, "tensor": name} for x in launches for name in x.get("runtime_rows") or ()
                 if x["access_bytes"].get(name, 16) < 16 and name not in (x.get("small") or ())), None)


def untimed_cost(launches: list[dict]) -> tuple:
    """What the GPU is sure to make slow in a correct kernel's ``launches`` at its sizes, for the CPU loop, which
    does not time (least is best): first whether it spills past ``SPILL_BYTES``, idles the GPU (``idle_launch``),
    accesses a large tensor an element at a time (``narrow_rows``), then as tie-breakers its local memory and the
    idle launch's fewer blocks."""
    local = max((x.get("frame_bytes") or 0 for x in launches), default=0)
    idle = idle_launch(launches)
    return (local >= SPILL_BYTES, idle is not None, narrow_rows(launches) is not None, local,
            -idle["blocks"] if idle else 0)


def plan_launches(plans: list[dict]) -> list[dict]:
    """``EvalResult.plans`` as one list of launches, each with its plan's 'config' and 'bytes'."""
    return [{**x, "config": p["config"], "bytes": p.get("bytes")} for p in plans for x in p.get("launches") or []]


def verdict(configs: list[ConfigResult], target: float) -> str:
    """Which configs miss ``target`` and by how much (the slowest first), or that every config meets it."""
    misses = []
    for c in configs:
        if meets_target(c, target):
            continue
        worst = min((s, name) for s, name in ((c.speedup_eager, "eager"), (c.speedup_compiled, "torch.compile"))
                    if s is not None)
        room = f", {_num(c.roofline_pct, 3)}% of its {c.bound or 'memory'}-bound roofline" if c.roofline_pct else ""
        misses.append((worst[0], f"{_cfg(c.config)}: {_num(worst[0], 3)}x {worst[1]} "
                                  f"({_num(100 * (1 / worst[0] - 1), 2)}% slower than it){room}"))
    if not misses:
        return f"Every config meets the target of {_num(target)}x."
    misses.sort()
    return f"{len(misses)} of {len(configs)} configs miss the target, slowest first:\n" + \
        "\n".join(f"- {text}" for _, text in misses)


FLOAT_DIFFERENCE = ("{mismatched} of {total} elements are outside atol={atol} + rtol={rtol} * |expected|; max abs "
                    "error {max_abs_err},\nrelative L2 error {rel_l2}.")
# an infinity or NaN against a finite value (or the reverse) leaves no error size (played LLM session 24: "nan")
NONFINITE_DIFFERENCE = ("{mismatched} of {total} elements are outside atol={atol} + rtol={rtol} * |expected|; some "
                        "are infinite or NaN\nwhere the reference's are finite, or the reverse, so no error size "
                        "applies.")
# every element within its tolerance, the relative L2 bound broken: the sentence above would read "0 of N elements are
# outside ..." and hide which rule failed (played LLM, session 24: a KL-divergence loss, a 0-d output)
SMALL_OUTPUT_DIFFERENCE = ("Every element is within atol={atol} + rtol={rtol} * |expected|, but the relative L2 error "
                           "{rel_l2} exceeds its bound {rel_l2_bound}:\nthe output is small next to atol, so it is "
                           "judged relative to its own size{single}.")
# an index is right or wrong: error sizes of an int64 output read as wrong math (played LLM, session 22, moe_top2)
INDEX_DIFFERENCE = ("{mismatched} of {total} indices (int64) differ from the reference's; an index is exact, so no "
                    "error size applies.\nWhere equal values make the choice arbitrary, an index that selects the "
                    "same value as the reference's is\naccepted; these were not (check what is ranked, along which "
                    "dim, and in which order).")


def _value(entry: dict, key: str) -> str:
    """``entry[key]`` as an integer output's exact value (the int64 poison, -9223372036854775808), else ``_num``."""
    v, dtype = entry.get(key), str(entry.get("dtype", "float"))
    return str(int(v)) if isinstance(v, float) and v.is_integer() and not dtype.startswith(("float", "bfloat")) \
        else _num(v)


def _index(at: list) -> str:
    """An input's index as Python writes it, ``:`` for a dim quoted whole: "(1, 2)", "(2,)", "(:, 19)"."""
    parts = [":" if i is None else str(i) for i in at]
    return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"


def _ratio(entry: dict) -> str:
    """A differing output's factor against the reference (``compare.other_outputs``), with what a single value means
    for the outputs computed from it."""
    if entry.get("ratio") is None:
        return ""
    single = "; a single value: outputs computed from it differ as a consequence" if entry.get("total") == 1 else ""
    return f" ({entry['ratio']:.4g} times the reference's{single})"


def render_feedback(result: EvalResult | None, *, problem: str | None = None, device: str = "cpu",
                    target: float = 1.0, stated: list[list[dict]] | None = None, asked: list[dict] | None = None) -> str:
    """The feedback text for one candidate (``result`` None: the answer was malformed, ``problem`` says how).
    ``stated``: per config of ``result``, the configs as the reference states them that its check stands for (on the
    CPU, its free dims were at SMALL_CONFIG's sizes): the configs are named by them. ``asked``: the configs the
    evaluation was to check, in order, when it stops at the first failing one (a mismatch names those left)."""
    if result is None:
        return render("feedback.malformed_answer", problem=problem or "no python code block")
    failure = dict(result.failure or {})
    status = result.status
    if status == "ok":
        cost = resources(result.plans)
        cost = f"\n\n{cost}" if cost else ""
        if result.timing_available and all(c.candidate is not None for c in result.configs):
            return render("feedback.timing", device=device, rows=timing_rows(result.configs),
                          verdict=verdict(result.configs, target), target=_num(target)) + cost
        names = [" and ".join(map(_cfg, stated[i])) if stated and i < len(stated) and stated[i] else _cfg(c.config)
                 for i, c in enumerate(result.configs)]  # played LLM session 39: not the free dims' CPU sizes
        smaller = [f"{names[i]} at {_cfg(c.evaluated_at)}" for i, c in enumerate(result.configs) if c.evaluated_at]
        runs = [f"- {n}" for c in result.configs for n in c.notes if RAN in n or NOT_RAN in n]
        checked = (f"\nChecked at smaller sizes (inputs or outputs too large for the interpreter; {INTERPRETER_RULE}): "
                   f"{'; '.join(smaller)}." + ("" if runs else " A path your kernel takes only at the sizes as stated "
                                               "was compiled for them, not run.")) if smaller else ""
        if runs:  # played LLM, session 24: a kernel's paths for long sequences never ran on the CPU
            checked += f"\nAt the GPU's sizes ({FULL_RUN_RULE}):\n" + "\n".join(runs)
        skipped = [f"{_cfg(c.evaluated_at or c.config)}: {n[len(TAILS_NOT_CHECKED):].strip()}"
                   for c in result.configs for n in c.notes if n.startswith(TAILS_NOT_CHECKED)]
        if skipped:  # played LLM, session 22: only eval.json said so
            checked += "\nTail sizes not checked (too large for the interpreter) at " + "; ".join(skipped) + "."
        spills = most_local_memory(result.plans)
        distinct = len({_cfg(c.evaluated_at or c.config) for c in result.configs})  # one check
        # stands for configs the interpreter runs alike (played LLM 44b: "3 checked" for 2 checks)
        launches = plan_launches(result.plans)
        idle, narrow = idle_launch(launches), narrow_rows(launches)
        head = UNTIMED_SPILLS.format(configs=distinct, device=device, bytes=spills[0],
                                     where=f"{spills[1]['kernel']} at {_cfg(spills[2])}",
                                     registers=spills[1]["registers"]) if spills[0] >= SPILL_BYTES else \
            UNTIMED_IDLE.format(configs=distinct, device=device, config=_cfg(idle["config"]), kernel=idle["kernel"],
                                blocks=idle["blocks"], sms=idle["sms"], kib=idle["bytes"] // idle["blocks"] >> 10,
                                mib=_num(idle["bytes"] / (1 << 20), 3)) if idle else \
            UNTIMED_NARROW.format(configs=distinct, device=device, config=_cfg(narrow["config"]),
                                  kernel=narrow["kernel"], tensor=narrow["tensor"],
                                  bits=8 * narrow["access_bytes"][narrow["tensor"]]) if narrow else \
            UNTIMED_OK.format(configs=distinct, device=device)
        return head + checked + cost
    if status == "compile_error" and isinstance(failure.get("diagnostic"), dict):
        d = failure["diagnostic"]
        notes = d.get("notes") or []
        notes_text = "\n".join(f"  note: {n}" for n in notes) if isinstance(notes, list) else str(notes)
        # the config it failed at (played LLM 47: E506 at C=150 only, C=19 compiled; the prompt did not say which)
        where = (f" at the config the GPU runs, {_cfg(failure.get('config'))} (compiled for the GPU and not run: "
                 f"the CPU checks smaller sizes)") if failure.get("planned") else \
            f" at config {_cfg(failure['config'])}" if failure.get("config") else ""
        return render("feedback.compile_error", **{**{k: "" if v is None else v for k, v in d.items()},
                                                   "notes": notes_text, "excerpt": d.get("excerpt") or "",
                                                   "hint": f"  hint: {d['hint']}" if d.get("hint") else "",
                                                   "where": where})
    if status == "mismatch" and "index" in failure:
        f = {k: _num(v) for k, v in failure.items()}
        e, g, digits = failure.get("expected"), failure.get("got"), 4
        while isinstance(e, float) and isinstance(g, float) and e != g and digits < 9 and _num(e, digits) == \
                _num(g, digits):  # played LLM 46b: "expected 14.06, got 14.06"
            digits += 1
        f["expected"], f["got"] = _num(e, digits), _num(g, digits)
        f["config"] = _cfg(failure.get("config"))
        if tail := failure.get("tail_of"):  # played LLM 46: a mask one key too long, wrong at a tail only
            f["config"] += (f" (a tail size of config {_cfg(tail)}, which itself passed: sizes just off the config's, "
                            f"where a tile ends part-full)")
        done = [c.config for c in result.configs if c.correct]
        pending = [c for c in asked or () if c not in done]  # in order: the first is the one that failed, whatever
        left = pending[1:]  # size the interpreter checked it at (played LLM 48: M=2 for M=5, listed as not checked)
        f["checked"] = ("\nChecking stops at the first failing config: " +
                        (f"{'; '.join(map(_cfg, done))} passed, " if done else "") +
                        f"{'; '.join(map(_cfg, left))} not checked this turn.") if left else ""
        f["distribution"] = "a hidden distribution" if failure.get("hidden") else f"'{failure.get('distribution')}'"
        f["index"] = str(tuple(failure["index"])) if isinstance(failure["index"], list) else f["index"]
        needed = ("output", "expected", "got", "mismatched", "total", "atol", "rtol", "max_abs_err", "rel_l2", "seed")
        at = failure.get("inputs_at_index") or []
        f["inputs_at_index"] = ("\nInputs at that index: " + ", ".join(
            f"input {p} = " + (f"[{', '.join(_num(x, 6) for x in v)}]" + ("" if own else " (its last dim)")
                               if isinstance(v, list) else _num(v, 6)) + (
                f" (at its index {_index(own[0])})" if own else "")
            for p, v, *own in at) + ".") if at else ""
        if segment := failure.get("segment_at_index"):
            p, dim, k, start, end = segment
            f["inputs_at_index"] += (f"\nInput {p} reads as offsets along dim {dim}: index {failure['index'][dim]} "
                                     f"there lies in its segment {k}, rows {start} to {end - 1} ({end - start} "
                                     f"row{'s' if end - start != 1 else ''}).")
        f = {**{k: "-" for k in needed}, **f}
        f["single"] = " (a single value: a relative tolerance)" if failure.get("total") == 1 else ""
        nonfinite = failure.get("rel_l2") == "nan"  # evaluator.compare.json_floats
        f["difference"] = (INDEX_DIFFERENCE if failure.get("dtype") == "int64" else
                           NONFINITE_DIFFERENCE if nonfinite else
                           SMALL_OUTPUT_DIFFERENCE if failure.get("mismatched") == 0 and "rel_l2_bound" in failure else
                           FLOAT_DIFFERENCE).format(**f)
        rel = failure.get("rel_l2")
        gross = isinstance(rel, (int, float)) and rel > GROSS_REL_L2  # not rounding: a wrong element or term
        expected, got, atol = (failure.get(k) for k in ("expected", "got", "atol"))
        off = abs(got - expected) / abs(expected) if all(isinstance(v, (int, float)) for v in (expected, got, atol)) \
            and abs(expected) >= max(10 * atol, 1e-30) and 2 * (failure.get("mismatched") or 0) <= \
            (failure.get("total") or 0) else 0.0  # played LLM session 45: a sparsemax threshold 47%
        # off at the element shown (few elements: relative L2 0.3%) read as precision
        lead, n = "\nAgainst a float64 evaluation of the reference, ", failure.get("oracle_mismatched")
        spread = failure.get("oracle_l2_ratio")  # every element within twice the reference's error, the L2 not
        worst = (f"(max abs error {_num(failure.get('oracle_max_abs_err'))}, the reference's "
                 f"{_num(failure.get('reference_max_abs_err'))})")
        others = (failure.get("distributions") or {}).get("public", {})
        cause = (f"far beyond rounding (relative L2 error above {GROSS_REL_L2:.0%}), yet the same config and seed are "
                 f"correct under 'normal' (below): these values break a step the others do not, by precision or "
                 f"range (a difference of nearly equal values held in fp16 / bf16, which inputs with a large common "
                 f"offset give; an overflow) or by a path only they take." if gross and others.get("normal") ==
                 "correct" else  # played LLM 48: a bf16 dy - sum(dy * y) at dy ~ 64 read as a wrong element
                 f"far beyond rounding (relative L2 error above {GROSS_REL_L2:.0%}): a wrong element, not precision."
                 if gross else f"far beyond rounding (the element shown is {off:.0%} off its value): a wrong "
                 f"element, not precision." if off >= GROSS_ELEMENT else
                 "a systematic error (the pattern above), not precision." if failure.get("systematic") else
                 "your kernel is less accurate than the reference's own arithmetic.")
        if n and nonfinite:  # played LLM session 44b: a min-p mask applied before the temperature read as precision
            f["oracle"] = (f"{lead}{n} element(s) differ too, some of them infinite or NaN on one side only: a mask, "
                           f"a fill or an overflow, not precision.")
        elif n:
            f["oracle"] = f"{lead}{n} element(s) are off by more than twice the reference's own error {worst}: {cause}"
        elif spread:  # played LLM 46b's cdist_l2 on an H100
            f["oracle"] = (f"{lead}every element is within twice the reference's own error {worst}, but more of them "
                           f"are off: the L2 norm of the error is {_num(spread, 3)}x the reference's: {cause}")
        else:
            f["oracle"] = ""
        f["where_outside"] = f"\nThe differing elements: {failure['where_outside']}." if failure.get("where_outside") \
            else ""
        for position, d, inside, rest in failure.get("inputs_peak") or []:
            f["where_outside"] += (f"\nInput {position} is largest there: |values| up to {_num(inside, 3)} at those "
                                   f"indices of dim {d}, at most {_num(rest, 3)} at the others (an overflow or a "
                                   "precision loss at large magnitudes, rather than an index or tail error?)")
        if failure.get("found_at"):
            more = failure.get("found_count", 1) - 1
            also = f" (and at {more} other element(s))" if more else ""
            source = "the reference's" + (f" output {failure['found_in']}" if "found_in" in failure else "")
            f["where_outside"] += (f"\nThe value got at that index is {source} at index "
                                   f"{tuple(failure['found_at'])}{also}: an element read from the wrong place?")
        if origin := failure.get("got_from_input"):
            p, at, scaled = origin
            f["where_outside"] += (f"\nThe value got is input {p}'s at index {tuple(at)}; the failing index, scaled "
                                   f"by the two shapes' ratio, falls at {tuple(scaled)} of it: a window, stride or "
                                   f"padding that reads there?")
        f["distributions"] = sentence(failure["distributions"]) if failure.get("distributions") else ""
        f["hint"] = f"\nThe pattern: {failure['hint']}." if failure.get("hint") else ""
        f["other_outputs"] = "".join(
            f"\nOutput {e['output']} differs too: {e['mismatched']} of {e['total']} elements, e.g. at index "
            f"{tuple(e['index'])}: expected {_value(e, 'expected')}, got {_value(e, 'got')}{_ratio(e)}."
            for e in failure.get("other_outputs") or [])
        matching = failure.get("matching_outputs") or []
        f["matching_outputs"] = (f"\nOutput{'s' if len(matching) > 1 else ''} {', '.join(map(str, matching))} "
                                 f"match{'' if len(matching) > 1 else 'es'} the reference.") if matching else ""
        return render("feedback.mismatch", **f)
    if status == "guard_violation":
        rule = failure.get("rule", "?")
        return render("feedback.guard_violation_init" if rule == "init-random" else "feedback.guard_violation",
                      rule=rule, message=result.message)
    if status == "timeout" and not device.startswith("cuda"):
        correct = [_cfg(c.config) + (f" (at {_cfg(c.evaluated_at)})" if c.evaluated_at else "") +
                   (f" in {c.seconds['check']:.0f} s" if (c.seconds or {}).get("check") else "")
                   for c in result.configs if c.correct]
        passed = f"\nChecked correct before the timeout: {'; '.join(correct)}." if correct else ""
        sizes = failure.get("sizes_cause") is True  # evaluator.check_watch: the check sizes are over the budget
        return render("feedback.cpu_timeout_sizes" if sizes else "feedback.cpu_timeout", message=result.message,
                      passed=passed)
    if status in ("timeout", "crash"):
        return render("feedback.worker_error", kind=failure.get("kind", status), message=result.message)
    if failure.get("exception") == "KernelFault":
        return render("feedback.kernel_fault", message=result.message)
    return render("feedback.candidate_error", kind=failure.get("kind", status), message=result.message)


def summary(result: EvalResult | None, problem: str | None = None) -> str:
    """One line: 'correct (9/9 configs), worst x1.31 over torch.compile' or 'mismatch: output 0 ...'."""
    if result is None:
        return f"malformed answer: {problem}"
    if result.status == "ok":
        text = f"correct ({len(result.configs)}/{len(result.configs)} configs)"
        comp = [c.speedup_compiled for c in result.configs if c.speedup_compiled]
        eager = [c.speedup_eager for c in result.configs if c.speedup_eager]
        if eager:
            text += f", worst x{min(eager):.2f} over eager"
        if comp:
            text += f", x{min(comp):.2f} over torch.compile"
        return text
    first = result.message.strip().splitlines()[0] if result.message.strip() else ""
    if len(first) > 160:  # at a word's end, marked: the feedback has the whole message
        first = first[:160].rsplit(" ", 1)[0].rstrip(";,") + " ..."
    return f"{result.status}: {first}"


__all__ = ["render_feedback", "resources", "summary", "timing_rows"]
