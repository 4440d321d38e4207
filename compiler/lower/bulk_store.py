"""Lowering of a shared -> global ``T.copy`` by bulk stores (``compiler.instructions.bulk_store``).

In: the LowerContext of one kernel and a Copy from a shared tile into a global tensor. Out: thread-IR statements, or
(None, why not) when the copy must move as runs (``compiler.lower.copy``).
How: every thread fences its generic-proxy writes of shared memory for the asynchronous proxy and a Barrier orders
all of them before the copies; then a ``BulkStore`` of the whole region from the first thread of the view (rows
contiguous on both sides: ``BulkPlan.merged``), or one per row, row r from thread ``r % n`` of the view's n threads;
each issuing thread then waits until its copies have read shared memory (``BulkStoreWait``), so a later write of
the tile (after the Barrier the barrier pass puts there: the copy reads the tile) cannot race with them.
Declines (the reason is noted in ``get_ir("thread")``): warp specialization by hand or per-thread code (the copy may
run in some threads only), a staged (pipelined) tile, a tensor the kernel reads or adds to (the copies' global
writes complete only after the kernel: ``.read`` waits for the shared side alone) or writes other than from shared
tiles (generic and async-proxy writes of one address are not ordered), columns not proven inside the
tensor, a row start not known to lie on 16 bytes, and rows not all proven inside the tensor for a merged copy (rows
one by one are each guarded instead).
Guarantees: every byte the copy writes is read from the tile after every thread's earlier writes of it; rows
outside the tensor are not written; the global tensor gets a 16-byte launch alignment check (``required_alignment``).
"""

from __future__ import annotations

from dataclasses import replace

from tileagent.compiler.ir.expr import as_expr, make_binop, make_cmp
from tileagent.compiler.ir.simplify import known_multiple, static_int
from tileagent.compiler.ir.stmt import Copy, For, If
from tileagent.compiler.ir.visit import leaves
from tileagent.compiler.instructions.bulk_store import ALIGN, MIN_BYTES
from tileagent.compiler.lower.context import and_
from tileagent.compiler.tir import THREAD, AsyncProxyFence, Barrier, BulkStore, BulkStoreWait


def lower_bulk_store(ctx, s) -> tuple[list | None, str]:
    """(statements, description) of Copy ``s`` by bulk stores, or (None, why not)."""
    from tileagent.compiler.instructions import select_tile_copy

    src, dst = s.src, s.dst
    if ctx.hand_specialized or ctx.kernel.thread_vars:
        return None, "the copy may run in some threads only (per-thread code or warp groups by hand)"
    if src.buffer in ctx.stage_base or ctx.plan.shared.offsets.get(src.buffer, 0) % ALIGN:
        return None, f"'{src.buffer.name}' is a pipeline stage or not on 16 bytes in shared memory"
    entry, why = select_tile_copy(src, dst, ctx.shared_layouts.get(src.buffer), getattr(ctx, "target", None))
    if entry is None:
        return None, why
    p = entry.plan(src, dst, ctx.shared_layouts.get(src.buffer))
    other = _other_access(ctx.kernel.body, dst.buffer)
    if other is not None:
        return None, other
    g, elem = dst.buffer, dst.buffer.dtype.bytes
    n_last = static_int(g.shape[-1])
    r = ctx.range_of(dst.starts[-1])
    if n_last is None or r is None or r[0] < 0 or r[1] + p.row_elems > n_last:
        return None, f"the columns of '{g.name}' are not proven inside the tensor"
    issuers = ctx.thread_range[1] - ctx.thread_range[0]
    ends = [_row(ctx, s, p, as_expr(i)) for i in sorted({0, p.rows - 1})] if p.merged else []
    if ends and all(inside is True for _, _, inside in ends) and _aligned(ctx, ends[0], elem):
        g_off, t_off, _ = ends[0]
        body = [BulkStore(ctx.mem(g), g_off, ctx.mem(src.buffer), t_off, p.rows * p.row_bytes, s.span)]
        issue = [If(make_cmp("==", THREAD, ctx.thread_range[0]), tuple(body + [BulkStoreWait(s.span)]), (), s.span)]
    else:  # one copy per row (also rows contiguous but not all proven inside the tensor: each is guarded)
        if p.row_bytes < MIN_BYTES:
            return None, f"rows of {p.row_bytes} bytes not all proven inside the tensor (one copy each: too short)"
        p = replace(p, merged=False)
        trips = -(-p.rows // issuers)
        k = ctx.var("k")
        ctx.ranges[k] = (0, trips - 1)
        row = make_binop("-", THREAD, ctx.thread_range[0])
        row = make_binop("+", row, make_binop("*", k, issuers)) if trips > 1 else row
        g_off, t_off, inside = _row(ctx, s, p, row)
        if not _aligned(ctx, (g_off, t_off, inside), elem):
            return None, "a row does not start on 16 bytes in both memories"
        cond = and_(make_cmp("<", row, p.rows) if trips > 1 and p.rows % issuers else True, inside)
        copy = [BulkStore(ctx.mem(g), g_off, ctx.mem(src.buffer), t_off, p.row_bytes, s.span)]
        copy = copy if cond is True else [If(cond, tuple(copy), (), s.span)]
        rows = [For(k, 0, trips, 1, "serial", tuple(copy), span=s.span)] if trips > 1 else copy
        waiters = make_cmp("<", THREAD, ctx.thread_range[0] + min(p.rows, issuers))
        issue = [If(waiters, tuple(rows) + (BulkStoreWait(s.span),), (), s.span)]
    return [AsyncProxyFence(s.span), Barrier(s.span)] + issue, entry.describe_plan(p)


def _row(ctx, s, p, row) -> tuple:
    """(global element offset, shared element offset, in-bounds condition) of the first element of tile row ``row``
    (an expression over the tile's outer dims, row-major)."""
    from tileagent.compiler.lower.copy import _region_index

    shape = tuple(static_int(n) for n in s.src.buffer.shape)
    outer = [d for d, n in enumerate(shape[:-1]) if n != 1]
    coords, rest = [as_expr(0)] * len(shape), row
    for d in reversed(outer):  # row < p.rows: the outermost coordinate needs no modulo
        coords[d] = make_binop("%", rest, shape[d]) if d != outer[0] else rest
        rest = make_binop("//", rest, shape[d])
    c = tuple(coords)
    idx = _region_index(s.dst, shape, c, ctx)
    return (as_expr(ctx.offset(s.dst.buffer, idx)), as_expr(ctx.offset(s.src.buffer, c)),
            ctx.in_bounds(s.dst.buffer, idx))


def _aligned(ctx, row, elem: int) -> bool:
    """Whether both offsets of ``row`` are known to lie on 16 bytes (the tile's start does: ``lower_bulk_store``)."""
    g_off, t_off, _ = row
    return all(known_multiple(off, ctx.lets) * elem % ALIGN == 0 for off in (g_off, t_off))


def _other_access(body, g) -> str | None:
    """Why the kernel's other accesses of global tensor ``g`` rule bulk stores out (a read anywhere; a write other
    than a copy from a shared tile), or None (``compiler.lower.barriers.shared_effects`` says what each touches)."""
    from tileagent.compiler.lower.barriers import shared_effects

    if any(g in shared_effects(x, ("global",))[1] for x in body):
        return f"the kernel reads '{g.name}' (bulk stores complete after the kernel)"
    if any(g in shared_effects(x, ("global",))[0] for x in leaves(body)
           if not (isinstance(x, Copy) and x.src.buffer.scope == "shared")):
        return (f"the kernel also writes '{g.name}' other than from shared tiles (the async proxy's writes are not "
                "ordered with those)")
    return None


__all__ = ["lower_bulk_store"]
