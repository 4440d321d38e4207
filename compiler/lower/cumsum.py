"""Lowering of ``T.cumsum``: a line split among several threads (chunk scans, a shuffle scan of the chunk totals),
or one thread per line.

In: a checked CumSum (both operands fragments or both shared tiles, one shape) and the lowering context (its
fragments' layouts inferred). Out: thread-IR statements.
How: ``tileops.cumsum.split`` fixes the summation order from the shape, ``dim`` and the block's thread count (its
docstring gives the order; the tile interpreter follows the same one). Shared tiles scanned one thread per line are
scanned in place (``_sequential_in_place``). Everything else goes through the shared scratch (``ctx.scratch``) in
the accumulation dtype, laid out by part: part ``k`` of line ``l`` at ``(l * parts + k) * stride``, its chunk's
elements in scan order (reversed for a suffix scan; ``stride``: the chunk rounded up to an odd number, so the
chunk scans of 4-byte elements have no bank conflicts); fragments are stored by their holders (replica 0), shared
tiles by all threads in row-major order; barrier; ``_scan_scratch``; barrier; the results are read back (rounded
into dst's dtype); barrier, so the scratch is free for the next op. ``_scan_scratch``, with several parts a line:
pass 1 scans each chunk in place from 0 (its total stays in a register), ``shfl_xor`` butterflies give each part
the exclusive sum of the parts before it within its warp (the warp totals of a line that spans several warps go
through the scratch after the line data), pass 2 adds that offset to each of the chunk's sums in place.
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
from tileagent.compiler.tileops.cumsum import Split, accumulation_dtype, split
from tileagent.compiler.tir import LANE, THREAD, Barrier, Declare

UNROLLED_CHUNK = 32  # chunk scans up to this long are unrolled (constant scratch offsets after the thread's base)


def _split(s, threads: int) -> Split:
    return split(s.src.shape, s.dim % s.src.ndim, threads)


def stride(sp: Split) -> int:
    """Scratch elements per part: its chunk, plus one when the chunk is even, so that the 32 parts a warp scans at
    once lie in distinct banks (chunks of 32 float32s side by side put every lane of a warp in one bank)."""
    return sp.chunk | 1


def _data_elements(sp: Split) -> int:
    return sp.lines * sp.parts * stride(sp)


def scratch_bytes(s, threads: int) -> int:
    """Shared scratch the lowering needs: none for a shared tile scanned one thread per line; else every part's
    ``stride`` elements in the accumulation dtype, plus one total per warp of each line when a line spans several
    warps."""
    sp, acc = _split(s, threads), accumulation_dtype(s.dst.dtype)
    if s.src.scope == "shared" and sp.parts == 1:
        return 0
    return (_data_elements(sp) + (sp.lines * sp.warps if sp.parts > 32 else 0)) * acc.bytes


def lower_cumsum(ctx, s) -> list:
    """Thread IR of ``s`` (the module docstring says how)."""
    acc_dt = accumulation_dtype(s.dst.dtype)
    sp = _split(s, ctx.threads)
    shape, dim = tuple(s.src.shape), s.dim % s.src.ndim
    if sp.parts == 1:
        how = "sequential scan per line" + ("" if s.src.scope == "shared" else " in the shared scratch")
    else:
        how = (f"chunk scans in the shared scratch: {sp.parts} threads a line, {sp.chunk} elements each, "
               f"{min(sp.parts, 32).bit_length() - 1} shfl.xor rounds" +
               (f", the {sp.warps} warp totals of a line through shared memory" if sp.parts > 32 else ""))
    ctx.note_instruction(s, how)
    if s.src.scope == "shared" and sp.parts == 1:
        return _sequential_in_place(ctx, s, sp, acc_dt)
    ws = ctx.scratch(acc_dt)
    others = [d for d in range(len(shape)) if d != dim]

    def position(idx):  # the scratch element of tile element idx: its part's chunk, in scan order
        line = 0
        for d in others:
            line = make_binop("+", make_binop("*", line, shape[d]), idx[d])
        j = make_binop("-", sp.n - 1, idx[dim]) if s.reverse else idx[dim]
        if stride(sp) > sp.chunk:  # (j // chunk) * (chunk + 1) + j % chunk
            j = make_binop("+", j, make_binop("//", j, sp.chunk))
        return make_binop("+", make_binop("*", line, sp.parts * stride(sp)), j)

    out = []
    if s.src.scope == "fragment":
        for buf, write in ((s.src, True), (s.dst, False)):
            layout = ctx.frag(buf)
            loops = SlotLoops(ctx, layout)
            idx = loops.index(THREAD)
            pos, reg = position(idx), (as_expr(loops.slot()),)
            move = Store(ws, (pos,), make_cast(Load(ctx.mem(buf), reg, buf.dtype), acc_dt), s.span) if write else \
                Store(ctx.mem(buf), reg, make_cast(Load(ws, (pos,), acc_dt), buf.dtype), s.span)
            out += loops.nest(guarded(ctx, valid_condition(ctx, layout, idx, write=write), [move]))
            out.append(Barrier())
            if write:
                out += _scan_scratch(ctx, s, sp, ws, acc_dt)
                out.append(Barrier())
        return out
    for buf, write in ((s.src, True), (s.dst, False)):
        def move(idx, buf=buf, write=write):
            mem, at = ctx.mem(buf), (as_expr(ctx.offset(buf, idx)),)
            if write:
                return Store(ws, (position(idx),), make_cast(Load(mem, at, buf.dtype), acc_dt), s.span)
            return Store(mem, at, make_cast(Load(ws, (position(idx),), acc_dt), buf.dtype), s.span)
        out += _over_tile(ctx, s, shape, move)
        out.append(Barrier())
        if write:
            out += _scan_scratch(ctx, s, sp, ws, acc_dt)
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


def _scan_scratch(ctx, s, sp: Split, ws, acc_dt) -> list:
    """Thread IR: the inclusive scan of every line in the scratch, in place, in ``split``'s order. With one part a
    line, lines go round-robin over the threads; with several, thread t is part t % parts of line t // parts."""
    regs = ctx.scratch_registers(f"cs_{s.dst.name}", 3, acc_dt)  # [running sum, exclusive offset, shuffled value]

    def reg(k):
        return Load(regs, (as_expr(k),), acc_dt)

    def set_reg(k, value):
        return Store(regs, (as_expr(k),), value, s.span)

    zero = Const(0.0 if acc_dt.is_float else 0, acc_dt)
    per_round = ctx.threads // sp.parts
    rounds = -(-sp.lines // per_round)
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

    def over_chunk(step) -> list:
        kind = "unroll" if sp.chunk <= UNROLLED_CHUNK else "serial"
        loop = For(i, 0, sp.chunk, 1, kind, tuple(guarded(ctx, in_line, step)), span=s.span)
        return guarded(ctx, active, [loop])

    x = Load(ws, (pos,), acc_dt)
    local = over_chunk([set_reg(0, make_binop("+", reg(0), x)), Store(ws, (pos,), reg(0), s.span)])
    if sp.parts == 1:  # the line's sums in place
        body = [set_reg(0, zero)] + local
        return [Declare(regs, span=s.span), For(r, 0, rounds, 1, "serial", tuple(body), span=s.span)] \
            if rounds > 1 else [Declare(regs, span=s.span)] + body
    out = [Declare(regs, span=s.span), set_reg(0, zero), set_reg(1, zero)]
    out += local  # pass 1: the chunk's own prefix sums in place; its total stays in the running sum
    mask = 1
    while mask < min(sp.parts, 32):  # exclusive butterfly over the parts of a warp
        out += [set_reg(2, Call("shfl_xor", (reg(0), Const(mask, DType("int32")), Const(32, DType("int32"))),
                                acc_dt)),
                set_reg(1, make_select(make_cmp("!=", make_binop("&", THREAD, mask), 0),
                                       make_binop("+", reg(2), reg(1)), reg(1))),
                set_reg(0, make_binop("+", reg(0), reg(2)))]
        mask *= 2
    if sp.parts > 32:  # the totals of the warps before this one in the line, through the scratch after the data
        base = _data_elements(sp)
        warp = make_binop("//", THREAD, 32)
        out += guarded(ctx, and_(active, make_cmp("==", LANE, 0)),
                       [Store(ws, (make_binop("+", base, warp),), reg(0), s.span)])
        out.append(Barrier())
        w = ctx.var("w")
        ctx.ranges[w] = (0, sp.warps - 1)
        first = make_binop("*", line, sp.warps)
        add = Store(regs, (as_expr(2),), make_binop("+", reg(2), Load(ws, (make_binop("+", base, make_binop(
            "+", first, w)),), acc_dt)), s.span)
        out += [set_reg(2, zero)]
        out += guarded(ctx, active, [For(w, 0, sp.warps, 1, "serial", tuple(guarded(
            ctx, make_cmp("<", w, make_binop("-", warp, first)), [add])), span=s.span)])
        out.append(set_reg(1, make_binop("+", reg(2), reg(1))))
    return out + over_chunk([Store(ws, (pos,), make_binop("+", reg(1), x), s.span)])  # pass 2: offset + own sums


def _sequential_in_place(ctx, s, sp: Split, acc_dt) -> list:
    """Thread IR: a shared tile scanned in place, each thread adding its lines (round-robin over the threads) from
    0 in order, the running sum rounded into dst's dtype at each element."""
    shape, dim = tuple(s.src.shape), s.dim % s.src.ndim
    n, others = sp.n, [d for d in range(len(shape)) if d != dim]
    acc = ctx.scratch_registers(f"cs_{s.dst.name}", 1, acc_dt)
    rounds = -(-sp.lines // ctx.threads)
    r, i = ctx.var("r"), ctx.var("i")
    ctx.ranges[r], ctx.ranges[i] = (0, rounds - 1), (0, n - 1)
    line = make_binop("+", make_binop("*", r, ctx.threads), THREAD) if rounds > 1 else THREAD
    idx, rest = [None] * len(shape), line
    for d in reversed(others):  # the line's index in the other dims, last dim fastest
        idx[d] = make_binop("%", rest, shape[d])
        rest = make_binop("//", rest, shape[d])
    idx[dim] = make_binop("-", n - 1, i) if s.reverse else i
    idx = tuple(idx)
    src_pos, dst_pos = as_expr(ctx.offset(s.src, idx)), as_expr(ctx.offset(s.dst, idx))
    total = Load(acc, (as_expr(0),), acc_dt)
    step = (Store(acc, (as_expr(0),), make_binop("+", total, make_cast(Load(ctx.mem(s.src), (src_pos,), s.src.dtype),
                                                                      acc_dt)), s.span),
            Store(ctx.mem(s.dst), (dst_pos,), make_cast(total, s.dst.dtype), s.span))
    zero = Const(0.0 if acc_dt.is_float else 0, acc_dt)
    body = [Store(acc, (as_expr(0),), zero, s.span), For(i, 0, n, 1, "serial", step, span=s.span)]
    if sp.lines % ctx.threads:
        body = guarded(ctx, make_cmp("<", line, sp.lines), body)
    out = [Declare(acc, span=s.span)]
    return out + ([For(r, 0, rounds, 1, "serial", tuple(body), span=s.span)] if rounds > 1 else body)


__all__ = ["lower_cumsum", "scratch_bytes", "stride"]
