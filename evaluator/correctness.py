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
- degenerate references (an output below atol everywhere, or constant) are flagged in ``ConfigResult.notes``.

Raises the first ``CandidateError`` (``Mismatch``, ``GuardViolation``, ``CompileFailed``, ``RunFailed``,
``LoadFailed``) with the details the agent needs, or ``SpecError`` when the reference itself fails.
"""

from __future__ import annotations

import math

import torch

from tileagent.compiler.diagnostics import CompileError
from tileagent.evaluator.candidate import build_models, candidate_line, compile_failed, load_candidate
from tileagent.evaluator.errors import EvalError, Mismatch, RunFailed
from tileagent.evaluator.guards import Identities, run_guarded, violation
from tileagent.evaluator.records import ConfigResult
from tileagent.evaluator.spec import HIDDEN, Spec, Tolerance, identical


def check_candidate(spec: Spec, candidate_path, device="cpu", configs=None, seeds: int = 5, distributions=None,
                    static_checks: bool = True) -> list[ConfigResult]:
    """Check the candidate at ``candidate_path`` against ``spec`` on ``configs`` (default: the spec's grid).

    Args:
        spec: the loaded reference (``evaluator.spec.load_spec``).
        candidate_path: the candidate module (defines ``class ModelNew``).
        device: where inputs, models and outputs live ("cpu" runs kernels in the interpreter).
        configs: configs to check; tails of the spec's free dims are added to each.
        seeds: seeds per config and distribution (at least 1).
        distributions: names to use (default: the spec's, public and hidden).
        static_checks: run the static guard before importing (tests turn it off to exercise the run-time guard).

    Raises:
        CandidateError: the first failure (Mismatch, GuardViolation, CompileFailed, RunFailed, LoadFailed).
        SpecError: the reference failed on a config.
    """
    identities = Identities()  # before any of the candidate's code runs
    candidate = load_candidate(candidate_path, static_checks)
    identities.check("while the candidate was imported")
    dists = tuple(distributions or spec.distributions)
    results = []
    for config in configs if configs is not None else spec.configs:
        checker = _ConfigCheck(spec, candidate, device, identities)
        checker.run(config, max(1, seeds), dists)
        tails = spec.tail_configs(config)
        for tail in tails:
            checker.run(tail, max(1, seeds // 2), dists, tail_of=config)
        if tails:
            checker.note(f"tail sizes checked: {', '.join(str(t) for t in tails)}")
        results.append(ConfigResult(config=config, correct=True, checks=checker.checks, max_abs_err=checker.max_abs,
                                    rel_l2=checker.rel_l2, notes=checker.degenerate_notes() + checker.notes))
    return results


class _ConfigCheck:
    """The checks of one config and its tails; accumulates statistics and notes."""

    def __init__(self, spec: Spec, candidate, device, identities: Identities):
        self.spec, self.candidate, self.device, self.identities = spec, candidate, device, identities
        self.checks, self.max_abs, self.rel_l2 = 0, 0.0, 0.0
        self.notes: list[str] = []
        self.peaks: dict = {}  # (output, distribution) -> max |reference| seen
        self.constant: dict = {}  # (output, distribution) -> the reference was constant in every check
        self.atol: dict = {}  # output -> atol of its dtype

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def run(self, config: dict, seeds: int, dists: tuple[str, ...], tail_of: dict | None = None) -> None:
        self.spec.validate(config, self.device)
        model, new = build_models(self.spec, self.candidate, config, self.device)
        if model.redrawn:
            self.note(f"constant parameters re-drawn at random (a kernel must use them): {', '.join(model.redrawn)}")
        previous = None  # the input buffers of the last check's first call, refilled for the next check's second call
        for seed in range(seeds):
            for dist in dists:
                where = {"config": config, "seed": seed, "distribution": dist, "hidden": dist in HIDDEN}
                if tail_of is not None:
                    where["tail_of"] = tail_of
                inputs = self.spec.make_inputs(config, seed, dist, self.device)
                previous = self.check(model, new, inputs, previous, where)

    def call(self, new, inputs, pristine, where: dict, earlier=()) -> tuple[torch.Tensor, ...]:
        try:
            outs = run_guarded(new, inputs, self.device, earlier, self.identities)
        except EvalError as e:
            e.details.update({k: v for k, v in where.items() if k not in e.details})
            e.message = f"{e.message}; {_where(where)}"
            e.args = (e.message,)
            raise
        except CompileError as e:
            raise compile_failed(e, self.candidate.path.name) from e
        except Exception as e:
            line = candidate_line(e, self.candidate.path)
            at = f" (line {line})" if line else ""
            raise RunFailed(f"ModelNew.forward raised {type(e).__name__}: {e}{at}; {_where(where)}",
                            exception=type(e).__name__, line=line, **where) from e
        for j, (t, p) in enumerate(zip(inputs, pristine)):
            if not identical(t, p):
                raise violation("input-mutation", f"the forward changed input {j} (every input must be left as it "
                                f"was); {_where(where)}", input=j, **where)
        return outs

    def check(self, model, new, inputs, previous, where: dict):
        spec = self.spec
        first_inputs = [t.clone() for t in inputs]
        out1 = self.call(new, first_inputs, inputs, where)
        ref = spec.run_reference(model, [t.clone() for t in inputs], where["config"])
        if previous is not None and all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(previous, inputs)):
            second_inputs = previous
            for t, v in zip(second_inputs, inputs):
                t.copy_(v)
        else:
            second_inputs = [t.clone() for t in inputs]
        out2 = self.call(new, second_inputs, inputs, where, earlier=out1)
        fail1, fail2 = self.compare(out1, ref, where, 1), self.compare(out2, ref, where, 2)
        if fail1 or fail2:
            fresh = [_at_new_address(t) for t in inputs]
            fail3 = self.compare(self.call(new, fresh, inputs, where, earlier=out1 + out2), ref, where, 3)
            if fail1 and fail2 and fail3:
                raise fail1
            verdicts = ", ".join(f"call {k} {'did not match' if f else 'matched'}"
                                 for k, f in ((1, fail1), (2, fail2), (3, fail3)))
            raise violation("inconsistent-runs", f"the same inputs gave different results in different calls "
                            f"({verdicts} the reference; call 2 reused an earlier call's input buffers refilled with "
                            f"these values, call 3 used fresh buffers): results cached by input address or identity, "
                            f"or state kept between calls; {_where(where)}", **where)
        self.checks += 2
        for k, (a, b) in enumerate(zip(out1, out2)):
            if not identical(a, b):
                self.note(f"the candidate is not bitwise deterministic: two calls on the same inputs differ "
                          f"(output {k})")
        self.flag_degenerate(ref, where)
        return first_inputs

    def compare(self, outs, ref, where: dict, call: int) -> Mismatch | None:
        if len(outs) != len(ref):
            return Mismatch(f"ModelNew returned {len(outs)} output(s), the reference {len(ref)}; {_where(where)}",
                            call=call, **where)
        for k, (o, r) in enumerate(zip(outs, ref)):
            failure = self.compare_one(k, o, r, self.spec.tolerance(r.dtype), where, call)
            if failure:
                return failure
        return None

    def compare_one(self, k: int, out, ref, tol: Tolerance, where: dict, call: int) -> Mismatch | None:
        base = {"output": k, "call": call, **where}
        if tuple(out.shape) != tuple(ref.shape):
            return Mismatch(f"output {k} has shape {tuple(out.shape)}, the reference {tuple(ref.shape)}; "
                            f"{_where(where)}", **base)
        if out.dtype != ref.dtype:
            return Mismatch(f"output {k} has dtype {out.dtype}, the reference {ref.dtype}; {_where(where)}", **base)
        if out.numel() == 0:
            return None
        o, r = out.detach().to(torch.float64), ref.detach().to(torch.float64)
        finite = torch.isfinite(o) & torch.isfinite(r)
        same_special = (o == r) | (torch.isnan(o) & torch.isnan(r))
        err = torch.where(finite, (o - r).abs(), torch.zeros_like(o))
        allowed = tol.atol + tol.rtol * r.abs()
        bad = (~finite & ~same_special) | (finite & (err > allowed))
        diff_l2 = float(torch.linalg.vector_norm(err))
        ref_l2 = float(torch.linalg.vector_norm(torch.where(finite, r, torch.zeros_like(r))))
        rel = diff_l2 / ref_l2 if ref_l2 > 0 else (0.0 if diff_l2 == 0 else math.inf)
        max_abs = float(err.max())
        if bool((~finite & ~same_special).any()):
            max_abs = rel = math.nan  # NaN or Inf where the reference has none: the error norms mean nothing
        n_bad = int(bad.sum())
        if n_bad:
            score = torch.where(bad & ~finite, torch.full_like(o, math.inf), err / allowed.clamp_min(1e-300))
            flat = int(torch.argmax(torch.where(bad, score, torch.full_like(o, -1.0))))
            reason = (f"{n_bad} of {o.numel()} elements outside atol={tol.atol:g} + rtol={tol.rtol:g} * |expected|")
        elif rel > tol.rel_l2:
            flat = int(torch.argmax(err))
            reason = (f"relative L2 error {rel:.3g} exceeds {tol.rel_l2:g}, although every element is within "
                      f"atol={tol.atol:g}, rtol={tol.rtol:g} (the output is small next to atol)")
        else:
            self.max_abs, self.rel_l2 = max(self.max_abs, max_abs), max(self.rel_l2, rel)
            return None
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(o.shape)))
        expected, got = float(r.reshape(-1)[flat]), float(o.reshape(-1)[flat])
        hint = ""
        if math.isnan(got) and not math.isnan(expected):
            hint = " (NaN where the reference is finite: an overflow, or an element the kernel never wrote: the " \
                   "evaluator fills fresh allocations with NaN)"
        return Mismatch(f"output {k} differs from the reference at index {index}: expected {expected:.6g}, got "
                        f"{got:.6g}{hint}; {reason}; max abs err {max_abs:.3g}, rel L2 err {rel:.3g}; "
                        f"{_where(where)}, call {call}", index=list(index), expected=expected, got=got,
                        max_abs_err=max_abs, rel_l2=rel, mismatched=n_bad, total=o.numel(), atol=tol.atol,
                        rtol=tol.rtol, rel_l2_bound=tol.rel_l2, **base)

    def flag_degenerate(self, ref, where: dict) -> None:
        for k, r in enumerate(ref):
            if not r.is_floating_point() or r.numel() == 0:
                continue
            r64 = r.detach().to(torch.float64)
            key = (k, where["distribution"])
            self.peaks[key] = max(self.peaks.get(key, 0.0), float(r64.abs().max()))
            constant = r.numel() > 1 and float(r64.max()) == float(r64.min())
            self.constant[key] = self.constant.get(key, True) and constant
            self.atol[k] = self.spec.tolerance(r.dtype).atol
            if not bool(torch.isfinite(r64).all()):
                self.note(f"the reference gives NaN or Inf in output {k} under distribution "
                          f"{where['distribution']!r} (they must match in place; consider DISTRIBUTIONS in the spec)")

    def degenerate_notes(self) -> list[str]:
        """One note per output: the distributions under which the reference was constant, or always below atol."""
        notes = []
        for k in sorted(self.atol):
            constant = [d for (j, d), c in self.constant.items() if j == k and c]
            small = [d for (j, d), p in self.peaks.items() if j == k and p < self.atol[k] and d not in constant]
            if constant:
                notes.append(f"degenerate reference: output {k} is constant under distribution(s) "
                             f"{', '.join(map(repr, constant))}")
            if small:
                peak = max(self.peaks[(k, d)] for d in small)
                notes.append(f"degenerate reference: output {k} stays below atol {self.atol[k]:g} (max |value| "
                             f"{peak:.3g}) under distribution(s) {', '.join(map(repr, small))}; the relative L2 bound "
                             f"decides there")
        return notes


def _where(where: dict) -> str:
    text = f"config {where['config']}, seed {where['seed']}, input distribution {where['distribution']!r}"
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


__all__ = ["check_candidate"]
