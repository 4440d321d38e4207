"""Named barriers in the SIMT emulator: ``bar.sync id, count`` (``T.sync_threads(id, count)``) over part of a block.

In: a ``NamedBarrier`` reached by the emulator's active threads (``compiler.emulate``). Out: an EmulationError when
the threads that reach it are not exactly ``count`` whole warps (on the GPU the barrier would hang, or complete with
the wrong threads); otherwise the race detector's record of this barrier epoch updated.
Guarantees (race detector): a shared byte written, or read, since the last ``__syncthreads()`` by threads of a set
C no longer races with a later access by a thread of S ∪ C once a named barrier over S with S ∩ C non-empty has
run (S's threads waited for each other after C's access; a thread of C that was also in S carries the order to the
others); a thread outside that set still races with it, as on the GPU. Each byte keeps one group id
(``w_group``/``r_group``, -1: none), an index into the block's list of thread masks. Reads are tracked by their
lowest and highest reader, so a read is released when both are in S and every thread between them is (exact for
the usual S, a contiguous range of threads such as ``tx < 256``). An atomic update's thread is not recorded: it
counts as one of S. A new plain write or read of a byte starts its record afresh.
"""

from __future__ import annotations

import torch

from tileagent.compiler.emulate_tensor import WARP_SIZE, EmulationError

_ATOMIC = -2  # compiler.emulate's writer id of bytes last updated by an atomic add


def setup(block, n: int) -> None:
    """Per-byte group ids of the shared arena (``n`` bytes) and the block's list of group masks."""
    block.w_group = torch.full((n,), -1, dtype=torch.int64)
    block.r_group = torch.full((n,), -1, dtype=torch.int64)
    block.sync_groups = []  # bool [nt] masks, interned by value


def released(block, gid: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Whether the accesses of bytes with group ids ``gid`` are ordered before thread ``t``'s by a named barrier."""
    if not block.sync_groups:
        return torch.zeros_like(gid, dtype=torch.bool)
    groups = torch.stack(block.sync_groups)
    return (gid >= 0) & groups[gid.clamp(min=0), t]


def _intern(block, mask: torch.Tensor) -> int:
    for k, g in enumerate(block.sync_groups):
        if torch.equal(g, mask):
            return k
    block.sync_groups.append(mask.clone())
    return len(block.sync_groups) - 1


def _release(block, live: torch.Tensor, gid: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
             s_mask: torch.Tensor) -> None:
    """New group ids (written into ``gid``) for the bytes ``live`` whose accesses came from the threads ``first`` to
    ``last`` (equal for a write; ``_ATOMIC``: any thread of S) or from the group they already have."""
    idx = live.nonzero()[:, 0]
    if not len(idx):
        return
    inside = s_mask[first[idx].clamp(min=0)] & s_mask[last[idx].clamp(min=0)]
    span_ok = torch.ones_like(inside)
    if bool((last[idx] > first[idx]).any()):  # several readers: every thread between them must be in S
        lo, hi = first[idx], last[idx]
        outside = (~s_mask).nonzero()[:, 0]
        if len(outside):
            span_ok = ~((outside[None, :] >= lo[:, None]) & (outside[None, :] <= hi[:, None])).any(dim=1)
    inside = (inside & span_ok) | (first[idx] == _ATOMIC)
    old = gid[idx]
    for g in torch.unique(old).tolist():
        sel = old == g
        if g < 0:
            new = _intern(block, s_mask)
            gid[idx[sel & inside]] = new
            continue
        members = block.sync_groups[g]
        new = _intern(block, members | s_mask)
        if bool((members & s_mask).any()):
            gid[idx[sel]] = new
        else:
            gid[idx[sel & inside]] = new


def named_barrier(block, s) -> None:
    """``bar.sync s.barrier_id, s.arrive_count`` by the active threads of ``block`` (a ``compiler.emulate`` block)."""
    mask = block.mask if block.mask is not None else torch.ones(block.nt, dtype=torch.bool)
    n = int(mask.sum())
    what = f"T.sync_threads({s.barrier_id}, {s.arrive_count})"
    if n != s.arrive_count:
        raise EmulationError(f"{what} (bar.sync) is reached by {n} of the block's {block.nt} threads, not "
                             f"{s.arrive_count}: on the GPU it would wait forever or complete with other threads",
                             s.span)
    block.warp_lanes(what)  # whole warps only
    if n % WARP_SIZE:
        raise EmulationError(f"{what}: {n} threads are not whole warps", s.span)
    if not getattr(block, "check_races", False) or not hasattr(block, "w_group"):
        return
    now = block.w_epoch == block.epoch
    _release(block, now, block.w_group, block.writer, block.writer, mask)
    now = block.r_epoch == block.epoch
    _release(block, now, block.r_group, block.rmin, block.rmax, mask)
