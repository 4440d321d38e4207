"""Row gathers: ``T.Parallel`` loops that fill a shared tile with rows of a global tensor picked by an index.

In: a ``T.Parallel`` loop of tile IR and the LowerContext. ``row_gather`` recognizes the form
``for i, ..., d in T.Parallel(...): S[i, ..., d] = G[e0, ..., d + c]``: one store (after element lets, taken in) into a
shared tile S, indexed by the loop's variables in order over S's whole shape, of a load of a global tensor G of the
same dtype, whose last index is the loop's last variable plus an offset free of the loop's variables and whose other
indices do not use the last variable (they may read global tensors: TileLang's sparse MLA gathers ``KV[b, Indices[b,
s, g, k * BI + i], g, d]``, a paged cache ``K[BT[b, s // BS], s % BS, d]``); also the load under a row condition that
does not use the last variable, zeros elsewhere: ``T.if_then_else(cond, G[...], 0)``, or ``if cond: S[...] = G[...]
else: S[...] = 0`` (TileLang's varlen attention backward fills its K and V tiles so). ``lower_gather`` moves each
thread's runs of the last dim as one access of up to 16 bytes: one in-bounds test and one read of the index per run,
not per element; in a software pipeline's producers (``ctx.async_copies``) a run of 4, 8 or 16 bytes is one
``cp.async`` (``compiler.lower.pipeline`` issues such loops iterations ahead).
Out: thread-IR statements.
Why: the element loop read the row 2 bytes at a time, each element behind its own test of the gathered index, and
such a loop was never a pipeline producer: TileLang's sparse MLA and NSA kernels loaded their K/V rows synchronously
at the top of every iteration.
Switch: ``TILEAGENT_ROW_GATHER=0`` lowers such loops element by element again (an A/B of this module).
Guarantees: the same elements as the element loop: a run whose row lies outside G, or whose row condition is false,
reads nothing and writes zeros (the element loop's out-of-bounds reads gave 0); runs are contiguous and aligned on
both sides (G's last dim is static and a multiple of the width, the offset a known multiple of it, no run crosses a
swizzled 16-byte chunk).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from tileagent.compiler.ir.expr import BinOp, Cast, Const, Load, Select, Var
from tileagent.compiler.ir.simplify import depends_on, static_int
from tileagent.compiler.ir.stmt import Buffer, If, Let, Parallel, Region, Store
from tileagent.compiler.ir.visit import loads, substitute


@dataclass(frozen=True)
class RowGather:
    """A recognized gather loop: ``dst[vars] = src[src_indices]`` (``src_indices`` over ``loop.vars``)."""

    loop: Parallel
    dst: Buffer
    src: Buffer
    src_indices: tuple
    cond: object = True  # the row condition (over the loop's variables but the last): zeros where it is false

    @property
    def exprs(self) -> tuple:
        """The expressions a run's source and condition are computed from."""
        return self.src_indices + (() if self.cond is True else (self.cond,))

    @property
    def extents(self) -> tuple:
        return tuple(static_int(n) for n in self.loop.extents)


def enabled() -> bool:
    """Whether row gathers are lowered by this module (``TILEAGENT_ROW_GATHER`` is not 0)."""
    return os.environ.get("TILEAGENT_ROW_GATHER", "").strip() != "0"


def row_gather(loop) -> RowGather | None:
    """The loop as a RowGather, or None when it is not of the form the module docstring names (or not ``enabled``)."""
    if not enabled() or not isinstance(loop, Parallel) or not loop.body or \
            not all(isinstance(x, Let) for x in loop.body[:-1]):
        return None
    found = _conditional_store(_inlined(loop.body))
    if found is None:
        return None
    cond, store = found
    dst, value = store.buffer, _uncast(store.value)
    if dst.scope != "shared" or not isinstance(value, Load) or value.buffer.scope != "global" or \
            value.buffer.dtype != dst.dtype:
        return None
    extents = [static_int(n) for n in loop.extents]
    if None in extents or len(store.indices) != len(loop.vars) or \
            any(i is not v for i, v in zip(store.indices, loop.vars)) or \
            tuple(extents) != tuple(static_int(n) for n in dst.shape):
        return None
    last, indices, conds = loop.vars[-1], tuple(value.indices), () if cond is True else (cond,)
    if any(depends_on(e, [last]) for e in indices[:-1] + conds) or _offset(indices[-1], last) is None:
        return None
    if any(ld.buffer.scope != "global" for e in indices + conds for ld in loads(e)):
        return None  # an index read from registers or shared memory: each thread's own, not the run's
    return RowGather(loop, dst, value.buffer, indices, cond)


def _inlined(body: tuple):
    """The last statement of ``body`` with the names the ``Let`` statements before it bind replaced by their values
    (``s = bs * block_s + i`` then ``ks[i, d] = K[BT[b, s // BS], s % BS, d]``)."""
    bound = {}
    for x in body[:-1]:
        bound[x.var] = substitute(x.value, bound)
    return _substituted(body[-1], bound) if bound else body[-1]


def _substituted(s, bound: dict):
    if isinstance(s, Store):
        return replace(s, indices=substitute(tuple(s.indices), bound), value=substitute(s.value, bound))
    if isinstance(s, If):
        return replace(s, cond=substitute(s.cond, bound), then_body=tuple(_substituted(x, bound) for x in s.then_body),
                       else_body=tuple(_substituted(x, bound) for x in s.else_body))
    return s


def _conditional_store(s) -> tuple | None:
    """(cond, the Store of the load) when ``s`` stores a value where ``cond`` holds and zeros elsewhere (cond True:
    always), else None."""
    if isinstance(s, Store):
        value = _uncast(s.value)
        if isinstance(value, Select) and _zero(value.b):
            return value.cond, replace(s, value=value.a)
        return True, s
    if isinstance(s, If) and len(s.then_body) == len(s.else_body) == 1 and \
            all(isinstance(x, Store) for x in s.then_body + s.else_body):
        (a,), (b,) = s.then_body, s.else_body
        if b.buffer is a.buffer and len(a.indices) == len(b.indices) and \
                all(x is y for x, y in zip(a.indices, b.indices)) and _zero(b.value):
            return s.cond, a
    return None


def _uncast(e):
    """``e`` without casts that keep its dtype."""
    while isinstance(e, Cast) and e.value.dtype == e.dtype:
        e = e.value
    return e


def _zero(e) -> bool:
    e = e.value if isinstance(e, Cast) else e
    return isinstance(e, Const) and e.value == 0


def _offset(e, last: Var):
    """c when ``e`` is ``last + c`` (or ``c + last``, or ``last``: c = 0) with c free of ``last``, else None."""
    if e is last:
        return 0
    if isinstance(e, BinOp) and e.op == "+":
        for a, b in ((e.a, e.b), (e.b, e.a)):
            if a is last and not depends_on(b, [last]):
                return b
    return None


def lower_gather(ctx, g: RowGather, subst: dict | None = None) -> list:
    """Thread IR of ``g`` (``subst``: tile-IR values for variables outside the loop, such as a pipeline producer's
    iteration ahead)."""
    from tileagent.compiler.instructions import select_copy
    from tileagent.compiler.instructions.copy import Run
    from tileagent.compiler.layout import make_blocked
    from tileagent.compiler.lower.copy import _vector_ok, and_, valid_condition
    from tileagent.compiler.lower.slots import SlotLoops
    from tileagent.compiler.tir import THREAD

    loop, coords = g.loop, g.extents
    *indices, cond = substitute(g.src_indices + (g.cond,), subst or {})
    layout = make_blocked(coords, ctx.threads, max(1, 16 // g.dst.dtype.bytes))
    dst = Region.whole(g.dst)
    src = Region(g.src, (0,) * (g.src.ndim - 1) + (_offset(indices[-1], loop.vars[-1]),),
                 (1,) * (g.src.ndim - 1) + (coords[-1],))  # what _vector_ok asks of the source: its last dim
    width = layout.vector_width
    while width > 1 and not (_vector_ok(ctx, src, coords, width) and _vector_ok(ctx, dst, coords, width)):
        width //= 2
    instruction = select_copy(src, dst, width, ctx.async_copies, getattr(ctx, "target", None))
    ctx.note_instruction(loop, f"row gather: {instruction.describe(src, width)}")
    loops = SlotLoops(ctx, layout, vector=width)
    c = loops.index(THREAD)
    s_idx = tuple(ctx.rewrite(e, dict(zip(loop.vars, c))) for e in indices)
    inside = and_(ctx.rewrite(cond, dict(zip(loop.vars, c))), ctx.in_bounds(g.src, s_idx))
    run = Run(width, s_idx, tuple(c), ctx.offset(g.src, s_idx), ctx.offset(g.dst, tuple(c)), inside, True,
              valid_condition(ctx, layout, c, write=True))
    return loops.nest(instruction.build(ctx, loop, src, dst, run))
