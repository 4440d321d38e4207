"""Lowering of ``T.copy`` by TMA (``compiler.instructions.tma``): tensor maps, mbarriers and their phases.

In: the LowerContext of one kernel and a global -> shared Copy the TMA entry accepts. Out: thread-IR statements.
- ``TmaState`` (one per kernel, shared by every view of the context): the kernel's tensor maps (one per global
  tensor, box and swizzle), its shared array of mbarriers (``tl_mbar``: one per lowered copy outside a pipeline, one
  per stage of a TMA pipeline; its size is bounded before lowering, ``TmaState.capacity``) and a local int32 array
  (``tl_tma_phase``, zero at kernel start) with one slot per copy site or pipeline: the phase parity of a copy's
  barrier, or the number of iterations a pipeline ran in earlier executions of its loop.
- ``issue(ctx, copies, barrier_index)``: thread 0 fences its generic-proxy shared accesses for the async proxy
  (``fence.proxy.async``), arrives on the barrier expecting the copies' bytes, and issues the TMA loads (one per
  column block). ``lower_tma_copy``: a copy outside a pipeline: every thread's proxy fence and a barrier, issue,
  every thread waits on the barrier with the site's parity, then flips it. A global tensor the kernel also writes
  is never a TMA source (``tile_plan``). ``finish_kernel``: the prologue (barrier init by thread 0 and its fence, a Barrier,
  the phase slots' Declare) and the barrier array's place at the end of the shared arena.
Guarantees: a copy's data is read only after every thread's ``MbarrierWait`` of the phase its bytes complete; the
expected byte count is exactly what its loads deliver (full boxes); each barrier is used by one site, whose waits
alternate parities in the order of its phases (also across repeated executions of a loop: the parity lives in a
register, not in a loop variable).
"""

from __future__ import annotations

from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Const, Load, as_expr, make_binop, make_cmp
from tileagent.compiler.ir.stmt import Buffer, Copy, If, Store
from tileagent.compiler.ir.visit import loads
from tileagent.compiler.tir import (THREAD, AsyncProxyFence, Barrier, Declare, MbarrierArrive, MbarrierArriveExpectTx,
                                    MbarrierInit, MbarrierWait, TensorMap, TmaLoad)

BARRIERS = "tl_mbar"
PHASES = "tl_tma_phase"


class TmaState:
    """What the TMA lowering of one kernel has allocated (see the module docstring)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.maps: dict = {}
        self.written = None  # global tensors the kernel writes (written_globals), computed on first use
        self.used_barriers = 0
        self.used_slots = 0
        self.arrivals: dict = {}  # first index -> (count, arrivals per phase) of barriers not expecting 1 arrival
        self.hand: dict = {}  # id of a program's T.alloc_barrier set -> its first index (lower.warp_groups)
        self.words: set = set()  # indices of slots that are plain words, not barriers (``take_word``)
        self.barriers = Buffer(BARRIERS, (max(capacity, 1),), DType("uint64"), "shared")
        self.phases = Buffer(PHASES, (max(capacity, 1),), DType("int32"), "local")

    def take_barriers(self, n: int, arrivals: int = 1) -> int:
        """The index of ``n`` fresh consecutive barriers, each completing a phase after ``arrivals`` arrivals (and the
        bytes its arrivals announced)."""
        first = self.used_barriers
        if first + n > self.capacity:
            raise RuntimeError(f"internal: {first + n} mbarriers exceed the {self.capacity} planned")
        self.used_barriers += n
        if arrivals != 1:
            self.arrivals[first] = (n, arrivals)
        return first

    def take_word(self) -> int:
        """The index of a slot of the barrier array that is no barrier (not initialized): a word some statement
        stores to and nothing reads (``tir.WgmmaWait.anchor_at``)."""
        index = self.take_barriers(1)
        self.words.add(index)
        return index

    def take_slot(self) -> int:
        slot = self.used_slots
        if slot >= self.capacity:
            raise RuntimeError(f"internal: {slot + 1} phase slots exceed the {self.capacity} planned")
        self.used_slots += 1
        return slot

    def tensor_map(self, flat: Buffer, g: Buffer, plan) -> TensorMap:
        """The kernel's tensor map of global tensor ``g`` (flat buffer ``flat``) for ``plan``'s box and swizzle."""
        key = (flat, plan.box, plan.swizzle)
        tm = self.maps.get(key)
        if tm is None:
            dims = tuple(reversed(tuple(g.shape)))  # innermost first
            strides, acc = [], as_expr(1)
            for n in dims[:-1]:
                acc = make_binop("*", acc, n)
                strides.append(acc)
            tm = TensorMap(f"tmap_{g.name}_{len(self.maps)}", flat, dims, tuple(strides), plan.box, plan.swizzle)
            self.maps[key] = tm
        return tm


def capacity(body) -> int:
    """The most barriers (and phase slots) the TMA lowering of a kernel body can take: one per global -> shared copy
    outside the software pipelines' producers (where ``standalone``), plus one per stage of each pipeline whose
    producers may use TMA (``pipeline_uses_tma``; both ``compiler.instructions.tma``). Phase slots (one per such copy,
    at most one per pipeline) are never more."""
    from tileagent.compiler.instructions.tma import pipeline_uses_tma, standalone
    from tileagent.compiler.lower.pipeline import SoftwarePipeline

    n = 0
    for s in body:
        if isinstance(s, SoftwarePipeline):  # one stage: a barrier per producer (compiler.lower.single_stage)
            per = len(s.producers) if s.stages == 1 else s.stages
            n += (per if pipeline_uses_tma(s.body) else 0) + capacity(s.consumers)
            continue
        if isinstance(s, Copy) and s.src.buffer.scope == "global" and s.dst.buffer.scope == "shared" and \
                standalone():
            n += 1
        for name in ("body", "then_body", "else_body"):
            n += capacity(getattr(s, name, ()) or ())
    return n


def written_globals(body) -> frozenset:
    """The global tensors a kernel body writes (tile ops, stores, atomics; at any depth)."""
    from tileagent.compiler.ir.stmt import AtomicAdd
    from tileagent.compiler.ir.visit import walk
    from tileagent.compiler.tileops import op_for

    out = set()
    for x in walk(body):
        op = op_for(x)
        if op is not None:
            out.update(b for b in op.effects(x).writes if b.scope == "global")
        elif isinstance(x, (Store, AtomicAdd)) and x.buffer.scope == "global":
            out.add(x.buffer)
    return frozenset(out)


def tile_plan(ctx, s):
    """(the TMA entry, its TmaPlan) for Copy ``s`` under ``ctx`` (its stage offsets), or (None, why not). A tensor the
    kernel also writes is not read by TMA: its generic-proxy stores would need a proxy fence in every writing thread
    before the async-proxy read."""
    from tileagent.compiler.instructions import select_tile_copy
    from tileagent.compiler.instructions.tma import plan

    state = getattr(ctx, "tma", None)
    if state is None or state.capacity == 0:
        return None, "no TMA in this kernel"
    if state.written is None:
        state.written = written_globals(ctx.kernel.body)
    if s.src.buffer in state.written:
        return None, (f"the kernel also writes '{s.src.buffer.name}' (generic stores that TMA's async-proxy reads "
                      "are not ordered after)")
    t = s.dst.buffer
    layout = ctx.shared_layouts.get(t)
    offsets = [ctx.plan.shared.offsets[t]] if ctx.plan is not None and t in ctx.plan.shared.offsets else []
    if t in ctx.stage_base:
        from tileagent.compiler.lower.pipeline import stage_stride

        offsets.append(stage_stride(t, layout) * t.dtype.bytes)
    entry, why = select_tile_copy(s.src, s.dst, layout, getattr(ctx, "target", None), offsets)
    if entry is None:
        return None, why
    return entry, plan(s.src, s.dst, layout, offsets)


def issue(ctx, copies, barrier_index, fence: bool = True, issuer: int | None = 0, arrive: bool = True) -> list:
    """Thread ``issuer`` (None: the caller runs these statements in one thread already): (``fence.proxy.async``),
    one ``arrive.expect_tx`` of all the bytes of ``copies`` ((Copy, TmaPlan) pairs) on ``barriers[barrier_index]``
    (``arrive`` False: ``expect_tx`` alone), and their TMA loads."""
    state = ctx.tma
    loads_, total = [], 0
    for s, p in copies:
        g = s.src.buffer
        tm = state.tensor_map(ctx.mem(g), g, p)
        starts = [start if next(loads(start), None) is None else ctx.rewrite(start, {}) for start in s.src.starts]
        coords = list(reversed(starts))  # innermost first
        base = ctx.offset(s.dst.buffer, tuple(s.dst.starts))  # a column block's first element (rows whole)
        dst = ctx.mem(s.dst.buffer)
        e = g.dtype.bytes
        for k in range(p.blocks):
            c = [make_binop("+", coords[0], k * p.box[0]) if k else coords[0]] + coords[1:]
            loads_.append(TmaLoad(dst, make_binop("+", base, k * p.block_bytes // e) if k else base, tm,
                                  tuple(as_expr(x) for x in c), state.barriers, as_expr(barrier_index), s.span))
        total += p.bytes
    span = copies[0][0].span
    body = ([AsyncProxyFence(span)] if fence else []) + \
        [MbarrierArriveExpectTx(state.barriers, as_expr(barrier_index), total, span, arrive=arrive)] + loads_
    return body if issuer is None else [If(make_cmp("==", THREAD, issuer), tuple(body), (), span)]


def wait(ctx, barrier_index, parity, span=None, for_free_stage: bool = False) -> list:
    return [MbarrierWait(ctx.tma.barriers, as_expr(barrier_index), as_expr(parity), span, for_free_stage)]


def arrive(ctx, barrier_index, span=None) -> list:
    return [MbarrierArrive(ctx.tma.barriers, as_expr(barrier_index), span)]


def lower_tma_copy(ctx, s: Copy, entry, p) -> list:
    """A copy outside a software pipeline: every thread's ``fence.proxy.async`` and a barrier (shared bytes of the
    tile that threads wrote or read before through the generic proxy are ordered before the async-proxy write),
    issue on a barrier of its own, wait with the site's parity, flip it."""
    state = ctx.tma
    bar = state.take_barriers(1)
    slot = state.take_slot()
    phase = Load(state.phases, (as_expr(slot),), DType("int32"))
    ctx.note_instruction(s, entry.describe_plan(p, s.src.buffer.dtype))
    return [AsyncProxyFence(s.span), Barrier(s.span)] + issue(ctx, [(s, p)], bar, fence=False) + \
        wait(ctx, bar, phase, s.span) + \
        [Store(state.phases, (as_expr(slot),), make_binop("^", phase, 1), s.span)]


def finish_kernel(state: TmaState, shared_bytes: int, shared_offsets: dict, base_align: int, limit: int,
                  span=None):
    """(prologue statements, shared_bytes, shared_offsets) with the kernel's mbarriers placed after the arena's
    buffers (before the alignment slack), or the inputs unchanged when no barrier was used; None when the barriers
    would push the arena over ``limit`` bytes (the caller lowers the kernel without TMA)."""
    if state.used_barriers == 0 and state.used_slots == 0:
        return [], shared_bytes, shared_offsets
    prologue = [Declare(state.phases, Const(0, DType("int32")), span)] if state.used_slots else []
    if state.used_barriers == 0:
        return prologue, shared_bytes, shared_offsets
    slack = base_align - 16 if base_align > 16 else 0
    used = shared_bytes - slack
    offset = -(-used // 16) * 16
    nbytes = -(-(state.barriers.shape[0] * 8) // 16) * 16
    total = offset + nbytes + slack
    if total > limit:
        return None
    offsets = dict(shared_offsets)
    offsets[state.barriers] = offset
    inits, first, n = [], 0, state.barriers.shape[0]  # one init per run of barriers with one arrival count
    while first < n:
        if first in state.words:
            first += 1
            continue
        count, arrivals = state.arrivals.get(first, (0, 1))
        if not count:
            while first + count < n and first + count not in state.arrivals and first + count not in state.words:
                count += 1
        inits.append(MbarrierInit(state.barriers, count, arrivals, span, first))
        first += count
    prologue += [If(make_cmp("==", THREAD, 0), tuple(inits), (), span), Barrier(span)]
    return prologue, total, offsets

