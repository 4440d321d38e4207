"""Tile IR -> tile IR rewrites the GPU pipeline applies before layout inference.

In: a checked PrimFunc. Out: a PrimFunc computing the same, with every ``T.copy`` between two fragments that slices
either of them (``T.copy(lse_local[k, :], lse_split)`` in TileLang's split-KV decoding, ``k`` a T.serial variable)
replaced by the T.Parallel loop it means (``for i in T.Parallel(n): lse_split[i] = lse_local[k, i]``), which layout
inference maps to threads (a serially indexed dim stays in registers) and the lowering runs register to register.
Guarantees: statements that need no rewrite are kept as they are (the same objects); the loop has the copy's span and
the tile's extents (size-1 dims dropped, both sides paired in order, as ``T.copy`` pairs them); the value is cast to
the destination's dtype as the copy would. The CPU interpreter runs the original function.
"""

from __future__ import annotations

from dataclasses import replace

from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Load, Var, make_binop, make_cast
from tileagent.compiler.ir.stmt import Copy, Parallel, PrimFunc, Region, Store


def desugar(func: PrimFunc) -> PrimFunc:
    body = _stmts(func.body)
    return func if body is func.body else replace(func, body=body)


def _stmts(stmts: tuple) -> tuple:
    out = tuple(_stmt(s) for s in stmts)
    return stmts if all(a is b for a, b in zip(out, stmts)) else out


def _stmt(s):
    if isinstance(s, Copy) and s.src.buffer.scope == s.dst.buffer.scope == "fragment" and \
            not (_whole(s.src) and _whole(s.dst)):
        return _as_loop(s)
    changes = {}
    for name in ("body", "then_body", "else_body"):
        body = getattr(s, name, None)
        if isinstance(body, tuple):
            new = _stmts(body)
            if new is not body:
                changes[name] = new
    return replace(s, **changes) if changes else s


def _whole(r: Region) -> bool:
    return all(isinstance(x, int) and x == 0 for x in r.starts) and tuple(r.extents) == tuple(r.buffer.shape)


def _as_loop(s: Copy) -> Parallel:
    extents = s.dst.tile_shape()
    loop_vars = tuple(Var(f"{s.dst.buffer.name}_i{d}", DType("int32")) for d in range(len(extents)))
    value = make_cast(Load(s.src.buffer, _index(s.src, loop_vars), s.src.buffer.dtype, s.span), s.dst.buffer.dtype)
    store = Store(s.dst.buffer, _index(s.dst, loop_vars), value, s.span)
    return Parallel(loop_vars, tuple(extents), (store,), {}, s.span)


def _index(r: Region, loop_vars: tuple) -> tuple:
    along = list(loop_vars)
    return tuple(make_binop("+", start, along.pop(0)) if n != 1 else start for start, n in zip(r.starts, r.extents))
