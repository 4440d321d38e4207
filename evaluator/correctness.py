"""Correctness: is the candidate right on every config, seed, input distribution and tail size, without tricks?

In: a ``Spec``, the candidate's path, a device. Out: one ``ConfigResult`` per config (tails folded into their config).
Guarantees, for every config (and each tail config of its free dims):

- ``seeds`` seeds (tails: ``max(1, seeds // 2)``) x every distribution of the spec (public and hidden);
- per check, on clones of the same inputs: candidate (call 1), reference, candidate again (call 2, on the input
  buffers of the previous check's call 1, refilled with this check's values: a result cached by address or identity
  comes out stale); inputs are compared with a pristine copy after each candidate call (mutation check);
- every call runs under the run-time guard (``evaluator.guards``), which also fills each allocation the forward
  makes with NaN, so an element the kernel never writes shows up as NaN (poisoned outputs);
- outputs are compared in float64: elementwise ``|got - expected| <= atol + rtol * |expected|`` (per-dtype
  tolerances, spec overrides) and ``||got - expected||_2 <= rel_l2 * ||expected||_2``; NaN and Inf pass only where
  the reference has the same value at the same place;
- a failing call is run once more on fresh buffers at a new address: if the calls disagree the candidate is stateful
  or caches by identity (``GuardViolation`` rule inconsistent-runs), else it is a ``Mismatch``;
- degenerate references (an output below atol everywhere, or constant) are flagged in ``ConfigResult.notes``;
- the indices of a (values, indices) pair (top-k, sort) may list the reference's indices of equal values in another
  order along the last dim (``compare_indices``: the order of ties is not defined);
- an int64 output may also differ where the reference chose among equal values: the candidate's index selects the
  same score in what the reference's topk / sort / argmax call ranked, or the reference returns the candidate's
  value when re-run on inputs perturbed far below the tolerances (``compare_ties``, ``evaluator.ties``: which of
  equal values an index op picks is not defined); anything else is a mismatch.

Raises the first ``CandidateError`` (``Mismatch``, ``GuardViolation``, ``CompileFailed``, ``RunFailed``,
``LoadFailed``) with the details the agent needs, or ``SpecError`` when the reference itself fails.
"""

from __future__ import annotations

import math
import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tileagent.evaluator.candidate import read_candidate
from tileagent.evaluator.errors import EvalError, Mismatch
from tileagent.evaluator.compare import common_offset, common_ratio, compared, finite_range, held_indices, \
    index_outside, json_floats as _json_floats, other_outputs, outside as _outside, rare_value_at, where_outside
from tileagent.evaluator.guards import _overlaps, _storage_range, violation
from tileagent.evaluator.held_outputs import HeldOutputs
from tileagent.evaluator.inputs_at import with_inputs_at_index
from tileagent.evaluator import oracle, other_distributions
from tileagent.evaluator.interpreter_sizes import TAILS_NOT_CHECKED, fit_tail, too_large
from tileagent.evaluator.sandbox import Buffer, Sandbox
from tileagent.evaluator.records import ConfigResult
from tileagent.evaluator.spec import HIDDEN, Spec, Tolerance, identical
from tileagent.evaluator.overflow_edge import explained
from tileagent.evaluator.ties import TIE_CHANGE, TIE_RUNS, TieRuns, equal_scores, not_opposite, unexplained


def check_candidate(spec: Spec, candidate_path, device="cpu", configs=None, seeds: int = 5, distributions=None,
                    static_checks: bool = True, sandbox: Sandbox | None = None,
                    seed: int | None = None, max_tail_elements: int | None = None, tails: bool = True,
                    budget_s: float | None = None, on_call: Callable[[int, float], None] | None = None,
                    probe_until: float | None = None) -> list[ConfigResult]:
    """Check the candidate at ``candidate_path`` against ``spec`` on ``configs`` (default: the spec's grid).

    The candidate runs in its own process (``evaluator.sandbox``); the reference, the comparisons and the verdict
    stay in this one.

    Args:
        spec: the loaded reference (``evaluator.spec.load_spec``).
        candidate_path: the candidate module (defines ``class ModelNew``).
        device: where inputs, models and outputs live ("cpu" runs kernels in the interpreter).
        configs: configs to check; tails of the spec's free dims are added to each.
        seeds: seeds per config and distribution (at least 1).
        distributions: names to use (default: the spec's, public and hidden).
        static_checks: run the static guard before importing (tests turn it off to exercise the run-time guard).
        sandbox: the candidate's process to use (``evaluator.worker.evaluate`` shares one with timing); default: a
            new one, closed on return.
        seed: the evaluation's base seed (default: drawn from the OS; each result records it, for a replay).
        max_tail_elements: tail sizes whose inputs hold more elements are not checked (the CPU interpreter's limit:
            a config it checks at a wide V with M halved to 1 would check M up to 7 at that V); the note says which.
        tails: also check the tail sizes of the free dims (``Spec.tail_configs``).
        budget_s: each call of the candidate may take this long on the CPU interpreter, else ``Timeout``.
        on_call: told (the calls of the candidate this config's checks have finished, the seconds the last took)
            after each call (the worker forwards it, so that a timeout can say how far the checks got).
        probe_until: a ``time.perf_counter()`` time by which a mismatch's look at the other distributions
            (``evaluator.other_distributions``) stops, so that it cannot turn the mismatch into a timeout.

    Raises:
        CandidateError: the first failure (Mismatch, GuardViolation, CompileFailed, RunFailed, LoadFailed).
        SpecError: the reference failed on a config.
    """
    read_candidate(candidate_path, static_checks)
    own = sandbox is None
    if own:
        sandbox = Sandbox(candidate_path, device)
    base = draw_seed() if seed is None else int(seed)
    try:
        dists = tuple(distributions or spec.distributions)
        results = []
        for config in configs if configs is not None else spec.configs:
            checker = _ConfigCheck(spec, sandbox, device, base, budget_s, on_call, probe_until)
            checker.run(config, max(1, seeds), dists)
            tails, fixed = (spec.tail_configs(config, base), spec.tail_configs(config)) if tails else ([], [])
            if max_tail_elements is not None:
                kept, large = [], []
                for t in tails:
                    fit = t
                    if too_large(spec, t, max_tail_elements):  # v - 1 / v + 3 fitted, residue tails skipped
                        fit = fit_tail(spec, t, config, max_tail_elements) if t in fixed else None
                    if fit is None or fit in kept or fit == config:
                        large.append(t)
                        continue
                    kept.append(fit)
                    if t in fixed and fit is not t:
                        fixed.append(fit)  # checked with a fixed tail's seeds
                tails = kept
                if large:
                    checker.note(f"{TAILS_NOT_CHECKED} (inputs over {max_tail_elements:,} elements): "
                                 f"{', '.join(str(t) for t in large)}")
            for i, tail in enumerate(tails):
                if tail in fixed:
                    checker.run(tail, max(1, seeds // 2), dists, tail_of=config)
                else:  # a residue tail: one seed, two distributions (rotating, so all are covered over the tails)
                    checker.run(tail, 1, tuple(dists[(2 * i + j) % len(dists)] for j in range(min(2, len(dists)))),
                                tail_of=config)
            if tails:
                checker.note(f"tail sizes checked: {', '.join(str(t) for t in tails)}")
            results.append(ConfigResult(config=config, correct=True, checks=checker.checks,
                                        max_abs_err=checker.max_abs, rel_l2=checker.rel_l2, seed=base,
                                        notes=(checker.degenerate_notes() + checker.oracle_notes() +
                                               checker.ties_notes() + checker.notes)))
        return results
    finally:
        if own:
            sandbox.close()


def timed_calls(spec: Spec, sandbox: Sandbox, config: dict, device="cpu", trials: int = 50, warmup: int = 5,
                seed: int | None = None, samples: int = 5, distribution: str = "normal") -> list[float]:
    """The candidate's time (ms) of ``trials`` calls on ``config``, each on freshly drawn inputs (new values in the
    same shared buffers: nothing can be cached by content or by address), made exactly as the checks make their calls
    (``Sandbox.call``: same process, guard, buffers and poison). ``samples`` trials chosen at random (from ``seed``,
    drawn from the OS by default; the candidate cannot know which) are compared with the reference like a check; every
    trial's outputs are checked for aliasing and earlier outputs re-checked. Warm-up calls (at least ``warmup``, and
    100 ms) come first, on fresh inputs as well.

    Raises:
        Mismatch: a sampled timed call's outputs differ from the reference ("timed trial N" in the message).
        GuardViolation: any rule, as in the checks.
    """
    base = draw_seed() if seed is None else int(seed)
    checker = _ConfigCheck(spec, sandbox, device, base)
    model, key = checker.build(config)
    rng = random.Random(base)
    sampled = set(rng.sample(range(trials), min(samples, trials)))
    arena: list[Buffer] | None = None
    times: list[float] = []
    t0, k, total = time.perf_counter(), 0, None
    while total is None or k < total:
        inputs = spec.make_inputs(config, checker.input_seed(1000 + k), distribution, device)
        if arena is None:
            arena = [Buffer(t.clone()) for t in inputs]
        else:
            for b, v in zip(arena, inputs):
                b.tensor.copy_(v)
        trial = k - (total - trials) if total is not None else None
        where = {"config": config, "seed": 1000 + k, "input_seed": checker.input_seed(1000 + k),
                 "distribution": distribution, "hidden": distribution in HIDDEN,
                 "trial": trial if trial is not None else f"warm-up {k}"}
        outs = checker.call(key, arena, inputs, where)
        if trial is not None:
            times.append(sandbox.last_ms)
            if trial in sampled:
                ref = spec.run_reference(model, [t.clone() for t in inputs], config)
                failure = checker.compare(outs, ref, where, 1, checker.oracle(model, inputs),
                                          checker.tie_runs(model, inputs, config))
                if failure is not None:
                    raise with_inputs_at_index(failure, inputs, outs)
        k += 1
        if total is None and k >= warmup and time.perf_counter() - t0 >= 0.1:
            total = k + trials
    sandbox.forget(arena)
    return times


def draw_seed() -> int:
    """A seed from the OS (the candidate's process cannot derive it)."""
    return secrets.randbits(62)


ORACLE_FACTOR = 2.0  # the oracle rule accepts an error up to this multiple of the reference's own error


def _has_gemm(check) -> bool:
    """Whether the candidate's source calls a gemm; True when unknown (played LLM 46b: the TF32 line misled without)."""
    path = getattr(getattr(check, "sandbox", None), "path", None)
    try:
        return path is None or "gemm" in Path(path).read_text()
    except OSError:
        return True


class _ConfigCheck:
    """The checks of one config and its tails; accumulates statistics and notes."""

    def __init__(self, spec: Spec, sandbox: Sandbox, device, base_seed: int, budget_s: float | None = None,
                 on_call: Callable[[int, float], None] | None = None, probe_until: float | None = None):
        self.spec, self.sandbox, self.device, self.base = spec, sandbox, str(device), base_seed
        self.budget_s = budget_s  # the time one call may take on the CPU interpreter (None: no limit)
        self.on_call, self.calls = on_call, 0  # told after each call of the candidate (check_candidate's on_call)
        self.probe_until = probe_until  # check_candidate's
        self.checks, self.max_abs, self.rel_l2 = 0, 0.0, 0.0
        self.notes: list[str] = []
        self.peaks: dict = {}  # (output, distribution) -> max |reference| seen
        self.constant: dict = {}  # (output, distribution) -> the reference was constant in every check
        self.flat: dict = {}  # (output, distribution) -> a constant (its values' midpoint) was within the tolerance
        self.nonfinite: dict = {}  # output -> the distributions under which the reference gave NaN or Inf
        self.atol: dict = {}  # output -> atol of its dtype
        self.held = HeldOutputs()  # earlier outputs the caller still holds (the output-reused rule)
        self.models64: dict = {}  # id(reference model) -> (model, its float64 copy or None)
        self.oracle_accepted: dict = {}  # output -> (the reference's worst own error, the oracle rules that decided)
        self.ties_accepted: dict = {}  # output -> differing int64 elements the tie rule accepted
        self.built: tuple | None = None  # (repr(constructor arguments), reference Model, ModelNew's key): ``build``

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def input_seed(self, k: int) -> int:
        return (self.base + 1_000_003 * k) % (1 << 62)

    def build(self, config: dict):
        """(the reference Model, the key of ModelNew in the candidate's process) for ``config``. A config and its
        tails that give the constructors the same arguments share both models, as one module serves every batch
        size in a real model: a reference with tables of 50257 x 1600 was built 32 times per config otherwise."""
        init = self.spec.init_inputs(config)
        if self.built is not None and self.built[0] == repr(init):
            return self.built[1:]
        model = self.spec.make_model(config, self.device)
        if model.redrawn:
            self.note(f"constant parameters re-drawn at random (a kernel must use them): {', '.join(model.redrawn)}")
        dtype = self.spec.dtypes if isinstance(self.spec.dtypes, torch.dtype) else None
        key = self.sandbox.build(config, init, model.state_dict(), 0, dtype)
        self.built = (repr(init), model, key)  # the last one only: a config's tails come right after it
        return model, key

    def run(self, config: dict, seeds: int, dists: tuple[str, ...], tail_of: dict | None = None) -> None:
        self.sandbox.trim()  # the last config's cached blocks, in both processes, are free for this one
        model, key = self.build(config)
        self.spec.validate(config, self.device, model)
        previous = None  # the input buffers of the last check's first call, refilled for the next check's second call
        if len(dists) > 1 and not self.spec.drawn(config):  # played LLM session 38: 55 identical checks a config
            dists = dists[:1]
            if tail_of is None:
                self.note("no input is drawn from the input distributions (none is floating): one check a seed")
        for seed in range(seeds):
            for dist in dists:
                where = {"config": config, "seed": seed, "input_seed": self.input_seed(seed), "distribution": dist,
                         "hidden": dist in HIDDEN}
                if tail_of is not None:
                    where["tail_of"] = tail_of
                inputs = self.spec.make_inputs(config, self.input_seed(seed), dist, self.device)
                try:
                    previous = self.check(model, key, inputs, previous, where)
                except Mismatch as e:  # the same seed under the other distributions, for the feedback
                    raise other_distributions.probe(self, model, key, e, dists)
        if previous is not None:  # the runner's mapping keeps the memory alive in this process too (CUDA IPC)
            self.sandbox.forget(previous)

    def call(self, key, buffers: list[Buffer], pristine, where: dict) -> tuple[torch.Tensor, ...]:
        try:
            start = time.perf_counter()
            outs, _ = self.sandbox.call(key, buffers, f" ({_where(where)})", self.budget_s)
            self.calls += 1
            if self.on_call is not None:
                self.on_call(self.calls, time.perf_counter() - start)
        except EvalError as e:
            e.details.update({k: v for k, v in where.items() if k not in e.details})
            if _where(where) not in e.message:
                e.message = f"{e.message}; {_where(where)}"
            e.args = (e.message,)
            raise
        for j, (b, p) in enumerate(zip(buffers, pristine)):
            if not identical(b.tensor, p):
                raise violation("input-mutation", f"the forward changed input {j} (every input must be left as it "
                                f"was); {_where(where)}", input=j, **where)
        self.check_storage(outs, buffers, where)
        return outs

    def check_storage(self, outs, buffers: list[Buffer], where: dict) -> None:
        """Outputs alias no input and no held earlier output, and every held earlier output is as it was."""
        for k, o in enumerate(outs):
            mine = _storage_range(o)
            for j, b in enumerate(buffers):
                if _overlaps(mine, _storage_range(b.tensor)):
                    raise violation("output-aliases-input", f"output {k} shares memory with input {j}: return a new "
                                    f"tensor; {_where(where)}", output=k, input=j, **where)
        self.held.check(outs, where, _where(where))
        self.held.hold(outs)

    def check(self, model, key, inputs, previous: list[Buffer] | None, where: dict):
        spec = self.spec  # the reference first: its temporaries and the candidate's buffers need not fit together
        ref = spec.run_reference(model, [t.clone() for t in inputs], where["config"])
        first = [Buffer(t.clone()) for t in inputs]
        out1 = self.call(key, first, inputs, where)
        if previous is not None and all(a.tensor.shape == b.shape and a.tensor.dtype == b.dtype
                                        for a, b in zip(previous, inputs)):
            second = previous
            for b, v in zip(second, inputs):
                b.tensor.copy_(v)
        else:
            if previous is not None:
                self.sandbox.forget(previous)
            second = [Buffer(t.clone()) for t in inputs]
        out2 = self.call(key, second, inputs, where)
        oracle, ties = self.oracle(model, inputs), self.tie_runs(model, inputs, where["config"])
        fail1, fail2 = self.compare(out1, ref, where, 1, oracle, ties), self.compare(out2, ref, where, 2, oracle, ties)
        if fail1 or fail2:
            fresh = [Buffer(_at_new_address(t)) for t in inputs]
            fail3 = self.compare(self.call(key, fresh, inputs, where), ref, where, 3, oracle, ties)
            if fail1 and fail2 and fail3:
                raise with_inputs_at_index(fail1, inputs, out1)
            verdicts = ", ".join(f"call {k} {'did not match' if f else 'matched'}"
                                 for k, f in ((1, fail1), (2, fail2), (3, fail3)))
            raise violation("inconsistent-runs", f"the same inputs gave different results in different calls "
                            f"({verdicts} the reference; call 2 reused an earlier call's input buffers refilled with "
                            f"these values, call 3 used fresh buffers): results cached by input address or identity, "
                            f"state kept between calls, or on the CPU a result that depends on the order of a "
                            f"kernel's blocks (every second launch runs them last to first, as a GPU may); "
                            f"{_where(where)}", **where)
        self.sandbox.forget(second)  # fresh, or the last check's first buffers: ``first`` is refilled next time
        self.checks += 2
        for k, (a, b) in enumerate(zip(out1, out2)):
            if not identical(a, b):
                self.note(f"the candidate is not bitwise deterministic: two calls on the same inputs differ "
                          f"(output {k})")
        self.flag_degenerate(ref, where)
        return first

    def compare(self, outs, ref, where: dict, call: int, oracle=None, ties=None) -> Mismatch | None:
        """The first output that fails every rule (``compare_one``, ``compare_indices``, ``compare_oracle``,
        ``compare_ties``), as a Mismatch; None when all pass. ``oracle`` (a function returning the float64 oracle's
        outputs, or None where the reference cannot run in float64) is called only when an output fails the fixed
        rule; ``ties`` (``tie_runs``) only when an int64 output fails the rules before it."""
        if len(outs) != len(ref):
            return Mismatch(f"ModelNew returned {len(outs)} output(s), the reference {len(ref)}; {_where(where)}",
                            call=call, **where)
        for k, (o, r) in enumerate(zip(outs, ref)):
            failure = self.compare_one(k, o, r, self.spec.tolerance(r.dtype), where, call)
            if failure and k > 0 and failure.details.get("index") is not None:
                failure = self.compare_indices(k, outs, ref, failure)
            if failure and oracle is not None and failure.details.get("index") is not None:
                truth = oracle()
                if truth is not None:
                    spread = (lambda t=truth[k]: ties.own_error(k, SPREAD_RUNS, t)) if ties is not None else None
                    failure = self.compare_oracle(k, o, r, truth[k], self.spec.tolerance(r.dtype), where, failure,
                                                  spread)
            if failure and ties is not None and o.is_floating_point() and failure.details.get("index") is not None:
                failure = self.compare_overflow_edge(k, o, r, ties, self.spec.tolerance(r.dtype), failure)
            if failure and ties is not None and o.dtype == r.dtype == torch.int64 and \
                    failure.details.get("index") is not None:
                failure = self.compare_ties(k, o, r, ties, failure)
            if failure and ties is not None and o.dtype == r.dtype and o.is_floating_point() and o.dim() and \
                    failure.details.get("index") is not None:
                failure = self.compare_float_ties(k, o, r, ties, self.spec.tolerance(r.dtype), failure)
            if failure:
                return self.also_differ(failure, k, outs, ref)
        return None

    def also_differ(self, failure: Mismatch, k: int, outs, ref) -> Mismatch:
        """``failure`` (of output ``k``) with what the other outputs say (``compare.other_outputs``)."""
        return other_outputs(failure, k, outs, ref, self.spec.tolerance)

    def compare_indices(self, k: int, outs, ref, failure: Mismatch) -> Mismatch | None:
        """The rule for the indices of equal values (``torch.topk``, ``sort``, ``max(dim)`` return (values, indices),
        and the order of equal values among the indices is not defined: CUDA's top-k sorts its selection with a
        bitonic sort): an integer output ``k`` right after a floating output of its shape (the values) may differ from
        the reference's indices only by a permutation, within a row (the last dim), of positions whose reference
        values are equal within the values' tolerance, where the reference's values are sorted along the last dim
        in every row (a ranking: top-k, sort; not ``max(dim=0)`` of a 3-d tensor, whose positions along the last
        dim are different elements). Then each index the candidate returns is one the reference
        returned at a position of the same value, so it selects the same element; the values themselves are checked
        as output ``k - 1``. Returns None (accepted, with a note) or ``failure`` saying why the rule did not apply. An
        index the reference did not return (a tie at the k-th value with an element left out) cannot be verified
        from the outputs and stays a mismatch."""
        o, r, values = outs[k], ref[k], ref[k - 1]
        if o.is_floating_point() or r.is_floating_point() or not isinstance(values, torch.Tensor) or \
                not values.is_floating_point() or tuple(values.shape) != tuple(r.shape) or \
                tuple(o.shape) != tuple(r.shape) or r.dim() == 0:
            return failure
        tol = self.spec.tolerance(values.dtype)
        n = r.shape[-1]
        oi, ri = o.detach().reshape(-1, n).long().cpu(), r.detach().reshape(-1, n).long().cpu()
        rv = values.detach().reshape(-1, n).to(torch.float64).cpu()
        step = rv[:, 1:] - rv[:, :-1]
        if not (bool((step <= 0).all()) or bool((step >= 0).all())):  # not a ranking along the last dim: the
            return failure  # positions of a row are other elements (max(dim=0) of a 3-d tensor), not ranks
        rows = (oi != ri).any(dim=1)
        oi, ri, rv = oi[rows], ri[rows], rv[rows]  # the rows with a differing index (vectorized: any size)
        differ = oi != ri
        span = int(max(int(ri.max()), 0)) + 1 if ri.numel() else 1
        valid = (oi >= 0) & (oi < span)
        position = torch.full((ri.shape[0], span), -1, dtype=torch.long)  # where the reference put each index
        position.scatter_(1, ri.clamp(0, span - 1), torch.arange(n).expand_as(ri).contiguous())
        at = torch.where(valid, position.gather(1, oi.clamp(0, span - 1)), torch.full_like(oi, -1))
        there = rv.gather(1, at.clamp_min(0))  # the reference's value where it put the candidate's index
        tied = (at >= 0) & ((there - rv).abs() <= tol.atol + tol.rtol * rv.abs())
        claims = torch.zeros_like(at).scatter_add_(1, at.clamp_min(0), (at >= 0).long())
        once = claims.gather(1, at.clamp_min(0)) == 1  # no other position returns the same reference element
        unmatched = int((differ & ~(tied & once)).sum())  # each index once, each at a position of its value
        if unmatched:
            failure.message = (f"{failure.message}; {unmatched} differing index(es) are not the reference's indices of "
                               f"equal values (within atol={tol.atol:g} + rtol={tol.rtol:g} of output {k - 1}) in "
                               f"another order along the last dim (an element tied with the last selected value "
                               f"that the reference left out cannot be told apart from a wrong index by the outputs "
                               f"alone)")
            failure.args = (failure.message,)
            failure.details["indices_not_tied"] = unmatched
            return failure
        self.note(f"output {k}: indices that differ from the reference's only in the order of equal values (output "
                  f"{k - 1} within its tolerance; the same elements selected in each row) were accepted")
        return None

    def compare_oracle(self, k: int, out, ref, truth, tol: Tolerance, where: dict, failure: Mismatch, spread=None):
        """The second rule (issue 18, point 9): judged against the float64 oracle ``truth``, an element passes when
        it is within the fixed tolerance of the oracle, or its error against the oracle is at most ``ORACLE_FACTOR``
        times the reference's own worst error on that output; the relative L2 error likewise (within rel_l2 of the oracle's norm, or
        at most ``ORACLE_FACTOR`` times the reference's). None (accepted, with a note saying which rule decided) or
        ``failure`` with the oracle's numbers added. An infinity in ``out`` passes where the oracle's value rounded
        to the output's dtype is that infinity (fp16's 65504 * (1 + 2^-11) and beyond round to inf: a kernel that
        skips the reference's intermediate roundings may overflow one rounding step before it), or is within a
        factor 2 of the dtype's largest value (another order of the same products overflows in an intermediate: a
        parallel cumprod under 'extremes' overflowed where the sequential reference ended at 3.38e38 < 3.40e38); any
        other non-finite output fails. An element the reference itself got as inf or NaN gives the reference no slack
        (its error there is not a scale for the others). Where the oracle is not finite (it overflowed too: a scan
        over the 'extremes' distribution) the element is judged by the fixed rule alone and the others by the oracle
        (played LLM session 25 on the H200: one such element had disabled the oracle for a whole output whose
        cancellations of 1e30-sized terms left 4 of 3 million elements off by the reference's own rounding).
        ``spread`` gives the reference's worst error over runs on inputs perturbed by 2 ulps (``TieRuns.own_error``),
        asked for an output of at most ``SPREAD_NUMEL`` elements (a loss) or one where at most ``SPREAD_FEW`` of the
        elements fail (an ill-conditioned few): one run's error at a few elements is one draw of the rounding noise,
        so the worst of several sets the scale (a distillation KL of nearly equal distributions, 1e-4 of cancelling
        1e-2 terms: a float32 kernel was off by 3.5x eager's error on 30% of its seeds; attention on the 'extremes'
        distribution, scores near 1e8 where one float32 ulp moves a weight by 2.7x: kernels with other summation
        orders than the reference's failed on 100-250 of millions of elements, or passed, by the draw of the data, on
        an H100); and an element passes where its error is within how far those perturbations move the oracle itself
        there (GQA prefill on 'extremes' on an H100: one element at 2.003x the reference's worst error, where the exact
        answer is no better defined). A kernel off at many elements is not widened (and costs no runs)."""
        o, r, t = (x.detach().to(torch.float64) for x in (out, ref, truth))
        if t.shape != o.shape:
            return failure
        # where the oracle overflowed, or the kernel has the reference's own inf or NaN (a float32 overflow the
        # float64 oracle does not have: played LLM session 36, a column sum under 'extremes'), the fixed rule stands
        known = torch.isfinite(t) & ~(~torch.isfinite(o) & ((o == r) | (torch.isnan(o) & torch.isnan(r))))
        if not bool(known.any()):
            return failure
        edge = (torch.sign(o) == torch.sign(t)) & (t.abs() >= torch.finfo(out.dtype).max / 2)
        rounded_overflow = torch.isinf(o) & ((o == t.to(out.dtype).to(torch.float64)) | edge)
        if not bool((torch.isfinite(o) | rounded_overflow | ~known).all()):
            return failure
        o, t = torch.where(rounded_overflow, t, o), torch.where(known, t, torch.zeros_like(t))
        err = torch.where(known, (o - t).abs(), torch.zeros_like(o))
        own = torch.where(torch.isfinite(r) & known, (r - t).abs(), torch.zeros_like(r))
        fixed = err <= tol.atol + tol.rtol * t.abs()
        relative = err <= ORACLE_FACTOR * own.max()  # the reference's worst error sets the scale: its error at one
        # element can be 0 by luck (a GroupNorm over inputs offset by 1000 failed on 8 such elements while its worst
        # error was within 1.2x the reference's)
        bad = torch.where(known, ~(fixed | relative), _outside(out, ref, tol))
        t_l2 = float(torch.linalg.vector_norm(t))
        e_l2, own_l2 = float(torch.linalg.vector_norm(err)), float(torch.linalg.vector_norm(own))
        l2_ok = e_l2 <= tol.rel_l2 * t_l2 or e_l2 <= ORACLE_FACTOR * own_l2
        n_bad, rule = int(bad.sum()), None
        few = out.numel() <= SPREAD_NUMEL or 0 < n_bad <= SPREAD_FEW * out.numel()
        widened = spread() if spread is not None and few and (n_bad or not l2_ok) else None
        if widened is not None:  # the reference's worst over perturbed runs as the scale
            moved = widened[2].to(err.device) if widened[2] is not None else torch.zeros_like(err)
            bad &= ~(known & ((err <= ORACLE_FACTOR * max(float(own.max()), widened[0])) | (err <= moved)))
            moved_l2 = float(torch.linalg.vector_norm(moved))
            l2_ok = l2_ok or e_l2 <= max(ORACLE_FACTOR * max(own_l2, widened[1]), moved_l2)
            n_bad, rule = int(bad.sum()), "oracle-spread"
        if n_bad == 0 and l2_ok:
            rule = rule or ("oracle-tolerance" if bool(fixed.all()) else "oracle-relative")
            worst, rules = self.oracle_accepted.get(k, (0.0, set()))
            self.oracle_accepted[k] = (max(worst, float(own.max())), rules | {rule})
            return None
        ratio, norm = e_l2 / max(own_l2, 1e-300), max(t_l2, 1e-300)  # no element over 2x: the L2 rule failed
        failure.details.update(oracle_mismatched=n_bad, oracle_max_abs_err=float(err.max()),
                               reference_max_abs_err=float(own.max()), **({} if n_bad else {"oracle_l2_ratio": ratio}))
        errs = f"(max abs err {float(err.max()):.3g}, the reference's {float(own.max()):.3g})"
        verdict = (f"{n_bad} element(s) are outside the tolerance and more than {ORACLE_FACTOR:g}x the reference's own "
                   f"error {errs}" if n_bad else f"each element is within {ORACLE_FACTOR:g}x the reference's worst "
                   f"error {errs}, but the L2 error over the output, {e_l2 / norm:.3g} of its norm, is {ratio:.3g}x "
                   f"the reference's ({own_l2 / norm:.3g}): the kernel is off at more elements than the reference")
        failure.message = f"{failure.message}; against the float64 oracle {verdict}"
        failure.args = (failure.message,)
        return failure

    def compare_overflow_edge(self, k: int, out, ref, ties, tol: Tolerance, failure: Mismatch) -> Mismatch | None:
        """``evaluator.overflow_edge``'s rule: None (accepted, with a note) or ``failure``."""
        if not explained(out, ref, _outside(out, ref, tol), lambda i: _output(ties.outputs(i), k),
                         time.monotonic() + FLOAT_TIES_S):
            return failure
        self.note(f"output {k}: element(s) at the dtype's largest finite value where the reference rounded to an "
                  f"infinity of the same sign, on that boundary (inputs perturbed by up to {TIE_CHANGE} make the "
                  f"reference finite there): accepted")
        return None

    def compare_ties(self, k: int, out, ref, ties, failure: Mismatch) -> Mismatch | None:
        """The tie rules (``evaluator.ties``) for an int64 output ``k`` (torch's index dtype; int8 and other integer
        outputs keep the exact check) that the rules above rejected. Where ``ref`` is the indices of an index op the
        reference called (``ties.index_calls()``), every differing element must select a score equal to the one the
        reference's index selects (``equal_scores``); otherwise it must equal the reference's value there in at
        least one run of the reference on perturbed inputs (``ties(i)``: run ``i``'s outputs, or None). None
        (accepted, counted for a note: the reference's choice among equal values is arbitrary) or ``failure`` saying
        how many differing elements neither rule explains."""
        wrong = equal_scores(out, ref, ties.index_calls())
        if wrong is None:
            differ, left = unexplained(out, ref, lambda i: _output(ties(i), k))
            why = (f"{left} of {differ} differing index(es) are not explained by ties either (re-run on {TIE_RUNS} "
                   f"perturbations of the inputs by up to {TIE_CHANGE}, the reference never returned the kernel's "
                   f"value there)")
        else:
            differ, left = int((out != ref).sum()), wrong
            why = (f"{wrong} differing index(es) select a value other than the one the reference's index selects in "
                   f"the scores it ranked (its topk / sort / argmax call): not a choice among equal values")
        if not left:
            self.ties_accepted[k] = self.ties_accepted.get(k, 0) + differ
            return None
        failure.details["ties_unexplained"] = left
        failure.message = f"{failure.message}; {why}"
        failure.args = (failure.message,)
        return failure

    def compare_float_ties(self, k: int, out, ref, ties, tol: Tolerance, failure: Mismatch) -> Mismatch | None:
        """The tie rule for a floating output whose values a rank among equal inputs decides (a top-p mask over a
        sort that is not stable: which of equal probabilities is masked is the sort's arbitrary choice; played LLM,
        session 25): each row (the last dim) with an element outside the tolerance must be, every element of it,
        within the tolerance of one perturbed run of the reference (``ties.outputs(i)``) that itself left the
        tolerance of the reference at each of those elements: a row is one choice the reference makes under a change
        of its inputs far below the tolerances, never a mix of several (keeping every tied element is no run's
        choice), and a smooth output (where a run only drifts) gains no slack. None (accepted, counted for the note)
        or ``failure``. A failure of the relative-L2 bound alone (no element outside) is not a tie."""
        bad = _outside(out, ref, tol)
        if not bool(bad.any()):
            return failure
        width = out.shape[-1]
        left = bad.reshape(-1, width).any(-1)  # rows still unexplained
        rows = int(left.sum())
        stop, jumped = time.monotonic() + FLOAT_TIES_S, False
        pair = None  # the first run of the current antithetic pair (runs 2p and 2p + 1: inputs moved by +u, -u)
        for i in range(TIE_RUNS):
            if time.monotonic() > stop:  # a slow reference (the CPU's run at a config's full sizes): not explained
                break
            if i == FLOAT_TIES_PROBE and not jumped:  # the reference never jumped where the kernel differs: a smooth
                return failure  # output, no choice among ties (the message does not send the reader after ties)
            run = _output(ties.outputs(i), k)
            if run is None or run.shape != out.shape:
                pair = None
                continue
            if i % 2 and pair is not None:  # where the kernel differs the reference jumped: out of tolerance in a
                # pair not moved oppositely (a choice, not a drift: a column sum near zero, played LLM session 36)
                jumped = jumped or bool((bad & (_outside(run, ref, tol) | _outside(pair, ref, tol))
                                         & not_opposite(run, pair, ref, tol)).any())
            pair = run if i % 2 == 0 else None
            left &= (_outside(out, run, tol) | (bad & ~_outside(run, ref, tol))).reshape(-1, width).any(-1)
            if not bool(left.any()):
                self.ties_accepted[k] = self.ties_accepted.get(k, 0) + int(bad.sum())
                return None
        if not jumped or (int(left.sum()) == rows and not ties.index_calls()):  # no row a tie, no rank in the
            return failure  # reference: the sentence would send the reader after ties (played LLM session 37: a NaN
        # scale of an fp8 quantizer, a one-pass variance of an instance norm; their rounding jumps under the runs)
        failure.details["ties_unexplained"] = int(left.sum())
        failure.message = (f"{failure.message}; {int(left.sum())} of the {rows} differing row(s) are not explained by "
                           f"ties either (re-run on {TIE_RUNS} perturbations of the inputs by up to {TIE_CHANGE}, no "
                           f"run of the reference gave the kernel's row)")
        failure.args = (failure.message,)
        return failure

    def tie_runs(self, model, inputs, config: dict) -> TieRuns:
        """The reference's extra runs the tie rules and the oracle rule's spread ask for (``ties.TieRuns``), run as
        the checks run it (same model, device and ``run_reference``; the float64 oracle as ``oracle`` runs it)."""
        return TieRuns(self.spec, model, inputs, config, lambda perturbed_inputs: self._oracle(model, perturbed_inputs))

    def oracle(self, model, inputs):
        """A function giving the reference's outputs computed in float64 (a float64 copy of the model on float64
        inputs; the reference's own casts, e.g. ``.float()``, still apply), or None when it cannot run so; computed
        at most once."""
        memo = []

        def run():
            if not memo:
                memo.append(self._oracle(model, inputs))
            return memo[0]

        return run

    def _oracle(self, model, inputs):
        import copy

        key = id(model)
        if key not in self.models64:
            try:
                with self.spec.running("a float64 copy of Model (the oracle)"):
                    self.models64[key] = (model, copy.deepcopy(model).to(torch.float64))
            except Exception:  # noqa: BLE001 - a model that cannot be copied has no oracle
                self.models64[key] = (model, None)
        m64 = self.models64[key][1]
        if m64 is None:
            return None
        with self.spec.running("Model.forward in float64 (the oracle)"):
            return oracle.run(m64, inputs)

    def compare_one(self, k: int, out, ref, tol: Tolerance, where: dict, call: int) -> Mismatch | None:
        base = {"output": k, "call": call, **where}
        if tuple(out.shape) != tuple(ref.shape):
            return Mismatch(f"output {k} has shape {tuple(out.shape)}, the reference {tuple(ref.shape)}; "
                            f"{_where(where)}", **base)
        if out.dtype != ref.dtype:
            return Mismatch(f"output {k} has dtype {out.dtype}, the reference {ref.dtype}; {_where(where)}", **base)
        if out.numel() == 0:
            return None
        c = compared(out, ref, tol)
        rel = c.err_l2 / c.ref_l2 if c.ref_l2 > 0 else (0.0 if c.err_l2 == 0 else math.inf)
        max_abs, n_bad, flat = c.max_abs, c.outside, c.worst
        if c.nonfinite:
            max_abs = rel = math.nan  # NaN or Inf where the reference has none: the error norms mean nothing
        index_output = ref.dtype == torch.int64  # torch's index dtype: an index is right or wrong, not near
        if not math.isnan(rel) and (ref.is_floating_point() or not (n_bad or rel > tol.rel_l2)):  # before the
            # verdict: a floating output a later rule accepts (the oracle's) keeps its error against the reference in
            # the record (played LLM session 37: fp8 one step off recorded as 0); indices only when they all match
            self.max_abs = self.max_abs if where.get("hidden") else max(self.max_abs, max_abs)  # public ones only:
            self.rel_l2 = max(self.rel_l2, rel)  # hidden distributions' values near 1e15 read as large errors
        if n_bad:
            reason = (f"{n_bad} of {out.numel()} int64 elements (indices) differ" if index_output else
                      f"{n_bad} of {out.numel()} elements outside atol={tol.atol:g} + rtol={tol.rtol:g} * |expected|")
        elif rel > tol.rel_l2:
            reason = (f"relative L2 error {rel:.3g} exceeds {tol.rel_l2:g}, although every element is within "
                      f"atol={tol.atol:g}, rtol={tol.rtol:g} (the output is small next to atol)")
        else:
            return None
        held = held_indices(c.sample, tuple(out.shape), n_bad)  # also for ``with_inputs_at_index``
        gathered = where_outside(c.sample, tuple(out.shape), n_bad, held) if n_bad else None
        reason += f"; {gathered}" if gathered else ""
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(out.shape)))
        expected, got = float(ref.reshape(-1)[flat]), float(out.reshape(-1)[flat])
        hint, systematic = "", False  # systematic: a pattern the float64 line must not call precision
        if n_bad and not ref.dtype.is_floating_point and not ref.dtype.is_complex and ref.dtype != torch.bool and \
                not index_output and n_bad * 100 <= out.numel() and c.all_one:
            hint = ("every differing value is off by exactly 1, at few elements: rounding ties decided the other "
                    "way; check the rounding rule and that the value before it is computed as the reference does, "
                    "e.g. on CUDA torch divides by a Python number as a multiplication by its float32 reciprocal")
        elif n_bad and index_output and (outside := index_outside(ref, got)):
            hint = outside
        elif n_bad and ref.dtype in (torch.int32, torch.int16) and 0 <= got < expected and \
                bool((out.masked_select(bad := _outside(out, ref, tol)) < ref.masked_select(bad)).all()):
            hint = ("every differing count is below the reference's: updates lost, as when several iterations or "
                    "threads add into one element by a plain read and write instead of T.atomic_add")
        if ref.dtype == torch.float32 and n_bad and 1e-5 < rel < 3e-3 and _has_gemm(self):
            hint = ("a float32 output off by about TF32's precision: if the kernel has a T.gemm of float32 tiles, "
                    "they run on TF32 tensor cores, 10 mantissa bits; the DSL guide's T.gemm paragraph gives the "
                    "float32-accurate split, and what to do where the output is a small difference of large sums")
        elif ref.is_floating_point() and n_bad >= 8 and not c.nonfinite and \
                (ratio := common_ratio(out, ref, tol)) is not None:
            hint, systematic = (f"every differing value is the reference's times {ratio:.4g}: a factor missing or "
                                f"applied twice, e.g. a wrong divisor or scale"), True
        elif ref.is_floating_point() and n_bad >= 4 and not c.nonfinite and (shift := common_offset(out, ref, tol)):
            hint, systematic = (f"the differing values are off {shift}: a term added, subtracted or compared against "
                                f"that is wrong (a shift, a threshold, a mean or a max: its divisor or count)"), True
        elif ref.is_floating_point() and n_bad >= 4 and not c.nonfinite and \
                (scaled := common_offset(out, ref, tol, ratio=True)):
            hint, systematic = (f"the differing values are the reference's {scaled}: one factor a row, a normalizer "
                                f"that is off (a sum or count with a term too many or too few: a mask, a tail; or "
                                f"one over other values, e.g. taken before a gate, not after)"), True
        if math.isnan(got) and math.isinf(expected):
            hint = "NaN where the reference is infinite: inf - inf, 0 * inf or inf / inf in the kernel's arithmetic " \
                   "where the reference's gives one infinity, or an element the kernel never wrote"
        elif math.isnan(got) and not math.isnan(expected):
            hint = "NaN where the reference is finite: an overflow, or an element the kernel never wrote: the " \
                   "evaluator fills fresh allocations with NaN"
        elif math.isinf(got) != math.isinf(expected):
            hint = ("infinite where the reference is finite, or the reverse: a mask or fill applied where the "
                    "reference keeps the value, or not applied where it fills, or an overflow")
        norms = "" if index_output else (f"; max abs err {max_abs:.3g}, rel L2 err {rel:.3g}" if not math.isnan(rel)
                                         else "; no error size: some values are non-finite where the reference's "
                                              "are not, or the reverse")
        found = rare_value_at(ref, got, index) if n_bad and not index_output else None
        if found:  # the wrong value is a rare one of the reference's, elsewhere: an element read from the wrong place
            base.update(found)
            reason += f"; the value got is the reference's at index {tuple(found['found_at'])}" + \
                (f" (and {found['found_count'] - 1} other element(s))" if found["found_count"] > 1 else "")
        shown = f" ({hint})" if hint else ""
        return Mismatch(f"output {k} differs from the reference at index {index}: expected {expected:.6g}, got "
                        f"{got:.6g}{shown}; {reason}{norms}; {_where(where)}, call {call}", index=list(index),
                        **_json_floats(expected=expected, got=got, max_abs_err=max_abs, rel_l2=rel), mismatched=n_bad,
                        total=out.numel(), atol=tol.atol, rtol=tol.rtol, rel_l2_bound=tol.rel_l2,
                        dtype=str(ref.dtype).removeprefix("torch."), **({"where_outside": gathered} if gathered else {}),
                        **({"held": list(held.items())} if held else {}), **({"hint": hint} if hint else {}),
                        **({"systematic": True} if systematic else {}), **base)

    def flag_degenerate(self, ref, where: dict) -> None:
        for k, r in enumerate(ref):
            if not r.is_floating_point() or r.numel() == 0:
                continue
            key = (k, where["distribution"])
            peak, lo, hi, every = finite_range(r)  # finite values only: NaN would read as 0 (played LLM, s. 33)
            self.peaks[key] = max(self.peaks.get(key, 0.0), peak if lo <= hi else math.inf)
            self.constant[key] = self.constant.get(key, True) and r.numel() > 1 and every and lo == hi
            tol = self.spec.tolerance(r.dtype)
            self.atol[k] = tol.atol
            # red team, session 45: 1 + 1e-3 * tanh(x) in fp16 varies less than its tolerance, and a constant passed
            self.flat[key] = self.flat.get(key, True) and r.numel() > 1 and hi - lo <= 2 * (tol.atol + tol.rtol * peak)
            if not every:
                self.nonfinite.setdefault(k, []).append(where["distribution"])

    def oracle_notes(self) -> list[str]:
        """One note per output that only the oracle rule accepted, saying which rule decided."""
        text = {"oracle-tolerance": "within the fixed tolerance of the float64 oracle",
                "oracle-relative": f"within {ORACLE_FACTOR:g}x the reference's own error against the float64 oracle",
                "oracle-spread": f"within {ORACLE_FACTOR:g}x the reference's worst error against the float64 oracle "
                                 f"over {SPREAD_RUNS} runs on inputs perturbed by {TIE_CHANGE} (or within how far "
                                 f"the oracle moves there on them)"}
        return [f"output {k}: accepted by the oracle rule, not the fixed one: the reference itself is off by up to "
                f"{worst:.3g} against the float64 oracle, the candidate is {' or '.join(text[r] for r in sorted(rules))}"
                for k, (worst, rules) in sorted(self.oracle_accepted.items())]

    def ties_notes(self) -> list[str]:
        """One note per output that a tie rule accepted, with the number of differing elements."""
        return [f"output {k}: {n} element(s) differ from the reference's only where it chose among equal values "
                f"(ties: the same score in the values its topk / sort / argmax call ranked, or a perturbation of the "
                f"inputs by up to {TIE_CHANGE} changes its own choice): accepted"
                for k, n in sorted(self.ties_accepted.items())]

    def degenerate_notes(self) -> list[str]:
        """One note per output: the distributions under which the reference was constant, always below atol, or gave
        NaN or Inf."""
        notes = []
        for k in sorted(self.atol):
            constant = [d for (j, d), c in self.constant.items() if j == k and c]
            small = [d for (j, d), p in self.peaks.items() if j == k and p < self.atol[k] and d not in constant]
            if constant:
                notes.append(f"degenerate reference: output {k} is constant under distribution(s) "
                             f"{', '.join(map(repr, constant))}")
            flat = [c for (j, _), c in self.flat.items() if j == k]
            if flat and all(flat) and len(constant) < len(flat):
                notes.append(f"degenerate reference: output {k} varies by less than its tolerance under every "
                             f"distribution: a constant output would pass; tighten TOLERANCES or draw inputs that "
                             f"move it")
            if small:
                peak = max(self.peaks[(k, d)] for d in small)
                notes.append(f"degenerate reference: output {k} stays below atol {self.atol[k]:g} (max |value| "
                             f"{peak:.3g}) under distribution(s) {', '.join(map(repr, small))}; the relative L2 bound "
                             f"decides there")
        for k, dists in sorted(self.nonfinite.items()):  # played LLM, session 24: one line per distribution before
            seen = list(dict.fromkeys(dists))
            if len(seen) == len({d for (j, d) in self.peaks if j == k}):
                notes.append(f"the reference gives NaN or Inf in output {k} under every distribution (the op's own "
                             f"values, a -inf mask say): they must match in place")
            else:
                notes.append(f"the reference gives NaN or Inf in output {k} under distribution(s) "
                             f"{', '.join(map(repr, seen))} (they must match in place; consider DISTRIBUTIONS in the "
                             f"spec, or FIXED_INPUTS for inputs that are model parameters drawn by get_inputs)")
        return notes


SPREAD_NUMEL, SPREAD_RUNS, SPREAD_FEW = 64, 8, 1e-3
"""The oracle rule's spread (``compare_oracle``): outputs of at most this many elements, or larger ones where at most
this fraction of the elements fail the rule before it; this many perturbed runs."""
FLOAT_TIES_S = 20.0
"""The most time the floating tie rule's re-runs of the reference may take for one output (they stop there, and the
rows left are unexplained)."""
FLOAT_TIES_PROBE = 4
"""The floating tie rule's first runs: when the reference jumped at none of the differing elements in these, the
output is smooth there and the rule stops (played LLM session 26: an fp8 dequant's failure re-ran a 66M-element
reference 64 times and its message spoke of ties)."""


def _output(outs, k: int):
    return outs[k] if outs is not None and k < len(outs) else None


def _where(where: dict) -> str:
    text = f"config {where['config']}, seed {where['seed']}, input distribution {where['distribution']!r}"
    if "trial" in where:
        text += f", timed trial {where['trial']}"
    if where.get("hidden"):
        text += " (hidden)"
    if "tail_of" in where:
        text += f" (a tail size of config {where['tail_of']})"
    return text


def _at_new_address(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``t`` whose data starts 16 bytes into a fresh allocation: allocators hand out blocks
    aligned to 64 bytes or more, so no earlier tensor (and no address a candidate might have cached) starts there."""
    pad = max(1, 16 // t.element_size())
    buf = torch.empty(t.numel() + pad, dtype=t.dtype, device=t.device)
    out = buf[pad:].view(t.shape)
    out.copy_(t)
    return out


__all__ = ["check_candidate", "draw_seed", "timed_calls"]
