"""Lowering: checked tile IR + layouts -> thread IR (one DeviceKernel per T.Kernel scope).

In: a PrimFunc that passed ``check``, its ``LayoutMap`` and one ``KernelPlan`` per T.Kernel, built by the planning
passes of ``compiler.passes`` (software pipelines from ``pipeline``, barriers from ``barriers``, the shared-memory
arena from ``smem``, packed operands from ``gemm``). Out: a ``DeviceModule`` (see ``compiler.tir``).
``lower_module`` lowers each tile op by its own ``lower`` (``compiler.tileops``), T.Parallel nests by
``parallel`` and pipelines by ``pipeline``; sequential loops, uniform ifs and let-bindings pass through. Block indices are bound at the top,
through the rasterization of ``T.use_swizzle`` when present, else with the first counting down from the last block
when a loop's trip count grows with it (``heavy_first``: the heaviest blocks first, the lightest in the last wave).
Guarantees: the thread IR obeys every rule in ``compiler.tir``; an op this backend cannot lower raises TargetError
E602 at its span.
"""

from __future__ import annotations

import logging
import math

from tileagent.compiler.diagnostics import CompileError, InternalCompilerError, TargetError
from tileagent.compiler.ir.expr import Var, make_binop, make_call
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.ir.stmt import (Alloc, AnnotateLayout, Assert, AtomicAdd, Buffer, Evaluate, For, If,
                                        ImportSource, Kernel, Let, LoopExit, MBarrierOp, NamedBarrier, Parallel,
                                        PrimFunc, Print, RngInit, Store, UseSwizzle, While)
from tileagent.compiler.lower.context import LowerContext
from tileagent.compiler.lower.copy import merge_async_waits
from tileagent.compiler.lower.parallel import kernel_level_writer, lower_elements, lower_parallel
from tileagent.compiler.lower.pipeline import SoftwarePipeline, lower_pipeline
from tileagent.compiler.lower.reduce import fused_runs, lower_reduces, run_scratch_bytes
from tileagent.compiler.tileops import op_for
from tileagent.compiler.language.cp_async import SET_MAX_NREG
from tileagent.compiler.tir import (BLOCK_IDX, GRID_DIM, THREAD, AsyncProxyFence, Barrier, Declare, DeviceKernel,
                                    DeviceModule, GlobalAt, SetMaxNReg, WgmmaFence, indexes_registers_by)

log = logging.getLogger("tileagent.compiler")


def lower(func: PrimFunc, layouts=None, target=None) -> DeviceModule:
    """``func`` lowered for ``target`` (a Target or a name; default the ``sim`` target of ``DEFAULT_ARCH``): the
    passes of ``compiler.passes`` through ``lower_tile_ops``, with ``layouts`` when given."""
    from tileagent.compiler import passes
    from tileagent.compiler.target import DEFAULT_ARCH, resolve

    target = resolve(target if target is not None else f"sim:{DEFAULT_ARCH}")
    return passes.run(func, target, until="lower_tile_ops", layouts=layouts).module


def kernel_scratch_bytes(k: Kernel, layouts) -> int:
    """Bytes of shared scratch the tile ops of kernel ``k`` need at most (reductions across warps, conversions;
    reductions lowered together need their sum: ``compiler.lower.reduce.run_scratch_bytes``)."""
    scratch = [op_for(s).scratch_bytes(s, layouts, k.num_threads) for s in walk(k.body) if op_for(s) is not None]
    return max(scratch + [run_scratch_bytes(k.body, layouts, k.num_threads)], default=0)


def lower_module(func: PrimFunc, layouts, plans, target, warp_specialize: bool = True) -> DeviceModule:
    """The thread IR of ``func``: one DeviceKernel per KernelPlan (``compiler.passes``), global tensors flattened;
    ``warp_specialize`` False keeps every pipeline in the kernel's own threads (``lower.warp_specialize``)."""
    flat = {p: _flat(p) for p in func.params if isinstance(p, Buffer)}
    scalars = tuple(p for p in func.params if isinstance(p, Var)) + tuple(func.dynamic_vars)
    params = tuple(flat.values()) + scalars
    kernels = tuple(_lower_kernel(plan, layouts, flat, params, target, ws=warp_specialize) for plan in plans)
    return DeviceModule(func.name, kernels, flat, scalars)


def _flat(buf: Buffer) -> Buffer:
    """The 1-d global Buffer over all of global tensor ``buf``'s elements."""
    numel = 1
    for n in buf.shape:
        numel = make_binop("*", numel, n)
    return Buffer(buf.name, (numel,), buf.dtype, "global", buf.span)


def _lower_kernel(plan, layouts, flat, params, target, tma: bool = True, ws: bool = True) -> DeviceKernel:
    """One kernel's thread IR. With TMA usable (``instructions.tma.usable``) and ``tma``, global -> shared copies
    may use it; when its mbarriers do not fit the target's shared memory next to the planned arena (a pipeline
    planned to the last byte), the kernel is lowered again without TMA, and its instruction notes say why."""
    from tileagent.compiler.instructions.tma import usable as tma_usable
    from tileagent.compiler.lower.cluster import cluster_dims
    from tileagent.compiler.lower.tma import TmaState, capacity, finish_kernel
    from tileagent.compiler.lower.warp_groups import hand_barriers
    from tileagent.compiler.lower.warp_specialize import PRODUCER_THREADS, candidate, specialize, ws_barriers
    from tileagent.compiler.thread_ranges import hand_specialized

    k, shared = plan.kernel, plan.shared
    ctx = LowerContext(k, layouts, flat, k.num_threads, target=target, plan=plan)
    ctx.hand_specialized = hand_specialized(k) is not None
    ctx.made_tensors = frozenset(s.buffer for s in walk(plan.body)
                                 if isinstance(s, Alloc) and s.buffer.scope == "global")
    made = sorted(b.name for b in ctx.made_tensors)
    if made and tma_usable(target):
        ctx.instructions[(k.span.line if k.span else 0, "T.Kernel")] = [
            f"no TMA: {', '.join(made)} made from device addresses (T.make_tensor) have no tensor map, which the "
            "host encodes from the tensors it passes (cp.async instead)"]
    elif tma and tma_usable(target):
        ctx.ws = candidate(plan, target, disabled=not ws)
        hand = sum(len(b.counts) for b in hand_barriers(plan.body)) if ctx.hand_specialized else 0
        ctx.tma = TmaState(capacity(plan.body) + (ws_barriers(ctx.ws, k, layouts) if ctx.ws else 0) + hand)
    elif tma_usable(target):
        ctx.instructions[(k.span.line if k.span else 0, "T.Kernel")] = [
            "no TMA: its mbarriers do not fit in shared memory next to the planned tiles (cp.async instead)"]
    for var, extent in zip(k.block_vars, k.grid):
        n = static_int(extent)
        ctx.ranges[var] = (0, n - 1 if n is not None else 2**31 - 1)
    body = _Lowering(ctx).body(_barriers_before(plan.body, shared.reuse_points))
    threads, specialized = k.threads, False
    if ctx.ws is not None and ctx.ws.producer:  # the pipeline was lowered warp-specialized
        grid = [static_int(g) for g in k.grid]
        split = specialize(ctx.ws, ctx.lets, body, target, shared.total_bytes + 16 * ctx.tma.capacity, k.span,
                           math.prod(grid) if None not in grid else None)
        if split is None:
            log.info("kernel %s: a producer warpgroup would cost a block per SM; not warp-specialized", plan.name)
            return _lower_kernel(plan, layouts, flat, params, target, tma, ws=False)
        body, threads, specialized = [split], (k.threads[0] + PRODUCER_THREADS, 1, 1), True
        ctx.instructions.setdefault((k.span.line if k.span else 0, "T.Kernel"), []).append(
            f"warp-specialized: {k.threads[0]} consumer threads and a producer warpgroup of {PRODUCER_THREADS} "
            "(TMA loads)")
    stmts = _block_indices(k, plan.body, ctx) + _thread_indices(k, ctx) + body
    shared_bytes, offsets, maps = shared.total_bytes, ctx.shared_offsets(), ()
    if ctx.tma is not None:  # mbarriers after the arena's buffers, their init and the phase registers first
        placed = finish_kernel(ctx.tma, shared_bytes, offsets, shared.base_align,
                               getattr(target, "shared_bytes", 1 << 30))
        if placed is None:
            log.info("kernel %s: no room for TMA's mbarriers in shared memory; lowered without TMA", plan.name)
            return _lower_kernel(plan, layouts, flat, params, target, tma=False)
        prologue, shared_bytes, offsets = placed
        stmts = prologue + stmts
        maps = tuple(ctx.tma.maps.values())
    if k.merged > 1:
        ctx.instructions.setdefault((k.span.line if k.span else 0, "T.Kernel"), []).insert(
            0, f"{k.merged} blocks of the program along x merged into each block of {k.threads[0]} threads "
               "(compiler.lower.coarsen; TILEAGENT_COARSEN=0 keeps them apart)")
    cluster = cluster_dims(k, target, specialized and not ctx.ws.path)
    if cluster != (1, 1, 1):
        ctx.instructions.setdefault((k.span.line if k.span else 0, "T.Kernel"), []).append(
            f"clusters of {cluster[0] * cluster[1] * cluster[2]} blocks {cluster}")
    return DeviceKernel(plan.name, params, tuple(k.grid), threads, shared_bytes, offsets,
                        tuple(stmts), k.span,
                        _instructions(ctx.instructions), shared.base_align, maps, cluster,
                        dependent_launch=target.has("pdl"))


def _instructions(chosen: dict) -> tuple:
    """(what, instructions) per lowered tile op, in source order: ("T.copy at line 12", "cp.async 16B")."""
    return tuple((f"{op} at line {line or '?'}", ", ".join(how)) for (line, op), how in sorted(chosen.items()))


def _barriers_before(body: tuple, points) -> tuple:
    """``body`` with a Barrier before each top-level statement in ``points`` (it reuses shared bytes that earlier
    statements used) unless one is already there."""
    out = []
    for n, s in enumerate(body):
        if n in points and out and not isinstance(out[-1], Barrier):
            out.append(Barrier())
        out.append(s)
    return tuple(out)


def _block_indices(k: Kernel, body, ctx=None) -> list:
    """Let-bind the kernel's block variables to blockIdx, rasterized by T.use_swizzle when it asks; else, when the
    kernel's work grows with its first block index (``heavy_first``), that index counts down from the last block, so
    the heaviest blocks are issued first and the lightest fill the last wave (causal attention's row blocks)."""
    swizzle = next((s for s in walk(body) if isinstance(s, UseSwizzle) and s.enable), None)
    raw = [BLOCK_IDX[d] for d in range(len(k.block_vars))]
    if swizzle is None and heavy_first(k):
        raw[0] = make_binop("-", static_int(k.grid[0]) - 1, BLOCK_IDX[0])
        if ctx is not None:
            ctx.instructions.setdefault((k.span.line if k.span else 0, "T.Kernel"), []).append(
                f"blocks issued heaviest first: {k.block_vars[0].name} = {static_int(k.grid[0]) - 1} - blockIdx.x "
                "(a loop's trip count grows with it)")
    if swizzle is not None and len(raw) >= 2:
        gx, gy = GRID_DIM[0], GRID_DIM[1]
        lin = make_binop("+", BLOCK_IDX[0], make_binop("*", BLOCK_IDX[1], gx))
        p = swizzle.panel_size
        across, along = (gx, gy) if swizzle.order == "row" else (gy, gx)
        span = make_binop("*", p, across)
        panel, off = make_binop("//", lin, span), make_binop("%", lin, span)
        width = make_call("min", p, make_binop("-", along, make_binop("*", panel, p)))
        inner = make_binop("+", make_binop("*", panel, p), make_binop("%", off, width))
        outer = make_binop("//", off, width)
        raw[0], raw[1] = (outer, inner) if swizzle.order == "row" else (inner, outer)
    return [Let(v, r, k.span) for v, r in zip(k.block_vars, raw)]


def _thread_indices(k: Kernel, ctx) -> list:
    """Per-thread code (T.get_thread_binding): Let-bind threadIdx.x/y/z from the linear thread index (the launch's
    block is (x, y, z); ``tid`` = x + y * X + z * X * Y)."""
    if not k.thread_vars:
        return []
    tx, ty, tz = k.threads
    values = (make_binop("%", THREAD, tx), make_binop("%", make_binop("//", THREAD, tx), ty),
              make_binop("//", THREAD, tx * ty))
    for var, n in zip(k.thread_vars, k.threads):
        ctx.ranges[var] = (0, n - 1)
    return [Let(v, value, k.span) for v, value in zip(k.thread_vars, values)]


def heavy_first(k: Kernel) -> bool:
    """Whether a loop of kernel ``k`` runs more iterations the larger its first block index is (its extent, through
    the Lets before it, is non-decreasing in that index and depends on it: causal attention's
    ``n_blocks = T.min(S // bN, T.ceildiv((bx + 1) * bM, bN))``), with a static grid along it."""
    if not k.block_vars or static_int(k.grid[0]) is None or static_int(k.grid[0]) < 2:
        return False
    bx, lets = k.block_vars[0], {}
    for s in walk(k.body):
        if isinstance(s, Let):
            lets[s.var] = s.value
        elif isinstance(s, For) and _trend(s.extent, bx, lets) == 1:
            return True
    return False


def _trend(e, v, lets, depth: int = 0):
    """1 when ``e`` is non-decreasing in Var ``v`` and depends on it, -1 non-increasing, 0 independent of it, None
    unknown (``lets``: Var -> value of the kernel's Lets)."""
    from tileagent.compiler.ir.expr import BinOp, Call, Cast, Const

    if depth > 32:
        return None
    if isinstance(e, (int, float, Const)):
        return 0
    if isinstance(e, Var):
        return 1 if e is v else _trend(lets[e], v, lets, depth + 1) if e in lets else 0
    if isinstance(e, Cast):
        return _trend(e.value, v, lets, depth + 1)
    if isinstance(e, Call) and e.name in ("min", "max"):
        return _combine(*(_trend(a, v, lets, depth + 1) for a in e.args))
    if isinstance(e, BinOp):
        a, b = _trend(e.a, v, lets, depth + 1), _trend(e.b, v, lets, depth + 1)
        if e.op == "+":
            return _combine(a, b)
        if e.op == "-":
            return _combine(a, None if b is None else -b)
        if e.op in ("*", "//") and b == 0 and static_int(e.b) is not None and (static_int(e.b) > 0 or e.op == "*"):
            c = static_int(e.b)
            return None if a is None else a * (c > 0) - a * (c < 0)
        if e.op == "*" and a == 0 and static_int(e.a) is not None:
            c = static_int(e.a)
            return None if b is None else b * (c > 0) - b * (c < 0)
        return 0 if a == b == 0 else None
    return None


def _combine(*trends):
    out = 0
    for t in trends:
        if t is None:
            return None
        if t and out and t != out:
            return None
        out = out or t
    return out


class _Lowering:
    def __init__(self, ctx: LowerContext):
        self.ctx = ctx

    def with_context(self, ctx: LowerContext) -> "_Lowering":
        """The same lowering under another view of the context (``LowerContext.derive``)."""
        return _Lowering(ctx)

    def body(self, stmts) -> list:
        out = []
        for run in fused_runs(self.ctx, stmts):
            s = run[0]
            try:
                lowered = self.stmt(s) if len(run) == 1 else lower_reduces(self.ctx, run)
                if out and isinstance(out[-1], Barrier) and (
                        len(lowered) > 1 and isinstance(lowered[0], AsyncProxyFence) and isinstance(lowered[1], Barrier)
                        or lowered and isinstance(lowered[0], WgmmaFence) and lowered[0].sync):
                    out.pop()  # "barrier; fence; barrier" (a wgmma's own fence has both): the second orders it all
                out += lowered
            except CompileError as e:
                raise e.with_span(getattr(s, "span", None))
            except Exception as e:  # noqa: BLE001 -- nothing but CompileError escapes a compile
                raise InternalCompilerError(f"internal error while lowering {type(s).__name__}: "
                                            f"{type(e).__name__}: {e}", getattr(s, "span", None)) from e
        return merge_async_waits(out) if self.ctx.made_tensors else out

    def note_loop(self, var, start, extent, step) -> None:
        """Record the value range of a loop variable (for dropping bounds guards) when its bounds are static."""
        lo, n = static_int(start), static_int(extent)
        if lo is not None and n is not None and static_int(step) is not None:
            self.ctx.ranges[var] = (lo, lo + max(n - 1, 0) * static_int(step))

    def stmt(self, s) -> list:
        ctx = self.ctx
        if isinstance(s, Alloc):
            if s.buffer.scope == "shared":
                return []
            if s.buffer.scope == "global":  # T.make_tensor: a global tensor at a device address
                flat = ctx.flat_globals[s.buffer] = _flat(s.buffer)
                return [GlobalAt(flat, ctx.rewrite(s.init, {}), s.span)]
            if s.view_of is not None:  # T.reshape: the base's registers (its layout maps to the same slots)
                ctx.local[s.buffer] = ctx.local[s.view_of]
                return []
            reg = ctx.register_array(s.buffer)
            init = ctx.rewrite(s.init, {}) if s.init is not None else None
            return [Declare(reg, init, s.span)]
        op = op_for(s)
        if getattr(s, "barrier", None) is not None and ctx.hand_specialized:  # T.tma_copy(..., barrier=...)
            from tileagent.compiler.lower.warp_groups import lower_bound_copy

            bound = lower_bound_copy(ctx, s)
            if bound is not None:
                return bound
        if op is not None:  # a tile op lowers itself
            return op.lower(s, ctx)
        if isinstance(s, Parallel):
            return lower_parallel(ctx, s)
        if isinstance(s, SoftwarePipeline):
            return lower_pipeline(self, s)
        if isinstance(s, For):
            start, extent = ctx.rewrite(s.start, {}), ctx.rewrite(s.extent, {})
            self.note_loop(s.var, start, extent, s.step)
            body, count = tuple(self.body(s.body)), static_int(extent)
            # a register array indexed by the loop variable stays in registers only where the loop is unrolled
            unroll = s.kind == "unroll" or (count is not None and count * sum(1 for _ in walk(body)) <= 2048 and
                                            indexes_registers_by(body, s.var))
            return [For(s.var, start, extent, s.step, "unroll" if unroll else "serial", body, {}, s.span)]
        if isinstance(s, If):
            from tileagent.compiler.lower.warp_groups import lower_thread_if

            return lower_thread_if(self, s) or [If(ctx.rewrite(s.cond, {}), tuple(self.body(s.then_body)),
                                                  tuple(self.body(s.else_body)), s.span)]
        if isinstance(s, While):
            return [While(ctx.rewrite(s.cond, {}), tuple(self.body(s.body)), s.span)]
        if isinstance(s, Let):
            ctx.lets[s.var] = value = ctx.rewrite(s.value, {})
            if (r := ctx.range_of(value)) is not None:  # i_b = bz // H: bounds checks on it can be proven
                ctx.ranges[s.var] = r
            return [Let(s.var, value, s.span)]
        if isinstance(s, (Store, AtomicAdd)):
            on_chip = s.buffer.scope in ("fragment", "local", "var")
            # per-thread code (T.get_thread_binding): every thread runs its own stores, as TileLang's threads do
            return lower_elements(ctx, [s], {}, True if on_chip or ctx.kernel.thread_vars else kernel_level_writer())
        if isinstance(s, (Barrier, ImportSource, NamedBarrier, LoopExit)):
            return [s]
        if isinstance(s, Assert):  # every thread checks its own
            return [Assert(ctx.rewrite(s.cond, {}), s.message, s.span)]
        if isinstance(s, RngInit):  # every thread initializes its own generator
            return [RngInit(*(ctx.rewrite(x, {}) for x in (s.seed, s.subsequence, s.offset)), s.span)]
        if isinstance(s, Evaluate) and getattr(s.value, "name", None) == SET_MAX_NREG:  # a warp group's own only
            in_range = ctx.thread_range != (0, ctx.kernel.num_threads)
            return [SetMaxNReg(int(s.value.args[0].value), bool(s.value.args[1].value), s.span)] if in_range else []
        if isinstance(s, Evaluate):  # T.call_extern: every thread calls it (per-thread code)
            return [Evaluate(ctx.rewrite(s.value, {}), s.span)]
        if isinstance(s, Print):
            log.warning("T.print at %s is ignored on the CUDA target", s.span)
            return []
        if isinstance(s, MBarrierOp) and ctx.hand_specialized:  # barriers of warp specialization by hand
            from tileagent.compiler.lower.warp_groups import lower_barrier_op

            return lower_barrier_op(ctx, s)
        if isinstance(s, (AnnotateLayout, UseSwizzle, MBarrierOp)):
            return []  # MBarrierOp of T.ws: that code runs in program order; the compiler places its own barriers
        raise TargetError(f"{type(s).__name__} is not lowered by the CUDA backend", code="E602")


__all__ = ["kernel_scratch_bytes", "lower", "lower_module"]
