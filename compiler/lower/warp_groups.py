"""Lowering of warp specialization written by hand: the arms of an ``if`` on the thread index that select whole warp
groups (``compiler.thread_ranges``), whose tile ops are the warp group's own.

In: the ``_Lowering`` of a kernel (``compiler.lower``) at an ``If`` of its tile IR, and the thread range that
reaches it. Out: None when the ``if`` is not such a branch (it is lowered as any ``if``); else the ``If`` with each arm
whose range is narrower than the reaching one wrapped in a ``tir.WarpGroupRange``.
How: an arm of threads [lo, hi) is lowered under a view of the context for a block of ``hi - lo`` threads (the
layouts layout inference gave its fragments were inferred for that many: ``thread_ranges.parts``); then ``THREAD``
in what it produced becomes ``THREAD - lo`` and ``WARP`` becomes ``WARP - lo / 32`` (a nested range was shifted by
its own ``lo`` already and is left alone), so a tile op's thread arithmetic counts from the warp group's first
thread. Each range gets a named barrier of its own (ids from ``FIRST_BARRIER`` up, in the order ranges are met): a
barrier the arm's tile ops or the barrier pass put inside it synchronizes the arm's threads only.
Before the outermost such ``if`` every thread executes ``fence.proxy.async`` (shared bytes the block wrote before
the split may be read by a warp group's wgmma). Guarantees: code outside the arms is unchanged; inside an arm, every
compiler-made index is relative to the warp group, the program's own thread variables (Let-bound from THREAD at the
kernel's top) are not.
Also here: the program's own barriers (``lower_barrier_op``: mbarriers with its arrive counts), ``T.tma_copy`` bound
to one of them (``lower_bound_copy``); an arm's fences are trimmed to the ones its writes need
(``compiler.lower.arm_fences``).
"""

from __future__ import annotations

import copy
import dataclasses

from tileagent.compiler.ir.expr import Expr, make_binop
from tileagent.compiler.ir.simplify import depends_on
from tileagent.compiler.ir.stmt import If
from tileagent.compiler.ir.visit import substitute
from tileagent.compiler.lower.arm_fences import cp_async_sets, trim
from tileagent.compiler.tir import THREAD, WARP, AsyncProxyFence, WarpGroupRange

FIRST_BARRIER = 8  # named barriers 8.. (0 is __syncthreads, 1 the consumers of compiler.lower.warp_specialize)


def lower_thread_if(lowering, s: If) -> list | None:
    from tileagent.compiler.thread_ranges import _thread_lets, branch_ranges

    ctx = lowering.ctx
    k = ctx.kernel
    if not k.thread_vars:
        return None
    if ctx.thread_lets is None:
        ctx.thread_lets = _thread_lets(k)
    lets = ctx.thread_lets
    if not depends_on(s.cond, tuple(lets)):
        return None
    reach = ctx.thread_range
    ranges = branch_ranges(s, k, reach, lets)
    if ranges is None:
        return None
    arms = [_arm(lowering, body, r, reach, s.span) for body, r in ((s.then_body, ranges[0]),
                                                                      (s.else_body, ranges[1]))]
    # the block's shared writes before the split (a tile every warp group copied) reach a warp group's wgmma or TMA
    # through the async proxy: every thread that wrote fences its writes for it
    fence = [AsyncProxyFence(s.span)] if reach == (0, k.num_threads) else []
    return fence + [If(ctx.rewrite(s.cond, {}), tuple(arms[0]), tuple(arms[1]), s.span)]


def _arm(lowering, body, r, reach, span) -> list:
    if not body or r[0] == r[1]:
        return []
    if r == reach:
        return lowering.body(body)
    ctx = lowering.ctx
    ids = ctx.warp_group_barriers
    barrier = ids.setdefault(r, FIRST_BARRIER + len(ids))
    if barrier > 15:
        from tileagent.compiler.diagnostics import TargetError

        raise TargetError(f"more warp-group ranges than named barriers ({len(ids)}; ids {FIRST_BARRIER}..15)",
                          span, code="E602")
    view = copy.copy(ctx)
    view.threads, view.thread_range = r[1] - r[0], r
    view.ranges = dict(ctx.ranges)
    view.ranges[THREAD] = (0, r[1] - r[0] - 1)
    out = lowering.with_context(view).body(body)
    return [WarpGroupRange(r[0], r[1], barrier, tuple(shift(trim(out, cp_async_sets(ctx.kernel.body)), r[0])), span)]


def shift(stmts, lo: int) -> list:
    """``stmts`` with THREAD -> THREAD - lo and WARP -> WARP - lo // 32, nested WarpGroupRanges left alone."""
    mapping = {THREAD: make_binop("-", THREAD, lo), WARP: make_binop("-", WARP, lo // 32)}
    return [_shift(s, mapping) for s in stmts]


def _shift(x, mapping):
    if isinstance(x, WarpGroupRange):
        return x
    if isinstance(x, Expr):
        return substitute(x, mapping)
    if isinstance(x, tuple):
        new = tuple(_shift(c, mapping) for c in x)
        return x if all(a is b for a, b in zip(new, x)) else new
    if dataclasses.is_dataclass(x) and not isinstance(x, type) and not _leaf(x):
        changes = {}
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            nv = _shift(v, mapping)
            if nv is not v:
                changes[f.name] = nv
        return dataclasses.replace(x, **changes) if changes else x
    return x


def _leaf(x) -> bool:
    """Objects no thread index hides in: buffers, tensor maps, spans."""
    from tileagent.compiler.diagnostics import Span
    from tileagent.compiler.ir.stmt import Buffer
    from tileagent.compiler.tir import TensorMap

    return isinstance(x, (Buffer, Span, TensorMap))


def hand_barriers(body) -> list:
    """The ``T.alloc_barrier`` sets the MBarrierOps of a kernel body use, in first-use order."""
    from tileagent.compiler.ir.stmt import MBarrierOp
    from tileagent.compiler.ir.visit import walk

    seen: dict = {}
    for s in walk(body):
        if isinstance(s, MBarrierOp):
            seen.setdefault(id(s.barriers), s.barriers)
    return list(seen.values())


def lower_barrier_op(ctx, s) -> list:
    """A ``T.barrier_arrive`` / ``T.barrier_wait`` / ``T.cp_async_barrier_noinc`` of warp specialization by hand: the
    set's barriers live in the kernel's mbarrier array (``lower.tma.TmaState``, initialized with the set's arrive
    counts: one arrival per thread), allocated at the set's first use. A wait is the try_wait loop on the parity, an
    arrive every executing thread's own arrival (``cp.async.mbarrier.arrive.noinc`` after its copies)."""
    from tileagent.compiler.diagnostics import TargetError
    from tileagent.compiler.tir import MbarrierArrive, MbarrierWait

    state = ctx.tma
    index = _barrier_index(ctx, s.barriers, s.index, s.span)
    if s.op == "wait":
        return [MbarrierWait(state.barriers, index, ctx.rewrite(s.value, {}), s.span, label=(s.barriers, s.index))]
    if s.value is not None:
        raise TargetError("a T.ws group's barrier arrive is run in program order, not lowered as a barrier",
                          s.span, code="E602")
    arrive = MbarrierArrive(state.barriers, index, s.span, per_thread=True, cp_async=s.op == "arrive_cp_async")
    # what the thread wrote to shared memory before it arrives may be read by the waiting side's wgmma or TMA store
    # (the async proxy): the writer fences it (cp.async's own arrival fires after its copies, which it cannot fence)
    return [arrive] if arrive.cp_async else [AsyncProxyFence(s.span), arrive]


def _barrier_index(ctx, barriers, index, span):
    """The index in the kernel's mbarrier array of ``barriers[index]`` (a ``T.alloc_barrier`` set: its barriers are
    taken, with their arrive counts, at the set's first use)."""
    from tileagent.compiler.diagnostics import TargetError

    state = ctx.tma
    if state is None:
        raise TargetError("T.alloc_barrier barriers need the kernel's mbarrier array, which this target or "
                          "configuration lacks (sm_90a with TMA on)", span, code="E602")
    bases = state.hand
    if id(barriers) not in bases:
        bases[id(barriers)] = state.used_barriers
        for count in barriers.counts:
            state.take_barriers(1, arrivals=count)
    return make_binop("+", bases[id(barriers)], ctx.rewrite(index, {}))


def lower_bound_copy(ctx, s) -> list | None:
    """``T.tma_copy(src, dst, barrier=b)`` in warp specialization by hand: the warp group's first thread announces
    the tile's bytes on ``b`` (``mbarrier.expect_tx``, no arrival: the program's threads arrive themselves) and
    issues the TMA loads, which complete ``b``'s phase; nothing waits here (the program's ``T.barrier_wait`` does).
    None when TMA cannot move the tile (the caller lowers the plain copy: done before the threads' arrivals)."""
    from tileagent.compiler.lower.tma import issue, tile_plan

    entry, plan = tile_plan(ctx, s)
    if entry is None:
        return None
    ctx.note_instruction(s, entry.describe_plan(plan, s.src.buffer.dtype) + ", completing the program's barrier")
    return issue(ctx, [(s, plan)], _barrier_index(ctx, s.barrier.barriers, s.barrier.index, s.span), fence=True,
                 issuer=0, arrive=False)
