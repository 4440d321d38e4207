"""``T.cumsum(src, dst=None, dim=0, reverse=False)``: inclusive prefix sums of a tile along ``dim`` (TileLang's op).

``dst`` defaults to ``src`` (in place); with ``reverse=True`` the sums run from the end of ``dim`` (suffix sums).
Both operands are whole buffers of one shape, both fragments or both shared tiles; sums accumulate in float32
(float64 for float64, the buffer's own dtype for integers) and each result is rounded once to dst's dtype.

Check: scopes, shapes, ``dim`` in range, numeric dtypes. Effects: reads src, writes dst.
Layouts (free): cumsum puts no constraint on fragment layouts; an unassigned one takes the blocked default.
Lowering: one thread per line along ``dim`` (``lines`` = product of the other extents; threads loop when there are
more lines than threads) adds the line up sequentially. Shared tiles are scanned in place; fragments go through the
shared scratch: every thread stores the elements it holds (replica 0 only) row-major in the accumulation dtype,
barrier, scan, barrier, every holder reads its elements back, barrier (the scratch is free for the next op).
Interpreter: the same sequential sums, vectorized over the other dims, so the two agree bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tileagent.compiler.diagnostics import DSLTypeError, ScopeError, ShapeError, Span
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Const, Load, as_expr, describe as describe_value, make_binop, make_cast, make_cmp
from tileagent.compiler.ir.stmt import Buffer, For, Stmt, Store
from tileagent.compiler.tileops.base import Effects, TileOp


@dataclass(frozen=True, eq=False, slots=True)
class CumSum(Stmt):
    """T.cumsum: dst[..., i, ...] = sum of src[..., j, ...] for j <= i along ``dim`` (j >= i when ``reverse``)."""

    src: Buffer
    dst: Buffer
    dim: int
    reverse: bool
    span: Span | None = None


def cumsum(src, dst=None, dim=0, reverse=False):
    """Inclusive prefix sums of ``src`` along ``dim`` into ``dst`` (``src`` itself when omitted)."""
    dst = src if dst is None else dst
    for x, arg in ((src, "src"), (dst, "dst")):
        if not isinstance(x, Buffer):
            raise DSLTypeError(f"T.cumsum: {arg} must be a whole buffer, got {describe_value(x)}", code="E309",
                               hint="pass the tile itself: T.cumsum(A_shared, dim=1)")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise DSLTypeError(f"T.cumsum: dim must be a compile-time int, got {dim!r}", code="E404")
    return CumSum(src, dst, dim, bool(reverse))


BUILTINS = {"cumsum": cumsum}


def accumulation_dtype(dtype: DType) -> DType:
    """float64 for float64, float32 for other floats, the dtype itself for integers."""
    if dtype == "float64":
        return DType("float64")
    return DType("float32") if dtype.is_float else dtype


class CumSumOp(TileOp):
    node = CumSum
    layout_level = "free"

    def name(self, s) -> str:
        return "T.cumsum"

    def dsl(self, s) -> str:
        dst = "" if s.dst is s.src else f", {s.dst.name}"
        return f"T.cumsum({s.src.name}{dst}, dim={s.dim}{', reverse=True' if s.reverse else ''})"

    def check(self, s, checker) -> None:
        for buf, arg in ((s.src, "src"), (s.dst, "dst")):
            if buf.scope not in ("fragment", "shared"):
                raise ScopeError(f"T.cumsum {arg} '{buf.name}' is in {buf.scope} memory; cumsum works on fragments "
                                 f"or shared tiles", code="E501", hint="T.copy the tile into a fragment or shared tile")
            if buf.dtype.is_bool:
                raise DSLTypeError(f"T.cumsum {arg} '{buf.name}' has dtype bool; it must be numeric", code="E302")
        if s.src.scope != s.dst.scope:
            raise ScopeError(f"T.cumsum from {s.src.scope} '{s.src.name}' into {s.dst.scope} '{s.dst.name}': both "
                             f"must be fragments or both shared tiles", code="E501",
                             hint="T.copy the result into the other scope afterwards")
        if tuple(s.src.shape) != tuple(s.dst.shape):
            raise ShapeError(f"T.cumsum: dst '{s.dst.name}' has shape {tuple(s.dst.shape)}, src '{s.src.name}' "
                             f"{tuple(s.src.shape)}; they must be equal", code="E402")
        if not -s.src.ndim <= s.dim < s.src.ndim:
            raise ShapeError(f"T.cumsum: dim {s.dim} is out of range for the {s.src.ndim}-d buffer '{s.src.name}'",
                             code="E404")

    def effects(self, s) -> Effects:
        return Effects.of(reads=(s.src,), writes=(s.dst,))

    def free_tiles(self, s) -> list:
        return [(b, None) for b in (s.src, s.dst) if b.scope == "fragment"]

    def scratch_bytes(self, s, layouts, threads: int) -> int:
        if s.src.scope != "fragment":
            return 0
        return math.prod(s.src.shape) * accumulation_dtype(s.dst.dtype).bytes

    def lower(self, s, ctx) -> list:
        from tileagent.compiler.lower.copy import guarded, valid_condition
        from tileagent.compiler.lower.slots import SlotLoops
        from tileagent.compiler.tir import THREAD, Barrier, Declare

        acc_dt = accumulation_dtype(s.dst.dtype)
        ctx.note_instruction(s, "sequential scan per line" + (" in the shared scratch" if s.src.scope == "fragment"
                                                              else ""))
        acc = ctx.scratch_registers(f"cs_{s.dst.name}", 1, acc_dt)
        out = [Declare(acc, span=s.span)]
        if s.src.scope == "shared":
            def at(buf, idx):
                return ctx.mem(buf), as_expr(ctx.offset(buf, idx))
            return out + _scan(ctx, s, lambda idx: at(s.src, idx), lambda idx: at(s.dst, idx), acc)
        ws = ctx.scratch(acc_dt)
        row_major = Buffer(s.src.name, s.src.shape, acc_dt, "global")  # offsets of the scratch, row-major

        def scratch_at(idx):
            return ws, as_expr(ctx.offset(row_major, idx))

        for buf, write in ((s.src, True), (s.dst, False)):
            layout = ctx.frag(buf)
            loops = SlotLoops(ctx, layout)
            idx = loops.index(THREAD)
            _, pos = scratch_at(idx)
            reg = (as_expr(loops.slot()),)
            move = Store(ws, (pos,), make_cast(Load(ctx.mem(buf), reg, buf.dtype), acc_dt), s.span) if write else \
                Store(ctx.mem(buf), reg, make_cast(Load(ws, (pos,), acc_dt), buf.dtype), s.span)
            out += loops.nest(guarded(ctx, valid_condition(ctx, layout, idx, write=write), [move]))
            out.append(Barrier())
            if write:
                out += _scan(ctx, s, scratch_at, scratch_at, acc)
                out.append(Barrier())
        return out

    def interpret(self, s, it, mask) -> None:
        acc_dt = accumulation_dtype(s.dst.dtype).torch
        dim = s.dim % s.src.ndim
        x = it.mem[s.src].to(acc_dt)
        out = torch.empty_like(x)
        running = torch.zeros_like(x.select(dim, 0))
        n = x.shape[dim]
        for i in (reversed(range(n)) if s.reverse else range(n)):
            running = running + x.select(dim, i)
            out.select(dim, i).copy_(running)
        it.mem[s.dst].copy_(out.to(it.mem[s.dst].dtype))


def _scan(ctx, s, read_at, write_at, acc) -> list:
    """Thread IR: each thread scans its lines along ``dim`` (lines are distributed round-robin over the threads),
    reading element ``idx`` where ``read_at(idx)`` says and writing the running sum where ``write_at(idx)`` says."""
    from tileagent.compiler.lower.copy import guarded
    from tileagent.compiler.tir import THREAD

    shape, dim = tuple(s.src.shape), s.dim % s.src.ndim
    n = shape[dim]
    others = [d for d in range(len(shape)) if d != dim]
    lines = math.prod(shape[d] for d in others)
    rounds = -(-lines // ctx.threads)
    r, i = ctx.var("r"), ctx.var("i")
    ctx.ranges[r], ctx.ranges[i] = (0, rounds - 1), (0, n - 1)
    line = make_binop("+", make_binop("*", r, ctx.threads), THREAD) if rounds > 1 else THREAD
    idx, rest = [None] * len(shape), line
    for d in reversed(others):  # the line's index in the other dims, last dim fastest
        idx[d] = make_binop("%", rest, shape[d])
        rest = make_binop("//", rest, shape[d])
    idx[dim] = make_binop("-", n - 1, i) if s.reverse else i
    idx = tuple(idx)
    src_buf, src_pos = read_at(idx)
    dst_buf, dst_pos = write_at(idx)
    total = Load(acc, (as_expr(0),), acc.dtype)
    step = (Store(acc, (as_expr(0),), make_binop("+", total, make_cast(Load(src_buf, (src_pos,), src_buf.dtype),
                                                                      acc.dtype)), s.span),
            Store(dst_buf, (dst_pos,), make_cast(total, dst_buf.dtype), s.span))
    zero = Const(0.0 if acc.dtype.is_float else 0, acc.dtype)
    body = [Store(acc, (as_expr(0),), zero, s.span), For(i, 0, n, 1, "serial", step, span=s.span)]
    if lines % ctx.threads:
        body = guarded(ctx, make_cmp("<", line, lines), body)
    return [For(r, 0, rounds, 1, "serial", tuple(body), span=s.span)] if rounds > 1 else body
