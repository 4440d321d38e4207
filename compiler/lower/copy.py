"""Lowering of tile data movement: ``T.copy``, ``T.fill``/``T.clear`` and tile ``T.atomic_add``.

In: one tile op and the LowerContext. Out: thread-IR statements.
How: the op iterates over tile coordinates with a Fragment: the fragment operand's own layout when there is one (so
each thread moves the registers it holds), else the blocked default over the tile (coalesced, ``16 bytes`` per
thread-access where alignment allows). Each thread handles runs of ``vector`` consecutive elements of the
innermost dim as one ``VecCopy``.
A tile ``T.atomic_add`` adds runs the same way, by an ``ATOMIC`` entry: 4 float32 or 2 float16/bfloat16 values into
global memory with one vector atomic where the run is contiguous and aligned, else one atomicAdd per element; a tile
``T.atomic_max`` / ``T.atomic_min`` goes one element at a time.
How one run moves is the copy entry of ``compiler.instructions`` that ``select_copy`` picks: in a software pipeline's
producers (``ctx.async_copies``) a global -> shared run of 4, 8 or 16 bytes without a cast is one ``AsyncCopy``
(cp.async, zero-filled outside the tensor), else a vectorized or scalar ``VecCopy``. Before any run, with
``TILEAGENT_ENABLE_TMA=1`` on an sm_90a target (not by default: ``compiler.instructions.tma.mode``), a global ->
shared copy outside a pipeline's producers moves as one TMA transfer on an mbarrier when the TMA entry accepts it
(``compiler.lower.tma``; why it does not is noted). A shared -> global copy of a whole unswizzled tile moves as
bulk stores on sm_90a where ``compiler.lower.bulk_store`` can (why not is noted).
``scratch_bytes``: the shared scratch a copy between
fragments of different layouts goes through.
Guarantees: global reads outside the tensor give 0 (the destination is zero-filled), global writes outside it are
dropped; only replica 0 of a replicated layout writes to memory; vector accesses only where both sides are
contiguous and aligned for the whole run (a 1-d tensor of run-time length: runs wholly inside it; the run across its
end moves element by element, ``_tail_split``).
"""

from __future__ import annotations

import math

from tileagent.compiler.diagnostics import TargetError
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Load, as_expr, make_binop, make_cast, make_cmp
from tileagent.compiler.ir.simplify import below_bound, known_multiple, static_int
from tileagent.compiler.ir.visit import loads
from tileagent.compiler.ir.stmt import AtomicAddTile, Buffer, Copy, Fill, For, If, Region, Store
from tileagent.compiler.layout import Fragment, make_blocked
from tileagent.compiler.tir import THREAD, AsyncCommit, AsyncCopy, AsyncWait, Barrier, PackPairs, VecCopy
from tileagent.compiler.instructions import ATOMIC, select_copy
from tileagent.compiler.instructions.base import has_feature
from tileagent.compiler.instructions.copy import Run
from tileagent.compiler.instructions.bulk_store import enabled as bulk_stores_enabled
from tileagent.compiler.instructions.tma import standalone
from tileagent.compiler.lower.context import and_
from tileagent.compiler.lower.slots import SlotLoops


PER_THREAD = ("local", "var")  # scopes where each thread has its own copy of the whole buffer


def lower_copy(ctx, s: Copy) -> list:
    src, dst = s.src, s.dst
    if src.buffer.scope == "fragment" and dst.buffer.scope == "fragment":
        _whole(src, s)
        _whole(dst, s)
        if dst.buffer in ctx.packed:  # float32 -> 16-bit pairs packed for a gemm (gemm.packable_a_operands)
            ctx.note_instruction(s, "register pack (cvt to 16-bit pairs)")
            return [PackPairs(ctx.mem(dst.buffer), ctx.mem(src.buffer), ctx.frag(dst.buffer).num_slots // 2,
                              str(dst.buffer.dtype), s.span)]
        if ctx.frag(src.buffer).same_as(ctx.frag(dst.buffer)):
            ctx.note_instruction(s, "register move")
            n = ctx.frag(src.buffer).num_slots
            return [VecCopy(ctx.mem(dst.buffer), as_expr(0), ctx.mem(src.buffer), as_expr(0), n, s.span)]
        ctx.note_instruction(s, "layout conversion through shared memory")
        return _convert_through_shared(ctx, src.buffer, dst.buffer, s)
    if src.buffer.scope == "fragment" and dst.buffer.scope in PER_THREAD:  # every thread needs every element
        _whole(src, s)
        _whole(dst, s)
        ctx.note_instruction(s, "fragment gathered into every thread's registers through shared memory")
        return _convert_through_shared(ctx, src.buffer, dst.buffer, s)
    if src.buffer.scope == "global" and dst.buffer.scope == "shared" and not ctx.async_copies and \
            getattr(ctx, "tma", None) is not None and standalone():  # the whole tile by TMA, where it can
        from tileagent.compiler.lower.tma import lower_tma_copy, tile_plan

        entry, plan = tile_plan(ctx, s)
        if entry is not None:
            return lower_tma_copy(ctx, s, entry, plan)
        ctx.note_instruction(s, f"no TMA: {plan}")
    if src.buffer.scope == "shared" and dst.buffer.scope == "global" and ctx.plan is not None and \
            has_feature(getattr(ctx, "target", None), "tma") and bulk_stores_enabled():
        from tileagent.compiler.lower.bulk_store import lower_bulk_store

        stmts, how = lower_bulk_store(ctx, s)
        if stmts is not None:
            ctx.note_instruction(s, how)
            return stmts
        ctx.note_instruction(s, f"no bulk store: {how}")
    if src.buffer in ctx.made_tensors and dst.buffer.scope == "shared" and not ctx.async_copies and \
            has_feature(getattr(ctx, "target", None), "cp_async"):
        # a tensor made from an address is no __restrict__ parameter: loads through registers would wait for the
        # stores before them (they may alias); cp.async moves it without registers, waited for at once
        return lower_copy(ctx.derive(async_copies=True), s) + [AsyncCommit(s.span), AsyncWait(0, s.span)]
    layout, coords, window = _iteration(ctx, src, dst, s)
    return _transfer(ctx, layout, coords, src, dst, s, atomic=False, window=window)


def merge_async_waits(stmts: list) -> list:
    """``stmts`` where the cp.async copies of tensors made from addresses (``lower_copy``) that follow one another
    share one wait: a ``cp.async.wait_group 0`` followed, before anything else, by more copies and their own commit
    and wait is dropped, so that every copy is in flight before the first wait."""
    out = list(stmts)
    for k in range(len(out) - 1, 0, -1):
        if isinstance(out[k], AsyncWait) and out[k].pending == 0 and isinstance(out[k - 1], AsyncCommit):
            rest = k + 1
            while rest < len(out) and _only_async_copies(out[rest]):
                rest += 1
            if rest > k + 1 and rest + 1 < len(out) and isinstance(out[rest], AsyncCommit) and \
                    isinstance(out[rest + 1], AsyncWait) and out[rest + 1].pending == 0:
                del out[k]
    return out


def _only_async_copies(x) -> bool:
    if isinstance(x, AsyncCopy):
        return True
    bodies = [getattr(x, n) for n in ("body", "then_body", "else_body") if isinstance(getattr(x, n, None), tuple)]
    return isinstance(x, (For, If)) and bool(bodies) and all(_only_async_copies(y) for b in bodies for y in b)


def _convert_through_shared(ctx, src, dst, s) -> list:
    """A copy between fragments whose layouts differ, or from a fragment into per-thread storage (every thread then
    reads every element): every thread writes the elements it holds into the shared scratch (row-major, in the
    destination's dtype when that is a float, which rounds exactly as the copy does; else float32), then reads the
    ones its destination layout gives it."""
    ws = ctx.scratch(conversion_dtype(dst))
    out = []
    for frag_buf, write in ((src, True), (dst, False)):
        layout = ctx.frag(frag_buf) if frag_buf.scope == "fragment" else \
            make_blocked(tuple(frag_buf.shape), ctx.threads, 1, tuple(range(frag_buf.ndim)))  # every thread, all
        loops = SlotLoops(ctx, layout)
        idx = loops.index(THREAD)
        offset = ctx.offset(Buffer(frag_buf.name, frag_buf.shape, frag_buf.dtype, "global"), idx)
        slot = as_expr(loops.slot() if frag_buf.scope == "fragment" else offset)  # per-thread arrays: row-major
        reg = Load(ctx.mem(frag_buf), (slot,), frag_buf.dtype)
        move = Store(ws, (as_expr(offset),), make_cast(reg, "float32"), s.span) if write else \
            Store(ctx.mem(frag_buf), (slot,), make_cast(Load(ws, (as_expr(offset),), ws.dtype), frag_buf.dtype),
                  s.span)
        valid = valid_condition(ctx, layout, idx, write=write)
        out += loops.nest(guarded(ctx, valid, [move]))
        out.append(Barrier())
    return out


def conversion_dtype(dst: Buffer) -> str:
    """The dtype a fragment-to-fragment layout conversion stages its values in."""
    return str(dst.dtype) if dst.dtype.is_float else "float32"


def scratch_bytes(s: Copy, layouts) -> int:
    """Shared scratch the copy needs: the whole source tile in ``conversion_dtype`` for a copy between fragments
    whose layouts differ, else none."""
    if s.src.buffer.scope == "fragment" and (s.dst.buffer.scope in PER_THREAD or (
            s.dst.buffer.scope == "fragment" and
            not layouts.fragments[s.src.buffer].same_as(layouts.fragments[s.dst.buffer]))):
        return math.prod(s.src.buffer.shape) * DType(conversion_dtype(s.dst.buffer)).bytes
    return 0


def lower_atomic_add_tile(ctx, s: AtomicAddTile) -> list:
    from tileagent.compiler.lower.parallel import check_atomic_dtype

    check_atomic_dtype(s.op, s.dst.buffer, s.span)
    layout, coords, window = _iteration(ctx, s.src, s.dst, s)
    return _transfer(ctx, layout, coords, s.src, s.dst, s, atomic=True, window=window)


def lower_fill(ctx, s: Fill) -> list:
    buf = s.dst.buffer
    value = make_cast(ctx.rewrite(s.value, {}), buf.dtype)
    if buf.scope in ("fragment", "local", "var"):  # every register of the thread
        _whole(s.dst, s)
        ctx.note_instruction(s, "register fill")
        k = ctx.var("k")
        reg = ctx.mem(buf)
        return [For(k, 0, reg.shape[0], 1, "unroll", (Store(reg, (k,), value, s.span),), span=s.span)]
    layout = make_blocked(tuple(s.dst.extents), ctx.threads, 1)
    ctx.note_instruction(s, "scalar st")
    loops = SlotLoops(ctx, layout)
    c = loops.index(THREAD)
    guard, store = ctx.store(buf, _region_index(s.dst, tuple(s.dst.extents), c, ctx), value, s.span)
    return loops.nest(guarded(ctx, and_(valid_condition(ctx, layout, c, write=True), guard), [store]))


# -- helpers ---------------------------------------------------------------------------------------------------
def _whole(r: Region, s):
    if any(static_int(x) != 0 for x in r.starts) or tuple(r.extents) != tuple(r.buffer.shape):
        raise TargetError(f"the CUDA backend moves and fills whole register tiles only; '{r.buffer.name}' is sliced "
                          f"here", s.span,
                          code="E602", hint=f"copy the whole fragment '{r.buffer.name}' or stage it in shared memory")


def _window(r: Region, s) -> tuple | None:
    """For a fragment region: None when it is the whole fragment, else its static (start, extent) per dim (TileLang
    copies slices such as ``acc_o[:valid_rows, :]``); E602 when a start is not a compile-time constant."""
    if all(static_int(x) == 0 for x in r.starts) and tuple(r.extents) == tuple(r.buffer.shape):
        return None
    starts = [static_int(x) for x in r.starts]
    extents = [static_int(x) for x in r.extents]
    if None in starts or None in extents:
        raise TargetError(f"the CUDA backend moves slices of register tiles at compile-time offsets only; "
                          f"'{r.buffer.name}' is sliced at a runtime offset here", s.span, code="E602",
                          hint=f"copy the whole fragment '{r.buffer.name}' or stage it in shared memory")
    return tuple(zip(starts, extents))


def _iteration(ctx, src: Region, dst: Region, s):
    """The Fragment that iterates the op's tile coordinates, the coordinate shape, and the fragment window (None, or
    the static (start, extent) per dim of a sliced fragment operand: coordinates outside it are skipped)."""
    for r in (src, dst):
        if r.buffer.scope == "fragment":
            return ctx.frag(r.buffer), tuple(r.buffer.shape), _window(r, s)
    coords = tuple(dst.extents)
    sizes = [src.buffer.dtype.bytes, dst.buffer.dtype.bytes]
    if dst.buffer.scope in PER_THREAD:  # every thread fills its own copy: each iterates every coordinate
        return make_blocked(coords, ctx.threads, 1, tuple(range(len(coords)))), coords, None
    return make_blocked(coords, ctx.threads, max(1, 16 // max(sizes))), coords, None


def _region_index(r: Region, coords_shape, c, ctx=None) -> tuple:
    """Index into r.buffer of tile coordinate c (coordinates over coords_shape; size-1 dims are skipped on both
    sides, the rest pair up in order). With ``ctx``, a start that reads a buffer (``B[cur_batch_idx, ...]`` with a
    T.alloc_var) is rewritten to the thread IR's register of it."""
    along = [c[d] for d, n in enumerate(coords_shape) if n != 1]
    idx = []
    for start, n in zip(r.starts, r.extents):
        if ctx is not None and next(loads(start), None) is not None:
            start = ctx.rewrite(start, {})
        idx.append(make_binop("+", start, along.pop(0)) if n != 1 else start)
    return tuple(idx)


def _vector_ok(ctx, r: Region, coords_shape, width: int) -> bool:
    """Whether runs of ``width`` along the last tile coordinate are contiguous and aligned in r's memory."""
    if width == 1 or r.buffer.scope == "fragment":
        return True
    last_coord = max(d for d, n in enumerate(coords_shape) if n != 1)
    nonunit = [d for d, n in enumerate(r.extents) if n != 1]
    if not nonunit or nonunit[-1] != r.buffer.ndim - 1 or last_coord != len(coords_shape) - 1:
        return False
    if r.buffer.scope == "shared":
        layout = ctx.shared_layouts[r.buffer]
        row = layout._strides()[-2] if r.buffer.ndim > 1 else width
        if row % width or (layout.swizzle is not None and width > 1 << layout.swizzle.base):
            return False  # a run must not cross a swizzled 16-byte chunk
    else:
        inner = static_int(r.buffer.shape[-1])
        if inner is None and (r.buffer.ndim != 1 or getattr(ctx, "async_copies", False)):
            return False  # rows of a run-time pitch: no alignment known (1-d: runs at the end split, _tail_split)
        if inner is not None and inner % width:
            return False
    return known_multiple(r.starts[-1], ctx.lets) % width == 0


def _transfer(ctx, layout: Fragment, coords, src: Region, dst: Region, s, atomic: bool, window=None) -> list:
    width = layout.vector_width
    if window is not None:  # a run lies wholly inside or outside the fragment window
        start, extent = window[-1]
        while width > 1 and (start % width or extent % width):
            width //= 2
    memory_sides = [r.buffer.dtype.bytes for r in (src, dst) if r.buffer.scope in ("global", "shared")]
    max_elems = max(1, 16 // max(memory_sides)) if memory_sides else width
    if atomic:  # vector atomics: 4 x float32 or 2 x 16-bit floats into global memory
        max_elems = {"float32": 4, "float16": 2, "bfloat16": 2}.get(str(dst.buffer.dtype), 1) \
            if dst.buffer.scope == "global" and getattr(s, "op", "add") == "add" else 1  # no vector max/min
    mem_coords = coords if window is None else tuple(n for _, n in window)
    while width > 1 and (width > max_elems or not (_vector_ok(ctx, src, mem_coords, width)
                                                    and _vector_ok(ctx, dst, mem_coords, width))):
        width //= 2
    entries = ATOMIC if atomic else None
    instruction = select_copy(src, dst, width, ctx.async_copies and not atomic, getattr(ctx, "target", None), entries)
    ctx.note_instruction(s, instruction.describe(src, width))
    if layout.vector_width % width == 0:
        loops = SlotLoops(ctx, layout, vector=width)
        return loops.nest(_transfer_group(ctx, layout, coords, src, dst, s, atomic, width, loops.index(THREAD),
                                          loops.slot(), instruction, window))
    out = []
    for k in range(0, layout.num_slots, width):
        out += _transfer_group(ctx, layout, coords, src, dst, s, atomic, width, layout.inverse(THREAD, k), k,
                               instruction, window)
    return out


def _transfer_group(ctx, layout, coords, src, dst, s, atomic, width, c, k, instruction, window=None) -> list:
    """Statements moving the ``width`` elements at tile coordinate ``c`` (register ``k`` of the layout), by
    ``instruction`` (a copy or atomic entry of ``compiler.instructions``). With a ``window`` (a sliced fragment
    operand), ``c`` is a coordinate of the whole fragment: those outside the window are skipped and the memory side
    is indexed relative to the window's start."""
    valid = valid_condition(ctx, layout, c, write=dst.buffer.scope not in ("fragment",) + PER_THREAD)
    mem_c, mem_coords = c, coords
    if window is not None:
        for d, (start, extent) in enumerate(window):
            if (start, extent) != (0, layout.shape[d]):
                valid = and_(valid, and_(make_cmp(">=", c[d], start), make_cmp("<", c[d], start + extent)))
        mem_c = tuple(make_binop("-", x, start) for x, (start, _) in zip(c, window))
        mem_coords = tuple(n for _, n in window)
    s_idx, d_idx = (tuple(c) if window is not None and r.buffer.scope == "fragment" else
                    _region_index(r, mem_coords, mem_c, ctx) for r in (src, dst))
    s_in = ctx.in_bounds(src.buffer, s_idx) if src.buffer.scope == "global" else True
    d_in = ctx.in_bounds(dst.buffer, d_idx) if dst.buffer.scope == "global" else True
    s_pos = k if src.buffer.scope == "fragment" else ctx.offset(src.buffer, s_idx)
    d_pos = k if dst.buffer.scope == "fragment" else ctx.offset(dst.buffer, d_idx)
    run = Run(width, s_idx, d_idx, s_pos, d_pos, s_in, d_in, valid)
    return _tail_split(ctx, s, src, dst, run, instruction) or instruction.build(ctx, s, src, dst, run)


def _tail_split(ctx, s, src, dst, run: Run, instruction) -> list | None:
    """A vector run over a 1-d global tensor of run-time length (``T.Tensor((L,))``: a flat view) as ``if the whole
    run is inside: one vector access, else: one element at a time``, so only a run across the end goes element by
    element (it was every run: a flat copy of fp16 moved 2 bytes an access). None when no side needs it."""
    if run.width == 1:
        return None
    sides = [(r, idx) for r, idx, cond in ((src, run.s_idx, run.s_in), (dst, run.d_idx, run.d_in))
             if r.buffer.scope == "global" and r.buffer.ndim == 1 and static_int(r.buffer.shape[0]) is None
             and cond is not True]
    if not sides:
        return None
    whole = True
    for r, idx in sides:
        whole = and_(whole, ctx.in_bounds(r.buffer, (make_binop("+", idx[0], run.width - 1),)))
    vector = instruction.build(ctx, s, src, dst, Run(run.width, run.s_idx, run.d_idx, run.s_pos, run.d_pos,
                                                     True if src.buffer.scope == "global" else run.s_in,
                                                     True if dst.buffer.scope == "global" else run.d_in, run.valid))
    scalar = select_copy(src, dst, 1, False, getattr(ctx, "target", None))
    elements = []
    for v in range(run.width):
        s_idx, d_idx = (idx[:-1] + (make_binop("+", idx[-1], v),) for idx in (run.s_idx, run.d_idx))
        elements += scalar.build(ctx, s, src, dst, Run(
            1, s_idx, d_idx, make_binop("+", run.s_pos, v), make_binop("+", run.d_pos, v),
            ctx.in_bounds(src.buffer, s_idx) if src.buffer.scope == "global" else True,
            ctx.in_bounds(dst.buffer, d_idx) if dst.buffer.scope == "global" else True, run.valid))
    return guarded(ctx, whole, vector, elements)


def valid_condition(ctx, layout: Fragment, c, write: bool):
    """Padding and (for writes to memory) replica-0 conditions of the element at tile coordinate c."""
    cond = True
    for d, (n, covered) in enumerate(zip(layout.shape, layout.padded_shape)):
        if covered > n:
            x = below_bound(c[d], n, ctx.range_of)  # one bound per vector of registers, not per element
            r = ctx.range_of(x)
            if r is None or r[1] >= n:
                cond = and_(cond, make_cmp("<", x, n))
    if layout.threads_used < ctx.threads:
        cond = and_(cond, make_cmp("<", THREAD, layout.threads_used))
    if write:
        for lv in layout.replicate:
            cond = and_(cond, make_cmp("==", make_binop("%", make_binop("//", THREAD, lv.stride), lv.size), 0))
    return cond


def guarded(ctx, cond, then, otherwise=()) -> list:
    """Statements for ``if cond: then else: otherwise``, folded when cond is known for every thread."""
    then, otherwise = list(then), list(otherwise)
    values = None if cond is True else ctx.per_thread_bool(cond)
    if cond is True or (values is not None and values.all()):
        return then
    if values is not None and not values.any():
        return otherwise
    return [If(cond, tuple(then), tuple(otherwise))]
