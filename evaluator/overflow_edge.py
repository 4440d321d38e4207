"""The overflow-edge rule: a floating output may hold its dtype's largest finite value where the reference rounded to
an infinity of the same sign, when the reference's own value there sits on that rounding boundary.

In: a candidate's floating output, the reference's, where the output is outside the tolerance (``bad``), and the
reference's outputs on perturbed copies of the inputs (``runs(i)``, ``evaluator.ties.perturbed``'s runs).
Out: whether every element outside is explained: the candidate holds +-max where the reference holds +-inf (the same
sign), and at each such element some perturbed run of the reference is finite.
Why: float16 rounds a value of magnitude 65520 or more to inf and one in [65504, 65520) to 65504, so two summation
orders of one float32 value a hair apart can land on either side (played LLM session 42's LoRA linear on an H100,
under the 'negative' distribution: 5 of 65536 elements "expected -inf, got -65504", where the float64 oracle, which
keeps the reference's own ``.float()`` and final cast, overflowed as the reference did).
Guarantees: a change of the inputs far below the tolerances (2 epsilons of fp16 move a value near 65520 by up to
about 128) brings the reference back under the boundary only where its value is that close to it; a kernel that
saturates (clamps to the largest value) where the reference's value is far beyond is not explained; an element
outside for any other reason leaves the whole output unexplained. The runs stop at ``stop`` (``time.monotonic()``).
"""

from __future__ import annotations

import time

import torch

from tileagent.evaluator.ties import TIE_RUNS


def at_edge(out: torch.Tensor, ref: torch.Tensor, bad: torch.Tensor) -> torch.Tensor | None:
    """The elements of ``bad`` where ``out`` is its dtype's largest finite value and ``ref`` the infinity of that
    sign; None when some element of ``bad`` is not such an element (or none is)."""
    if not out.is_floating_point() or out.dtype != ref.dtype:
        return None
    big = torch.finfo(out.dtype).max
    o = out.detach().to(torch.float64)
    edge = bad & torch.isinf(ref) & (o.abs() == big) & (torch.sign(o) == torch.sign(ref.detach().to(torch.float64)))
    if not bool(edge.any()) or bool((bad & ~edge).any()):
        return None
    return edge


def explained(out: torch.Tensor, ref: torch.Tensor, bad: torch.Tensor, runs, stop: float) -> int:
    """How many elements the rule explains: all of ``bad`` (its count) or 0. ``runs(i)`` gives the reference's output
    on the i-th perturbed inputs (None where it did not run)."""
    edge = at_edge(out, ref, bad)
    if edge is None:
        return 0
    left = edge.clone()
    for i in range(TIE_RUNS):
        if time.monotonic() > stop:
            break
        run = runs(i)
        if run is None or run.shape != out.shape:
            continue
        left &= ~torch.isfinite(run)
        if not bool(left.any()):
            return int(edge.sum())
    return 0


__all__ = ["at_edge", "explained"]
