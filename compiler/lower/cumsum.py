"""Lowering of ``T.cumsum``: a line split among several threads (chunk scans, a shuffle scan of the chunk totals),
or one thread per line.

In: a checked CumSum (both operands fragments or both shared tiles, one shape) and the lowering context (its
fragments' layouts inferred). Out: thread-IR statements.
How: ``tileops.cumsum.split_of`` fixes the summation order from the shape, ``dim``, scopes, dtypes and the block's
thread count (its module docstring gives the order; the tile interpreter follows the same one). Slot ``t`` (the
thread, plus ``threads`` per round when one thread scans several lines) is part ``t % parts`` of line
``t // parts``. ``_scan`` reads each element through ``read_at`` and keeps the sums where ``write_at`` says:
- a shared dst that holds its sums exactly (its dtype is the accumulation dtype), or any shared tile scanned one
  thread per line, is scanned in place: read from src, sums written to dst (rounded into dst's dtype);
- otherwise (fragments; a 16-bit shared tile split among threads) the tile goes through the shared scratch
  (``ctx.scratch``) in the accumulation dtype, line ``l`` at ``l * parts * stride`` in scan order (reversed for a
  suffix scan; ``stride``: the chunk, rounded up to an odd number for one thread per line): fragments are stored
  by their holders (replica 0), shared tiles by all threads in row-major order; barrier; ``_scan``; barrier; the
  sums are read back (rounded into dst's dtype); barrier, so the scratch is free for the next op.
With several parts, ``_scan``'s pass 1 scans each chunk from 0 (its total stays in a register), ``shfl_xor``
butterflies give each part the exclusive sum of the parts before it within its warp (the warp totals of a line that
spans several warps go through the scratch, after the tile's data when the tile is there), pass 2 adds that offset
to each of the chunk's sums. Odd chunks make the lanes of a warp scan 4-byte elements in distinct banks (row-major
lines along the last dim).
Guarantees: the results agree bit for bit with ``CumSumOp.interpret`` (same order, same dtypes); shuffles run
outside any thread-dependent branch; every barrier is reached by every thread.
"""

from __future__ import annotations

import math

from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Call, Const, Load, as_expr, make_binop, make_cast, make_cmp, make_select
from tileagent.compiler.ir.stmt import For, Store
from tileagent.compiler.lower.context import and_
from tileagent.compiler.lower.copy import guarded, valid_condition
from tileagent.compiler.lower.slots import SlotLoops
from tileagent.compiler.tileops.cumsum import Split, accumulation_dtype, split_of
from tileagent.compiler.tir import LANE, THREAD, Barrier, Declare

UNROLLED_CHUNK = 32  # chunk scans up to this long are unrolled (constant offsets after the thread's base)


def stride(sp: Split) -> int:
    """Scratch elements per part: its chunk (odd when a line is split), rounded up to an odd number, so the slots a
    warp scans side by side start in distinct banks."""
    return sp.chunk | 1


def in_place(s, sp: Split) -> bool:
    """Whether ``s`` is scanned in its shared dst rather than through the scratch."""
    return s.src.scope == "shared" and (sp.parts == 1 or s.dst.dtype == accumulation_dtype(s.dst.dtype))


def _data_elements(s, sp: Split) -> int:
    return 0 if in_place(s, sp) else sp.lines * sp.parts * stride(sp)


def scratch_bytes(s, threads: int) -> int:
    """Shared scratch the lowering needs: the tile in the accumulation dtype unless it is scanned in place (a part's
    ``stride`` elements each), plus one total per warp of each line when a line spans several warps."""
    sp, acc = split_of(s, threads), accumulation_dtype(s.dst.dtype)
    return (_data_elements(s, sp) + (sp.lines * sp.warps if sp.parts > 32 else 0)) * acc.bytes


def lower_cumsum(ctx, s) -> list:
    """Thread IR of ``s`` (the module docstring says how)."""
    acc_dt = accumulation_dtype(s.dst.dtype)
    sp = split_of(s, ctx.threads)
    shape, dim = tuple(s.src.shape), s.dim % s.src.ndim
    others = [d for d in range(len(shape)) if d != dim]
    where = "in place" if in_place(s, sp) else "in the shared scratch"
    if sp.parts == 1:
        ctx.note_instruction(s, f"sequential scan per line {where}")
    else:
        ctx.note_instruction(s, f"chunk scans {where}: {sp.parts} threads a line, {sp.chunk} elements each, "
                                f"{min(sp.parts, 32).bit_length() - 1} shfl.xor rounds" +
                             (f", the {sp.warps} warp totals of a line through shared memory" if sp.parts > 32 else ""))

    def tile_index(line, j):  # the tile element at position j (scan order) of line
        idx, rest = [None] * len(shape), line
        for d in reversed(others):  # last dim fastest
            idx[d] = make_binop("%", rest, shape[d]) if d != others[0] else rest
            rest = make_binop("//", rest, shape[d])
        idx[dim] = make_binop("-", sp.n - 1, j) if s.reverse else j
        return tuple(idx)

    if in_place(s, sp):
        def read_at(line, j, pos):
            return ctx.mem(s.src), as_expr(ctx.offset(s.src, tile_index(line, j)))

        def write_at(line, j, pos):
            return ctx.mem(s.dst), as_expr(ctx.offset(s.dst, tile_index(line, j)))

        return _scan(ctx, s, sp, read_at, write_at, acc_dt, 0)
    ws = ctx.scratch(acc_dt)

    def at_scratch(line, j, pos):
        return ws, pos

    def position(idx):  # the scratch element of tile element idx
        line = 0
        for d in others:
            line = make_binop("+", make_binop("*", line, shape[d]), idx[d])
        j = make_binop("-", sp.n - 1, idx[dim]) if s.reverse else idx[dim]
        return make_binop("+", make_binop("*", line, sp.parts * stride(sp)), j)

    out = []
    for buf, write in ((s.src, True), (s.dst, False)):
        if s.src.scope == "fragment":
            layout = ctx.frag(buf)
            loops = SlotLoops(ctx, layout)
            idx = loops.index(THREAD)
            pos, reg = position(idx), (as_expr(loops.slot()),)
            move = Store(ws, (pos,), make_cast(Load(ctx.mem(buf), reg, buf.dtype), acc_dt), s.span) if write else \
                Store(ctx.mem(buf), reg, make_cast(Load(ws, (pos,), acc_dt), buf.dtype), s.span)
            out += loops.nest(guarded(ctx, valid_condition(ctx, layout, idx, write=write), [move]))
        else:
            def move(idx, buf=buf, write=write):
                mem, at = ctx.mem(buf), (as_expr(ctx.offset(buf, idx)),)
                if write:
                    return Store(ws, (position(idx),), make_cast(Load(mem, at, buf.dtype), acc_dt), s.span)
                return Store(mem, at, make_cast(Load(ws, (position(idx),), acc_dt), buf.dtype), s.span)
            out += _over_tile(ctx, s, shape, move)
        out.append(Barrier())
        if write:
            out += _scan(ctx, s, sp, at_scratch, at_scratch, acc_dt, _data_elements(s, sp))
            out.append(Barrier())
    return out


def _over_tile(ctx, s, shape, move) -> list:
    """``move(idx)`` for every element of a shared tile, in row-major order over the threads (rounds of
    ``ctx.threads`` consecutive elements)."""
    total = math.prod(shape)
    rounds = -(-total // ctx.threads)
    r = ctx.var("r")
    ctx.ranges[r] = (0, rounds - 1)
    e = make_binop("+", make_binop("*", r, ctx.threads), THREAD) if rounds > 1 else THREAD
    idx, rest = [None] * len(shape), e
    for d in reversed(range(len(shape))):
        idx[d] = make_binop("%", rest, shape[d]) if d else rest
        rest = make_binop("//", rest, shape[d])
    body = guarded(ctx, make_cmp("<", e, total), [move(tuple(idx))]) if total % ctx.threads else [move(tuple(idx))]
    return [For(r, 0, rounds, 1, "serial", tuple(body), span=s.span)] if rounds > 1 else body


def _scan(ctx, s, sp: Split, read_at, write_at, acc_dt, totals_base: int) -> list:
    """Thread IR: the inclusive scan of every line in ``split_of``'s order. ``read_at(line, j, pos)`` and
    ``write_at(line, j, pos)`` give (buffer, index) of the element at position ``j`` (scan order) of ``line``
    (``pos``: its scratch element) to read and to keep the sums at; the warp totals of a line that spans several
    warps go to the scratch from ``totals_base`` (0: in place, and a barrier follows their reads). Ends without a
    barrier."""
    regs = ctx.scratch_registers(f"cs_{s.dst.name}", 3, acc_dt)  # [running sum, exclusive offset, shuffled value]

    def reg(k):
        return Load(regs, (as_expr(k),), acc_dt)

    def set_reg(k, value):
        return Store(regs, (as_expr(k),), value, s.span)

    zero = Const(0.0 if acc_dt.is_float else 0, acc_dt)
    rounds = -(-sp.lines // (ctx.threads // sp.parts))
    r, i = ctx.var("r"), ctx.var("i")
    ctx.ranges[r], ctx.ranges[i] = (0, rounds - 1), (0, sp.chunk - 1)
    slot = make_binop("+", make_binop("*", r, ctx.threads), THREAD) if rounds > 1 else THREAD
    if sp.lines * sp.parts == ctx.threads == sp.parts:  # one line over the whole block
        line, part = 0, slot
    else:
        line = make_binop("//", slot, sp.parts) if sp.parts > 1 else slot
        part = make_binop("%", slot, sp.parts) if sp.parts > 1 else 0
    j = make_binop("+", make_binop("*", part, sp.chunk), i)
    pos = make_binop("+", make_binop("*", slot, stride(sp)), i)  # slot = line * parts + part
    active = make_cmp("<", line, sp.lines) if sp.lines * sp.parts < rounds * ctx.threads else True
    in_line = make_cmp("<", j, sp.n) if sp.parts * sp.chunk > sp.n else True
    src, src_at = read_at(line, j, pos)
    dst, dst_at = write_at(line, j, pos)

    def over_chunk(step) -> list:
        kind = "unroll" if sp.chunk <= UNROLLED_CHUNK else "serial"
        loop = For(i, 0, sp.chunk, 1, kind, tuple(guarded(ctx, in_line, step)), span=s.span)
        return guarded(ctx, active, [loop])

    local = over_chunk([set_reg(0, make_binop("+", reg(0), make_cast(Load(src, (src_at,), src.dtype), acc_dt))),
                        Store(dst, (dst_at,), make_cast(reg(0), dst.dtype), s.span)])
    if sp.parts == 1:  # the line's sums
        body = [set_reg(0, zero)] + local
        return [Declare(regs, span=s.span), For(r, 0, rounds, 1, "serial", tuple(body), span=s.span)] \
            if rounds > 1 else [Declare(regs, span=s.span)] + body
    out = [Declare(regs, span=s.span), set_reg(0, zero), set_reg(1, zero)]
    out += local  # pass 1: the chunk's own prefix sums; its total stays in the running sum
    mask = 1
    while mask < min(sp.parts, 32):  # exclusive butterfly over the parts of a warp
        out += [set_reg(2, Call("shfl_xor", (reg(0), Const(mask, DType("int32")), Const(32, DType("int32"))),
                                acc_dt)),
                set_reg(1, make_select(make_cmp("!=", make_binop("&", THREAD, mask), 0),
                                       make_binop("+", reg(2), reg(1)), reg(1))),
                set_reg(0, make_binop("+", reg(0), reg(2)))]
        mask *= 2
    if sp.parts > 32:  # the totals of the warps before this one in the line, through the scratch
        ws = ctx.scratch(acc_dt)
        warp = make_binop("//", THREAD, 32)
        out += guarded(ctx, and_(active, make_cmp("==", LANE, 0)),
                       [Store(ws, (make_binop("+", totals_base, warp),), reg(0), s.span)])
        out.append(Barrier())
        w = ctx.var("w")
        ctx.ranges[w] = (0, sp.warps - 1)
        first = make_binop("*", line, sp.warps)
        add = set_reg(2, make_binop("+", reg(2), Load(ws, (make_binop("+", totals_base, make_binop("+", first, w)),),
                                                      acc_dt)))
        out.append(set_reg(2, zero))
        out += guarded(ctx, active, [For(w, 0, sp.warps, 1, "serial", tuple(guarded(
            ctx, make_cmp("<", w, make_binop("-", warp, first)), [add])), span=s.span)])
        out.append(set_reg(1, make_binop("+", reg(2), reg(1))))
        if not totals_base:  # in place: the scratch is free for the next op (else the caller's barriers see to it)
            out.append(Barrier())
    kept = Load(dst, (dst_at,), dst.dtype)  # the dtype of the sums here (dst holds them exactly when in place)
    return out + over_chunk([Store(dst, (dst_at,), make_binop("+", reg(1), kept), s.span)])  # pass 2


__all__ = ["in_place", "lower_cumsum", "scratch_bytes", "stride"]
