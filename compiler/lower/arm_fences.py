"""The fences of a warp group's arm (warp specialization by hand, ``compiler.lower.warp_groups``), kept where a
generic shared-memory write needs them and dropped elsewhere.

In: the thread IR of one arm as lowered: every wgmma gemm opens with ``WgmmaFence(sync=True)`` (a proxy fence, the
group's named barrier, ``wgmma.fence``) and every arrive on a program barrier comes after an ``AsyncProxyFence``.
Out: the same statements, where
- a ``WgmmaFence`` keeps its barrier only when the group wrote a shared buffer its wgmmas read through the generic
  proxy (stores, vector copies, cp.async) since its last fence and barrier: the wgmma may read what other threads of
  the group wrote (a write to another buffer, a row maximum the group shares, waits for a later wgmma that reads
  it). Otherwise, after an mbarrier wait since the last proxy fence (data another group delivered: cp.async writes
  its producer cannot fence), it becomes a proxy fence of each thread and a bare ``wgmma.fence``; with neither, a
  bare ``wgmma.fence`` (TMA-delivered operands, a second gemm in a row);
- the proxy fence before an arrive stays only when the thread wrote shared memory since its last proxy fence.
How: a forward data flow over the arm (unfenced writes of this thread, the buffers written and not yet fenced and
synchronized in the group, a wait since the last fence), loops to their fixed point, both arms of an ``if`` joined;
the arm's entry has all three set, and any statement this module does not know counts as a write. Only a wait on a
barrier that cp.async copies arrive on (``cp_async_sets``: the kernel's ``T.cp_async_barrier_noinc`` sets; a wait
the program did not write counts too) sets the third flag: TMA writes through the async proxy, and a thread that
wrote shared memory fenced it before its arrive. The program's own ``T.fence_proxy_async()`` is a proxy fence.
Guarantees: a wgmma still reads only shared bytes its writers fenced and the group synchronized (or that reached it
through an mbarrier and a reader-side fence), and a waiting group still sees fenced data behind every arrive that
follows a write; ``TILEAGENT_ARM_FENCES=all`` keeps every fence (an A/B switch).
"""

from __future__ import annotations

import dataclasses
import os

from tileagent.compiler.ir.stmt import AtomicAdd, For, If, Let, LoopExit, Store, While
from tileagent.compiler.tir import (AsyncCommit, AsyncCopy, AsyncProxyFence, AsyncWait, Barrier, Declare, LdMatrix,
                                    MbarrierArrive, MbarrierArriveExpectTx, MbarrierWait, Mma, PackPairs, SetMaxNReg,
                                    TmaLoad, VecAtomicAdd, VecCopy, Wgmma, WgmmaCommit, WgmmaFence,
                                    WgmmaRS, WgmmaWait)

_ANY = object()  # in the unsynced set: a statement this module does not know wrote anything
ALL = (True, frozenset({_ANY}), True)  # (unfenced, unsynced buffers, waited)
NONE = (False, frozenset(), False)
_WRITERS = (Store, AtomicAdd, VecCopy, VecAtomicAdd, AsyncCopy)  # generic writes this module can tell the buffer of
_QUIET = (Let, Declare, LoopExit, LdMatrix, Mma, PackPairs, SetMaxNReg, TmaLoad, MbarrierArriveExpectTx, MbarrierArrive,
          Wgmma, WgmmaRS, WgmmaCommit, WgmmaWait, AsyncCommit, AsyncWait)


def enabled() -> bool:
    """False under ``TILEAGENT_ARM_FENCES=all`` (every fence kept)."""
    return os.environ.get("TILEAGENT_ARM_FENCES") != "all"


def trim(stmts, cp_async_sets=None) -> list:
    """``stmts`` (one arm's thread IR) with the fences it does not need dropped (see the module docstring);
    ``cp_async_sets``: the ids of the barrier sets cp.async copies arrive on (None: every barrier may be one)."""
    return _flow(list(stmts), ALL, cp_async_sets)[0] if enabled() else list(stmts)


def cp_async_sets(body) -> frozenset:
    """The ids of the ``T.alloc_barrier`` sets that a ``T.cp_async_barrier_noinc`` of ``body`` (a kernel's tile IR)
    arrives on: what their waits deliver was written by cp.async, which no writer can fence."""
    from tileagent.compiler.ir.stmt import MBarrierOp
    from tileagent.compiler.ir.visit import walk

    return frozenset(id(s.barriers) for s in walk(body) if isinstance(s, MBarrierOp) and s.op == "arrive_cp_async")


def _program_fence(x) -> bool:
    """The program's ``T.fence_proxy_async()``."""
    from tileagent.compiler.ir.expr import Call
    from tileagent.compiler.ir.stmt import Evaluate
    from tileagent.compiler.language.cp_async import FENCE

    return isinstance(x, Evaluate) and isinstance(x.value, Call) and x.value.name == FENCE


def _cp_async_wait(x: MbarrierWait, sets) -> bool:
    return sets is None or x.label is None or id(x.label[0]) in sets


def _written(x):
    return x.buffer if isinstance(x, (Store, AtomicAdd)) else x.dst


def _writes_shared(x) -> bool:
    if isinstance(x, _WRITERS):
        return _written(x).scope == "shared"
    return not isinstance(x, _QUIET)  # an Evaluate (hand cp.async), a nested range, anything unknown: a write


def _join(a, b):
    return a[0] or b[0], a[1] | b[1], a[2] or b[2]


def _operands(stmts, k) -> frozenset | None:
    """The names of the shared buffers the wgmmas right after the fence ``stmts[k]`` read, up to their commit; None
    (every buffer) where something else comes first or no commit follows."""
    out = set()
    for x in stmts[k + 1:]:
        if isinstance(x, WgmmaCommit):
            return frozenset(out) if out else None
        if isinstance(x, Wgmma):
            out.update((x.a_buf.name, x.b_buf.name))
        elif isinstance(x, WgmmaRS):
            out.add(x.b_buf.name)
        elif not isinstance(x, (Let, Declare)):
            return None
    return None


def _syncs(unsynced, operands) -> bool:
    """Whether a wgmma reading ``operands`` (None: any) needs the group's barrier for the writes in ``unsynced``."""
    if not unsynced:
        return False
    return operands is None or _ANY in unsynced or any(b.name in operands for b in unsynced)


def _flow(stmts, state, sets=None):
    """(the statements with their fences trimmed, the state after them)."""
    out = []
    for k, x in enumerate(stmts):
        unfenced, unsynced, waited = state
        if isinstance(x, WgmmaFence):
            if x.sync and not _syncs(unsynced, _operands(stmts, k)):  # nothing of the group's it reads
                x = dataclasses.replace(x, sync=False)
                if waited:  # what another group delivered behind the wait: a reader-side fence
                    out.append(AsyncProxyFence(x.span))
                    state = (False, unsynced, False)
            elif x.sync:
                state = NONE
        elif isinstance(x, AsyncProxyFence) or _program_fence(x):
            if not unfenced and k + 1 < len(stmts) and isinstance(stmts[k + 1], MbarrierArrive):
                continue  # nothing written since the last fence: the arrive alone
            state = (False, unsynced, False)
        elif isinstance(x, Barrier):
            state = (unfenced, unsynced if unfenced else frozenset(), waited)
        elif isinstance(x, MbarrierWait):
            state = (unfenced, unsynced, waited or _cp_async_wait(x, sets))
        elif isinstance(x, If):
            then, s1 = _flow(list(x.then_body), state, sets)
            other, s2 = _flow(list(x.else_body), state, sets)
            x, state = dataclasses.replace(x, then_body=tuple(then), else_body=tuple(other)), _join(s1, s2)
        elif isinstance(x, (For, While)):
            entry = state
            while True:  # the body's entry: from before the loop or from the end of an iteration
                after = _flow(list(x.body), entry, sets)[1]
                if _join(entry, after) == entry:
                    break
                entry = _join(entry, after)
            x, state = dataclasses.replace(x, body=tuple(_flow(list(x.body), entry, sets)[0])), entry
        elif _writes_shared(x):
            state = (True, unsynced | {_written(x)}, waited) if isinstance(x, _WRITERS) else ALL
        out.append(x)
    return out, state
