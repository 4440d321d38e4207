"""Lowering of ``T.Parallel`` nests and element statements (stores, let-bindings, ifs, scalar atomics).

In: a Parallel loop with its layout (a Fragment over the iteration space), or element statements at kernel level.
Out: thread-IR statements: a row gather (``compiler.lower.gather``) by its runs; else the loop body once per register
slot of the layout (unrolled), with the loop variables replaced by the iteration index each thread owns for that
slot; element atomic adds of adjacent registers into adjacent global elements become vector atomics
(``compiler.lower.vector_atomics``).
Guarantees: padded iterations are skipped; replicas of an iteration (threads that run it redundantly because they
hold the same fragment elements) update their registers but only replica 0 writes memory; let-bound names are
unique per unrolled copy; element statements outside T.Parallel write memory from thread 0 only (they mean "once per
block", as in the CPU interpreter).
"""

from __future__ import annotations

import numpy as np

from tileagent.compiler.diagnostics import TargetError
from tileagent.compiler.ir.expr import Var, as_expr, make_binop, make_cast, make_cmp
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.visit import loads, stmt_exprs
from tileagent.compiler.ir.stmt import Assert, AtomicAdd, If, Let, Parallel, Store
from tileagent.compiler.lower.copy import and_, guarded, valid_condition
from tileagent.compiler.lower.gather import lower_gather, row_gather
from tileagent.compiler.layout.infer import divided_loop_var, loop_invariant, shifted_loop_var
from tileagent.compiler.lower.slots import SlotLoops
from tileagent.compiler.lower.vector_atomics import merge_vector_atomics
from tileagent.compiler.tir import THREAD


def lower_parallel(ctx, loop: Parallel) -> list:
    gather = row_gather(loop)
    if gather is not None:  # rows of a global tensor picked by an index: runs of up to 16 bytes
        return lower_gather(ctx, gather)
    layout = ctx.layouts.loops[loop]
    writer = _replica_only(ctx, layout)
    compact = _lower_as_loops(ctx, loop, layout, writer)
    return merge_vector_atomics(compact if compact is not None else _lower_unrolled(ctx, loop, layout, writer))


def _lower_as_loops(ctx, loop: Parallel, layout, writer) -> list | None:
    """The body once, inside unrolled loops over the layout's registers; None when some fragment's register is not
    a linear function of the loop variables (then the caller unrolls in Python)."""
    loops = SlotLoops(ctx, layout)
    table = layout.index_table()  # (threads, slots, dims)
    valid = layout.valid_table(ctx.threads)
    overrides = {}
    for buf, indices in _fragment_accesses(loop.body):
        found = _slots_of(ctx, buf, indices, loop, table, valid)
        if found is None:
            return None
        per_slot, extra = found
        expr = loops.fit(per_slot, valid.any(0))
        if expr is None:
            return None
        for i, stride in extra:  # loop-invariant indices along register-only dims: a runtime register offset
            expr = make_binop("+", expr, make_binop("*", ctx.rewrite(i, {}), stride))
        overrides[(buf, tuple(map(id, indices)))] = expr
    c = loops.index(THREAD)
    body = lower_elements(ctx.derive(slot_overrides=overrides), loop.body, {v: c[d] for d, v in enumerate(loop.vars)},
                          writer)
    return loops.nest(guarded(ctx, valid_condition(ctx, layout, c, write=False), body))


def _slots_of(ctx, buf, indices, loop: Parallel, table, valid):
    """For each register slot of the loop layout: the register of ``buf[indices]`` all running threads use, or -1
    where they disagree, and the (index, register stride) terms of loop-invariant indices (taken as 0 in the table);
    None when an index is none of a loop variable, a constant, or loop-invariant along a dim held in registers with
    registers linear in it."""
    idx, extra = [], []
    slot_table = ctx.frag(buf).tables()[1]
    for dim, i in enumerate(indices):
        if isinstance(i, Var) and any(i is v for v in loop.vars):
            d = next(d for d, v in enumerate(loop.vars) if v is i)
            idx.append(np.minimum(table[:, :, d], buf.shape[dim] - 1))  # indices >= 0: padding clipped
        elif static_int(i) is not None:
            idx.append(np.full(table.shape[:2], static_int(i)))
        elif divided_loop_var(loop, i) is not None:  # x[i, j // c] (inference made j's owners hold j // c)
            d, c = divided_loop_var(loop, i)
            idx.append(np.minimum(table[:, :, d] // c, buf.shape[dim] - 1))
        elif (shift := shifted_loop_var(loop, i)) is not None:  # x[i, jj * 4 + j]: block jj's registers
            d, n, o = shift
            stride = _register_stride(slot_table, dim, block=n)
            if stride is None:
                return None
            idx.append(np.minimum(table[:, :, d], n - 1))
            extra.append((make_binop("//", o, n), stride))
        elif loop_invariant(loop, i) and not ctx.spread(buf, dim):
            stride = _register_stride(slot_table, dim)
            if stride is None:
                return None
            idx.append(np.zeros(table.shape[:2], dtype=np.int64))
            extra.append((i, stride))
        else:
            return None
    slots = slot_table[tuple(idx)]  # (threads, slots)
    first = slots[valid.argmax(0), np.arange(slots.shape[1])]
    agree = ((slots == first) | ~valid).all(0)
    return np.where(agree, first, -1), extra


def _register_stride(slot_table: np.ndarray, dim: int, block: int = 1) -> int | None:
    """s when the register of element idx is register(idx with idx[dim] = idx[dim] % block) + idx[dim] // block * s
    everywhere, else None."""
    n = slot_table.shape[dim]
    if n == block:
        return 0
    shape = slot_table.shape[:dim] + (n // block, block) + slot_table.shape[dim + 1:]
    blocks = slot_table.reshape(shape)
    base = np.take(blocks, [0], axis=dim)
    stride = int(np.take(blocks, [1], axis=dim).flat[0] - base.flat[0])
    steps = np.arange(n // block).reshape([-1 if d == dim else 1 for d in range(blocks.ndim)])
    return stride if (blocks == base + steps * stride).all() else None


def _fragment_accesses(stmts):
    for s in stmts:
        if isinstance(s, (Store, AtomicAdd)) and s.buffer.scope == "fragment":
            yield s.buffer, s.indices
        for e in stmt_exprs(s):
            yield from ((ld.buffer, ld.indices) for ld in loads(e) if ld.buffer.scope == "fragment")
        yield from _fragment_accesses(getattr(s, "then_body", ()) + getattr(s, "else_body", ()))


def _lower_unrolled(ctx, loop: Parallel, layout, writer) -> list:
    table = layout.index_table()
    live = np.arange(ctx.threads) < layout.threads_used
    out = []
    for k in range(layout.num_slots):
        c = layout.inverse(THREAD, k)
        subst = {v: c[d] for d, v in enumerate(loop.vars)}
        valid = live & (table[:, k, :] < np.array(layout.shape)).all(-1)
        view = ctx.derive(numeric=({v: table[:, k, d] for d, v in enumerate(loop.vars)}, valid))
        body = lower_elements(view, loop.body, subst, writer)
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
                raise TargetError(f"T.atomic_{s.op} needs global or shared memory", s.span, code="E602")
            check_atomic_dtype(s.op, s.buffer, s.span)
            guard = and_(writer, ctx.in_bounds(s.buffer, idx) if s.buffer.scope == "global" else True)
            prev = ctx.rewrite(s.prev, subst) if s.prev is not None else None  # the thread's register (return_prev)
            add = AtomicAdd(ctx.mem(s.buffer), (as_expr(ctx.offset(s.buffer, idx)),),
                            make_cast(ctx.rewrite(s.value, subst), s.buffer.dtype), s.span, s.op, prev)
            out += guarded(ctx, guard, [add])
        elif isinstance(s, Assert):  # T.device_assert: each iteration's thread checks its own
            out.append(Assert(ctx.rewrite(s.cond, subst), s.message, s.span))
        elif isinstance(s, If):
            cond = ctx.rewrite(s.cond, subst)
            out.append(If(cond, tuple(lower_elements(ctx, s.then_body, subst, writer)),
                          tuple(lower_elements(ctx, s.else_body, subst, writer)), s.span))
        else:
            raise TargetError(f"{type(s).__name__} is not lowered inside T.Parallel", s.span, code="E602")
    return out


ATOMIC_EXTREME_DTYPES = ("int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64")


def check_atomic_dtype(op: str, buf, span) -> None:
    """E602 for a T.atomic_max / T.atomic_min into a dtype the CUDA backend has no atomic for."""
    if op != "add" and str(buf.dtype) not in ATOMIC_EXTREME_DTYPES:
        raise TargetError(f"T.atomic_{op} into {buf.dtype} buffer '{buf.name}' is not lowered for CUDA (it has "
                          f"atomics of 32- and 64-bit integers and 16/32/64-bit floats)", span, code="E602",
                          hint=f"keep '{buf.name}' in int32 or float32")


def kernel_level_writer():
    """Element statements outside T.Parallel write memory once per block: from thread 0."""
    return make_cmp("==", THREAD, 0)
