"""IR verification between passes (debug mode of ``compiler.passes``): what each pass promises, checked.

In: a ``passes.Unit`` and the name of the pass that just ran. Out: nothing, or an ``InternalCompilerError`` naming
the pass and the broken rule (a compiler bug, never the user's).
Checks, once the unit has them:

- kernel plans: staged buffers are shared tiles; shared offsets are 16-byte aligned and inside the arena; buffers
  whose live ranges overlap (top-level statements) never overlap in memory; the scratch area overlaps no buffer.
- thread IR (``compiler.tir`` rules): no tile-IR statement is left (tile ops, T.Parallel, allocations, software
  pipelines); every buffer is one-dimensional and every access has one index; global buffers are kernel parameters,
  shared buffers (also those a wgmma's descriptors address) have an offset, local buffers are declared before use;
  loops are serial or unrolled; no Barrier sits under a branch on the thread, lane or warp index.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import InternalCompilerError
from tileagent.compiler.ir.expr import Expr, Load
from tileagent.compiler.ir.simplify import depends_on
from tileagent.compiler.ir.stmt import (Alloc, AtomicAdd, AtomicAddTile, Copy, Fill, For, Gemm, If, Let, Parallel,
                                        Reduce, Store, While)
from tileagent.compiler.tir import (LANE, THREAD, WARP, AsyncCopy, Barrier, BulkStore, Declare, GlobalAt, LdMatrix, Mma,
                                    PackPairs, VecAtomicAdd, VecCopy, Wgmma, WgmmaRS)

_TILE_LEVEL = (Alloc, Copy, Fill, Gemm, Reduce, AtomicAddTile, Parallel)


def verify_unit(unit, after: str) -> None:
    """Check every rule that holds once pass ``after`` has run (see the module docstring)."""
    problems = []
    for plan in unit.kernels:
        if plan.shared is not None:
            problems += [f"kernel {plan.name}: {p}" for p in _shared_plan(plan)]
    if unit.module is not None:
        for k in unit.module.kernels:
            problems += [f"kernel {k.name}: {p}" for p in _thread_ir(k)]
    if problems:
        raise InternalCompilerError(f"IR verification after pass {after} failed: {problems[0]}"
                                    + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                                    unit.func.span)


def _shared_plan(plan) -> list:
    from tileagent.compiler.lower.smem import buffers_used

    out, sp = [], plan.shared
    for b in plan.stages:
        if b.scope != "shared":
            out.append(f"staged buffer {b.name} is {b.scope}, not shared")
    body = plan.body or ()
    live = {}
    for n, s in enumerate(body):
        for b in buffers_used(s):
            if b in sp.offsets:
                first, _ = live.get(b, (n, n))
                live[b] = (first, n)
    spans = {}
    for b, off in sp.offsets.items():
        size = sp.elements[b] * b.dtype.bytes
        spans[b] = (off, off + size)
        if off % 16:
            out.append(f"shared buffer {b.name} at byte {off} is not 16-byte aligned")
        if off + size > sp.total_bytes:
            out.append(f"shared buffer {b.name} ends at byte {off + size}, past the arena's {sp.total_bytes}")
        if plan.scratch_bytes and off + size > sp.scratch_offset:
            out.append(f"shared buffer {b.name} overlaps the scratch area at byte {sp.scratch_offset}")
    names = list(spans)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (a0, a1), (b0, b1) = spans[a], spans[b]
            la, lb = live.get(a), live.get(b)
            in_time = la is None or lb is None or not (la[1] < lb[0] or lb[1] < la[0])
            if in_time and a0 < b1 and b0 < a1:
                out.append(f"shared buffers {a.name} and {b.name} are live together and overlap in memory")
    return out


def _thread_ir(k) -> list:
    out = []
    params = {p for p in k.params if hasattr(p, "scope")}
    declared: set = set()

    def buffer_ok(buf, where):
        if len(buf.shape) != 1:
            out.append(f"{where}: buffer {buf.name} has shape {tuple(buf.shape)}, not one dimension")
        if buf.scope == "global" and buf not in params:
            out.append(f"{where}: global buffer {buf.name} is not a kernel parameter")
        elif buf.scope == "shared" and buf not in k.shared_offsets:
            out.append(f"{where}: shared buffer {buf.name} has no offset in the arena")
        elif buf.scope == "local" and buf not in declared:
            out.append(f"{where}: local buffer {buf.name} is used before its Declare")
        elif buf.scope not in ("global", "shared", "local"):
            out.append(f"{where}: buffer {buf.name} is in scope {buf.scope!r}")

    def exprs(e, where):
        if isinstance(e, Load):
            buffer_ok(e.buffer, where)
            if len(e.indices) != 1:
                out.append(f"{where}: a load of {e.buffer.name} has {len(e.indices)} indices")
        if isinstance(e, Expr):
            for name in getattr(e, "__slots__", ()):
                child = getattr(e, name, None)
                for c in child if isinstance(child, tuple) else (child,):
                    if isinstance(c, Expr):
                        exprs(c, where)

    def body(stmts, divergent: bool):
        for s in stmts:
            where = type(s).__name__
            if isinstance(s, _TILE_LEVEL) or type(s).__name__ == "SoftwarePipeline":
                out.append(f"a tile-level {where} is left in the thread IR")
                continue
            if isinstance(s, Declare):
                declared.add(s.buffer)
                buffer_ok(s.buffer, where)
            elif isinstance(s, GlobalAt):  # T.make_tensor: a global buffer from here on
                params.add(s.buffer)
                exprs(s.address, where)
            elif isinstance(s, (Store, AtomicAdd)):
                buffer_ok(s.buffer, where)
                if len(s.indices) != 1:
                    out.append(f"{where}: {s.buffer.name} is accessed with {len(s.indices)} indices")
                for e in tuple(s.indices) + (s.value,):
                    exprs(e, where)
            elif isinstance(s, (VecCopy, VecAtomicAdd, AsyncCopy, LdMatrix, BulkStore)):
                for buf in (s.dst, s.src):
                    buffer_ok(buf, where)
            elif isinstance(s, PackPairs):
                buffer_ok(s.dst, where)
                buffer_ok(s.src, where)
            elif isinstance(s, (Mma, Wgmma, WgmmaRS)):  # wgmma: the shared tiles its descriptors address too
                for buf in (s.a_buf, s.b_buf, s.c_buf):
                    buffer_ok(buf, where)
            elif isinstance(s, Let):
                exprs(s.value, where)
            elif isinstance(s, Barrier) and divergent:
                out.append("a Barrier sits under a branch on the thread index")
            elif isinstance(s, For):
                if s.kind not in ("serial", "unroll"):
                    out.append(f"a loop of kind {s.kind!r} is left in the thread IR")
                body(s.body, divergent)
            elif isinstance(s, While):
                exprs(s.cond, where)
                body(s.body, divergent or depends_on(s.cond, [THREAD, LANE, WARP]))
            elif isinstance(s, If):
                exprs(s.cond, where)
                on_thread = divergent or depends_on(s.cond, [THREAD, LANE, WARP])
                body(s.then_body, on_thread)
                body(s.else_body, on_thread)

    body(k.body, False)
    return out


__all__ = ["verify_unit"]
