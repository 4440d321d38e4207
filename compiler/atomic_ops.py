"""What ``T.atomic_max`` / ``T.atomic_min`` do to memory, shared by the CPU interpreter and the SIMT emulator.

In: the current values of the elements being updated (a 1-d tensor), and per update the element it targets (an index
into them) and its value. Out: the new values, in the elements' dtype.
Guarantees: TileLang's semantics (``AtomicMax``/``AtomicMin`` in its CUDA templates: a compare-and-swap loop that
stores the value while it compares greater / less than the element): a NaN value never replaces an element, a NaN
element stays NaN, and the result does not depend on the order of the updates. ``T.atomic_add`` keeps its own
summation in the interpreter and emulator (compute precision, one rounding per statement).
"""

from __future__ import annotations

import torch

OPS = ("add", "max", "min")  # the ``op`` of ir.stmt.AtomicAdd / AtomicAddTile


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """A dtype whose comparisons are exact for ``dtype`` and that scatter_reduce supports on the CPU."""
    if dtype.is_floating_point:
        return torch.float64 if dtype == torch.float64 else torch.float32
    return torch.int64


def _identity(dtype: torch.dtype, op: str):
    if dtype.is_floating_point:
        return float("-inf") if op == "max" else float("inf")
    return torch.iinfo(torch.int64).min if op == "max" else torch.iinfo(torch.int64).max


def combine(current: torch.Tensor, index: torch.Tensor, values: torch.Tensor, op: str) -> torch.Tensor:
    """``current`` (n,) after every update ``values[k]`` into element ``index[k]`` (op "max" or "min")."""
    if op not in ("max", "min"):
        raise ValueError(f"combine handles atomic max/min, not {op!r}")
    work = _work_dtype(current.dtype)
    cur, vals = current.to(work), values.to(work)
    if work.is_floating_point:
        vals = torch.where(torch.isnan(vals), torch.full_like(vals, _identity(work, op)), vals)
    best = torch.full_like(cur, _identity(work, op))
    best.scatter_reduce_(0, index, vals, "amax" if op == "max" else "amin", include_self=True)
    better = best > cur if op == "max" else best < cur
    return torch.where(better, best, cur).to(current.dtype)


def elementwise(current: torch.Tensor, values: torch.Tensor, op: str) -> torch.Tensor:
    """``current`` after one update per element (the tile form: ``values`` has ``current``'s shape)."""
    flat = current.reshape(-1)
    return combine(flat, torch.arange(flat.numel()), values.reshape(-1), op).reshape(current.shape)
