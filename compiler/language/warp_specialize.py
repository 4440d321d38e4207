"""TileLang's hand-written warp specialization, run in program order: ``T.ws``, ``T.alloc_barrier``,
``T.barrier_arrive`` / ``T.barrier_wait``, ``T.mbarrier_arrive`` / ``T.mbarrier_wait_parity``, ``T.tma_copy``.

In: a TileLang program that splits a block's warp groups into producers and consumers by hand (``with T.ws(1):`` copy
tiles and arrive on a barrier; ``with T.ws(0):`` wait on it and compute). Out: the same program in program order,
which is what TileAgent's compiler schedules itself (software pipelining, its own barriers): ``T.ws`` blocks are
inlined and run by every thread, ``T.tma_copy(src, dst, barrier=...)`` is ``T.copy(src, dst)``, and the barrier
operations become ``MBarrierOp`` statements. Guarantees: the CPU interpreter keeps every barrier's phase (an arrive
by a ``T.ws`` group of 128 threads per warp group id, or by the whole block outside T.ws, counts that many arrivals;
a phase completes at the barrier's arrive count) and raises KernelFault at a wait that program order would leave
blocked (its phase not completed yet: the producer comes after the consumer in the source), so a program whose
source order is not a valid schedule fails instead of computing on stale tiles. The CUDA backend drops the barrier
operations (it places its own).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.ir.expr import Expr
from tileagent.compiler.ir.stmt import MBarrierOp

WARP_GROUP = 128  # threads per warp group (T.ws ids count warp groups, as in TileLang)

# Threads of the innermost `with T.ws(...)` being parsed (None: outside any; the frontend sets it)
CURRENT_WS: contextvars.ContextVar = contextvars.ContextVar("tileagent_ws_threads", default=None)


@dataclass(frozen=True)
class WsSpec:
    """``with T.ws(*warp_group_ids):``: the statements the given warp groups run (inlined, in program order)."""

    ids: tuple

    @property
    def threads(self) -> int:
        return WARP_GROUP * len(self.ids)


def ws(*warp_group_ids):
    """TileLang's ``T.ws(0)`` / ``T.ws(0, 1)`` (``WarpSpecialize``): see the module docstring."""
    if not warp_group_ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in warp_group_ids):
        raise DSLTypeError(f"T.ws takes one or more warp group ids (non-negative ints), got {warp_group_ids!r}",
                           code="E301")
    return WsSpec(tuple(warp_group_ids))


WarpSpecialize = ws


class BarrierSet:
    """``T.alloc_barrier(arrive_count)``: one or more barriers (arrive counts), named after the assignment."""

    def __init__(self, counts: tuple):
        self.counts = counts
        self.name = "barrier"

    def __len__(self) -> int:
        return len(self.counts)

    def __getitem__(self, index):
        if isinstance(index, int) and not 0 <= index < len(self.counts):
            raise DSLTypeError(f"barrier {self.name}[{index}]: only {len(self.counts)} barrier(s) were allocated",
                               code="E301")
        return BarrierRef(self, index)

    def __repr__(self) -> str:
        return f"T.alloc_barrier({list(self.counts)})"


@dataclass(frozen=True)
class BarrierRef:
    barriers: BarrierSet
    index: object


def alloc_barrier(arrive_count):
    """TileLang's ``T.alloc_barrier(arrive_count)`` (an int, or a list: one barrier per entry)."""
    counts = (arrive_count,) if isinstance(arrive_count, int) else tuple(arrive_count) \
        if isinstance(arrive_count, (list, tuple)) else None
    if not counts or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
        raise DSLTypeError(f"T.alloc_barrier: arrive_count must be a positive int or a list of them, got "
                           f"{arrive_count!r}", code="E301")
    return BarrierSet(counts)


def _ref(barrier, what: str) -> BarrierRef:
    if isinstance(barrier, BarrierSet):
        return BarrierRef(barrier, 0)
    if isinstance(barrier, BarrierRef):
        return barrier
    raise DSLTypeError(f"{what}: expected a barrier from T.alloc_barrier (or one of them, bars[i]), got "
                       f"{type(barrier).__name__}", code="E309")


def barrier_wait(mbarrier, parity):
    """Wait until the barrier's phase of parity ``parity`` has completed (program order: it must have)."""
    ref = _ref(mbarrier, "T.barrier_wait")
    if not isinstance(parity, (int, Expr)) or isinstance(parity, bool):
        raise DSLTypeError(f"T.barrier_wait: parity must be an integer, got {parity!r}", code="E309")
    return MBarrierOp("wait", ref.barriers, ref.index, parity)


def mbarrier_wait_parity(mbarrier, parity):
    return barrier_wait(mbarrier, parity)


def barrier_arrive(mbarrier, cta_id=None):
    """Arrive on the barrier with the threads of the enclosing T.ws group (the whole block outside T.ws)."""
    if cta_id is not None:
        raise DSLTypeError("T.mbarrier_arrive(cta_id=...): cluster barriers are not supported", code="E301")
    ref = _ref(mbarrier, "T.barrier_arrive")
    return MBarrierOp("arrive", ref.barriers, ref.index, CURRENT_WS.get())


def mbarrier_arrive(mbarrier, cta_id=None):
    return barrier_arrive(mbarrier, cta_id)


def tma_copy(src, dst, *, barrier=None, cluster_mask=None, leader_scope_threads=None, eviction_policy=None,
             annotations=None):
    """TileLang's ``T.tma_copy``: the copy (``T.copy``), bound to ``barrier``: in warp specialization by hand its
    bytes complete that barrier's phase (a TMA load announcing them, ``compiler.lower.warp_groups``); elsewhere, and
    on the CPU interpreter, it is the copy, done in program order."""
    import dataclasses

    from tileagent.compiler.language.tileops import copy

    if cluster_mask is not None:
        raise DSLTypeError("T.tma_copy(cluster_mask=...): cluster multicast is not supported", code="E301")
    from tileagent.compiler.ir.stmt import Copy

    stmt = copy(src, dst)
    if barrier is None or not isinstance(stmt, Copy):  # (a one-element copy is a store)
        return stmt
    return dataclasses.replace(stmt, barrier=_ref(barrier, "T.tma_copy"))
