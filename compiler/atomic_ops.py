"""What ``T.atomic_max`` / ``T.atomic_min`` do to memory, shared by the CPU interpreter and the SIMT emulator.

In: the current values of the elements being updated (a 1-d tensor), and per update the element it targets (an index
into them) and its value. Out: the new values, in the elements' dtype.
Guarantees: TileLang's semantics (``AtomicMax``/``AtomicMin`` in its CUDA templates: a compare-and-swap loop that
stores the value while it compares greater / less than the element): a NaN value never replaces an element, a NaN
element stays NaN, and the result does not depend on the order of the updates. ``T.atomic_add`` keeps its own
summation in the interpreter and emulator (compute precision, one rounding per statement).
``fetch`` is ``return_prev=True``: the updates of one statement apply in thread order (the GPU's order is the
hardware's; counters, TileLang's use, get the same set of values either way), each returning the element as the
updates before it left it; sums are exact for integers (wrapping to the dtype) and rounded once per value for
floats.
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


def fetch(current: torch.Tensor, index: torch.Tensor, values: torch.Tensor, op: str):
    """(previous value of each update, ``current`` after all of them): update ``k`` (``values[k]`` into element
    ``index[k]`` of the 1-d ``current``, op "add", "max" or "min") sees the element after updates ``0..k-1``."""
    work = _work_dtype(current.dtype)
    cur, vals = current.to(work), values.to(work)
    n = len(index)
    earlier = (index[None, :] == index[:, None]) & torch.ones(n, n, dtype=torch.bool).tril(-1)  # [k, j]: j before k
    if op == "add":
        prev = cur[index] + torch.where(earlier, vals[None, :], torch.zeros((), dtype=work)).sum(1)
        after = cur.index_add(0, index, vals)
        if not work.is_floating_point:  # wrap to the dtype's width (two's complement), as the GPU's integers do
            prev, after = _wrap(prev, current.dtype), _wrap(after, current.dtype)
        return prev.to(current.dtype), after.to(current.dtype)
    if work.is_floating_point:
        vals = torch.where(torch.isnan(vals), torch.full_like(vals, _identity(work, op)), vals)
    pick = torch.amax if op == "max" else torch.amin
    best = pick(torch.where(earlier, vals[None, :], torch.full((), _identity(work, op), dtype=work)), dim=1) \
        if n else vals
    old = cur[index]
    better = best > old if op == "max" else best < old
    return torch.where(better, best, old).to(current.dtype), combine(current, index, values, op)


def _wrap(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bits = torch.iinfo(dtype).bits
    if bits >= 64:
        return x
    x = x & ((1 << bits) - 1)
    signed = torch.iinfo(dtype).min < 0
    return torch.where(x >= (1 << (bits - 1)), x - (1 << bits), x) if signed else x
