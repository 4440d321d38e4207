"""Registry entries for the element moves of ``T.copy`` (``cp.async``, vectorized ld/st, scalar ld/st) and of a tile
``T.atomic_add`` (vector atomicAdd, atomicAdd).

``compiler.lower.copy`` walks a copy's tile in runs of ``width`` consecutive elements per thread (the widest run
both sides hold contiguously and aligned, at most 16 bytes) and asks ``compiler.instructions.select_copy`` how to
move one run. In: the source and destination Regions, the run width, whether the statement is a software pipeline's
producer (``async_ok``: ``compiler.lower.pipeline`` sets it; cp.async lands only at the pipeline's wait) and the target.
Out: the entry; its ``build`` gives the run's statements (global reads outside the tensor give zeros).
Emits: ``AsyncCopy``/``AsyncCommit``/``AsyncWait`` (cp.async) or ``VecCopy`` (one vector access of 4, 8 or 16 bytes,
or a scalar move). A ``VecCopy`` reading global memory carries the copy's ``eviction_policy`` (a cache hint); one
reading shared memory or registers, and cp.async, carry none.
"""

from __future__ import annotations

from dataclasses import dataclass

from tileagent.compiler.instructions.base import Instruction, has_feature


@dataclass(frozen=True)
class Run:
    """One run of a copy: ``width`` elements from tile index ``s_idx`` of the source to ``d_idx`` of the destination,
    at flat positions ``s_pos`` / ``d_pos`` (a register slot for fragments); ``s_in`` / ``d_in`` are the in-bounds
    conditions of global sides (True when proven), ``valid`` the padding/replica condition of the thread map."""

    width: int
    s_idx: tuple
    d_idx: tuple
    s_pos: object
    d_pos: object
    s_in: object
    d_in: object
    valid: object


class CpAsync(Instruction):
    name = "cp.async"
    op = "copy"

    def reason(self, src, dst, width: int, async_ok: bool, target) -> str | None:
        if not async_ok:
            return "only in a software pipeline's producers"
        if not has_feature(target, "cp_async"):
            return f"the target {getattr(target, 'name', target)} has no cp.async"
        if src.buffer.scope != "global" or dst.buffer.scope != "shared":
            return "moves global memory into shared memory only"
        if src.buffer.dtype != dst.buffer.dtype:
            return "cannot convert dtypes"
        if width * src.buffer.dtype.bytes not in (4, 8, 16):
            return "moves 4, 8 or 16 bytes"
        return None

    def cost(self, width: int) -> float:
        return 0.0

    def describe(self, src, width: int) -> str:
        return f"cp.async {width * src.buffer.dtype.bytes}B"

    def build(self, ctx, s, src, dst, run) -> list:
        from tileagent.compiler.ir.expr import as_expr
        from tileagent.compiler.lower.copy import guarded
        from tileagent.compiler.tir import AsyncCopy

        copy = AsyncCopy(ctx.mem(dst.buffer), as_expr(run.d_pos), ctx.mem(src.buffer), as_expr(run.s_pos), run.width,
                         None if run.s_in is True else as_expr(run.s_in), s.span)
        return guarded(ctx, run.valid, [copy])

    def cuda_emitters(self) -> dict:
        from tileagent.compiler.targets.cuda_tensor import emit_async_commit, emit_async_copy, emit_async_wait
        from tileagent.compiler.tir import AsyncCommit, AsyncCopy, AsyncWait

        return {AsyncCopy: emit_async_copy, AsyncCommit: emit_async_commit, AsyncWait: emit_async_wait}

    def emulators(self) -> dict:
        from tileagent.compiler.emulate_tensor import HANDLERS
        from tileagent.compiler.tir import AsyncCommit, AsyncCopy, AsyncWait

        return {k: HANDLERS[k] for k in (AsyncCopy, AsyncCommit, AsyncWait)}


class LoadStore(Instruction):
    """Plain loads and stores (``VecCopy``), ``width`` elements at a time: vectorized when width > 1."""

    op = "copy"

    def __init__(self, vector: bool):
        self.vector = vector
        self.name = "vectorized ld/st" if vector else "scalar ld/st"

    def reason(self, src, dst, width: int, async_ok: bool, target) -> str | None:
        if self.vector and width == 1:
            return "needs runs of more than one element, contiguous and aligned on both sides"
        if not self.vector and width != 1:
            return "moves one element at a time"
        return None

    def cost(self, width: int) -> float:
        return 1.0 if self.vector else 2.0

    def describe(self, src, width: int) -> str:
        return f"vectorized ld/st x{width}" if self.vector else "scalar ld/st"

    def build(self, ctx, s, src, dst, run) -> list:
        from tileagent.compiler.ir.expr import Const, as_expr, make_binop
        from tileagent.compiler.ir.stmt import Store
        from tileagent.compiler.lower.context import and_
        from tileagent.compiler.lower.copy import guarded
        from tileagent.compiler.tir import VecCopy

        hint = getattr(s, "eviction_policy", None) if src.buffer.scope == "global" else None  # loads only
        move = VecCopy(ctx.mem(dst.buffer), as_expr(run.d_pos), ctx.mem(src.buffer), as_expr(run.s_pos), run.width,
                       s.span, hint)
        if run.s_in is True:
            return guarded(ctx, and_(run.valid, run.d_in), [move])
        zero = Const(0.0 if dst.buffer.dtype.is_float else 0, dst.buffer.dtype)
        zeros = [Store(ctx.mem(dst.buffer), (as_expr(make_binop("+", run.d_pos, v)),), zero, s.span)
                 for v in range(run.width)]
        return guarded(ctx, and_(run.valid, and_(run.s_in, run.d_in)), [move],
                       guarded(ctx, and_(run.valid, run.d_in), zeros))


class AtomicAdd(Instruction):
    """Atomic adds of a tile ``T.atomic_add``, ``width`` elements at a time: one vector ``atomicAdd`` (``VecAtomicAdd``:
    4 x float32 or 2 x float16/bfloat16 into global memory, aligned) or one scalar ``atomicAdd`` per element. The
    scalar entry also lowers tile ``T.atomic_max`` / ``T.atomic_min`` (the tile's ``op``; runs of one element)."""

    op = "atomic_add"

    def __init__(self, vector: bool):
        self.vector = vector
        self.name = "vector atomicAdd" if vector else "atomicAdd"

    def reason(self, src, dst, width: int, async_ok: bool, target) -> str | None:
        if not self.vector:
            return None if width == 1 else "adds one element at a time"
        if width == 1:
            return "needs runs of more than one element, contiguous and aligned on both sides"
        if dst.buffer.scope != "global" or width not in VECTOR_ATOMIC_WIDTHS.get(str(dst.buffer.dtype), ()):
            return "adds 2 or 4 float32, or 2 float16/bfloat16, into global memory"
        return None

    def cost(self, width: int) -> float:
        return 1.0 if self.vector else 2.0

    def describe(self, src, width: int) -> str:
        return f"vector atomicAdd x{width}" if self.vector else "atomicAdd"

    def build(self, ctx, s, src, dst, run) -> list:
        from tileagent.compiler.ir.expr import Load, as_expr, make_cast
        from tileagent.compiler.ir.stmt import AtomicAdd as AtomicAddStmt
        from tileagent.compiler.lower.context import and_
        from tileagent.compiler.lower.copy import guarded
        from tileagent.compiler.tir import VecAtomicAdd

        guard = and_(run.valid, and_(run.s_in, run.d_in))
        if self.vector:
            add = VecAtomicAdd(ctx.mem(dst.buffer), as_expr(run.d_pos), ctx.mem(src.buffer), as_expr(run.s_pos),
                               run.width, s.span)
            return guarded(ctx, guard, [add])
        value = Load(ctx.mem(src.buffer), (as_expr(run.s_pos),), src.buffer.dtype) if src.buffer.scope == "fragment" \
            else ctx.element(src.buffer, run.s_idx)
        body = [AtomicAddStmt(ctx.mem(dst.buffer), (as_expr(run.d_pos),), make_cast(value, dst.buffer.dtype), s.span,
                              getattr(s, "op", "add"))]
        return guarded(ctx, guard, body)


VECTOR_ATOMIC_WIDTHS = {"float32": (2, 4), "float16": (2,), "bfloat16": (2,)}
