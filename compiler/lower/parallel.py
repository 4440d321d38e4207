"""Lowering of ``T.Parallel`` nests and element statements (stores, let-bindings, ifs, scalar atomics).

In: a Parallel loop with its layout (a Fragment over the iteration space), or element statements at kernel level.
Out: thread-IR statements: the loop body once per register slot of the layout (unrolled), with the loop variables
replaced by the iteration index each thread owns for that slot.
Guarantees: padded iterations are skipped; replicas of an iteration (threads that run it redundantly because they
hold the same fragment elements) update their registers but only replica 0 writes memory; let-bound names are
unique per unrolled copy; element statements outside T.Parallel write memory from thread 0 only (they mean "once per
block", as in the CPU interpreter).
"""

from __future__ import annotations

import numpy as np

from compiler.diagnostics import TargetError
from compiler.ir.expr import Var, as_expr, make_binop, make_cast, make_cmp
from compiler.ir.stmt import AtomicAdd, If, Let, Parallel, Store
from compiler.lower.copy import and_, guarded, valid_condition
from compiler.tir import THREAD


def lower_parallel(ctx, loop: Parallel) -> list:
    layout = ctx.layouts.loops[loop]
    writer = _replica_only(ctx, layout)
    table = layout.index_table()
    live = np.arange(ctx.threads) < layout.threads_used
    out = []
    for k in range(layout.num_slots):
        c = layout.inverse(THREAD, k)
        subst = {v: c[d] for d, v in enumerate(loop.vars)}
        valid = live & (table[:, k, :] < np.array(layout.shape)).all(-1)
        ctx.numeric = ({v: table[:, k, d] for d, v in enumerate(loop.vars)}, valid)
        try:
            body = lower_elements(ctx, loop.body, subst, writer)
        finally:
            ctx.numeric = None
        out += guarded(ctx, valid_condition(ctx, layout, c, write=False), body)
    return out


def _replica_only(ctx, layout):
    cond = True
    for lv in layout.replicate:
        cond = and_(cond, make_cmp("==", make_binop("%", make_binop("//", THREAD, lv.stride), lv.size), 0))
    return cond


def lower_elements(ctx, stmts, subst: dict, writer) -> list:
    """Element statements with ``subst`` applied; ``writer`` is the condition under which memory may be written."""
    subst = dict(subst)
    out = []
    for s in stmts:
        if isinstance(s, Let):
            var = Var(ctx.fresh(s.var.name + "_"), s.var.dtype)
            out.append(Let(var, ctx.rewrite(s.value, subst), s.span))
            subst[s.var] = var
        elif isinstance(s, Store):
            idx = tuple(ctx.rewrite(i, subst) for i in s.indices)
            value = ctx.rewrite(s.value, subst)
            guard, store = ctx.store(s.buffer, idx, value, s.span, original=s.indices)
            if s.buffer.scope in ("global", "shared"):
                guard = and_(writer, guard)
            out += guarded(ctx, guard, [store])
        elif isinstance(s, AtomicAdd):
            idx = tuple(ctx.rewrite(i, subst) for i in s.indices)
            if s.buffer.scope not in ("global", "shared"):
                raise TargetError("T.atomic_add needs global or shared memory", s.span, code="E602")
            guard = and_(writer, ctx.in_bounds(s.buffer, idx) if s.buffer.scope == "global" else True)
            add = AtomicAdd(ctx.mem(s.buffer), (as_expr(ctx.offset(s.buffer, idx)),),
                            make_cast(ctx.rewrite(s.value, subst), s.buffer.dtype), s.span)
            out += guarded(ctx, guard, [add])
        elif isinstance(s, If):
            cond = ctx.rewrite(s.cond, subst)
            out.append(If(cond, tuple(lower_elements(ctx, s.then_body, subst, writer)),
                          tuple(lower_elements(ctx, s.else_body, subst, writer)), s.span))
        else:
            raise TargetError(f"{type(s).__name__} is not lowered inside T.Parallel", s.span, code="E602")
    return out


def kernel_level_writer():
    """Element statements outside T.Parallel write memory once per block: from thread 0."""
    return make_cmp("==", THREAD, 0)
