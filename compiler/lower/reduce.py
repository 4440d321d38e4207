"""Lowering of ``T.reduce_*`` over fragments: in-thread, then warp shuffles, then shared memory across warps.

In: a Reduce whose source and destination are fragments, the destination's layout being the source's projection
(layout inference guarantees it). Out: thread-IR statements.
How: each thread folds the source registers into one accumulator per destination register; then the thread levels
of the reduced dim (the threads that split one output element between them) that lie inside a warp and are powers
of two are combined by butterflies of ``shfl_xor``, and the rest in one round through the shared-memory scratch
area (``ctx.scratch``: one partial per destination element and combination of those levels). Every thread that
holds an output ends with the full result (replicas agree).
Guarantees: padded source elements are not counted; ``clear=False`` combines with the destination's old value;
accumulation happens in float32 (float64 for float64) and is rounded once into the destination dtype.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from tileagent.compiler.diagnostics import TargetError
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Call, Const, Load, as_expr, make_binop, make_call, make_cast, make_cmp
from tileagent.compiler.ir.stmt import Buffer, For, Reduce, Store
from tileagent.compiler.layout import Level
from tileagent.compiler.lower.copy import guarded, valid_condition
from tileagent.compiler.lower.slots import SlotLoops
from tileagent.compiler.tir import THREAD, Barrier, Declare

_COMBINE = {"sum": "+", "abssum": "+", "max": "max", "absmax": "max", "min": "min", "prod": "*"}


def lower_reduce(ctx, s: Reduce) -> list:
    return lower_reduces(ctx, [s])


def lower_reduces(ctx, run) -> list:
    """A run of reductions (one, or independent ones that follow each other: ``fused_runs``) lowered together: each
    folds in-thread and across lanes, then every one writes its partials to its own part of the scratch, one barrier,
    every one folds them, one barrier (instead of two barriers a reduction)."""
    for s in run:
        if s.src.scope != "fragment" or s.dst.scope != "fragment":
            raise TargetError("the CUDA backend reduces fragments only", s.span, code="E602",
                              hint="T.copy the shared tile into a fragment first")
    parts, offset = [], 0
    for s in run:
        parts.append(_in_registers(ctx, s, offset))
        offset += scratch_bytes(s, ctx.layouts, ctx.threads) // parts[-1].acc.dtype.bytes
    out = [x for p in parts for x in p.fold]
    if any(p.write for p in parts):
        out += [x for p in parts for x in p.write] + [Barrier()]
        out += [x for p in parts for x in p.gather] + [Barrier()]  # the scratch may be written again next
    return out + [x for p in parts for x in p.result]


@dataclass
class _Parts:
    """One reduction's thread IR in the order a run interleaves: ``fold`` (in-thread and warp butterflies),
    ``write`` (its partials into the scratch), ``gather`` (after the barrier: the partials folded), ``result``
    (stored into the destination)."""

    acc: Buffer
    fold: list
    write: list = field(default_factory=list)
    gather: list = field(default_factory=list)
    result: list = field(default_factory=list)


def _in_registers(ctx, s: Reduce, offset: int) -> _Parts:
    src_layout, dim = ctx.frag(s.src), s.dim % s.src.ndim
    acc_dtype = _acc_dtype(s)
    n_out = ctx.frag(s.dst).num_slots
    acc = ctx.scratch_registers(f"red_{s.dst.name}", n_out, acc_dtype)
    combine = _COMBINE[s.kind]
    identity = _identity(combine, acc_dtype)
    out = [Declare(acc, span=s.span)]
    out += [Store(acc, (as_expr(j),), identity, s.span) for j in range(n_out)]
    src_reg = ctx.mem(s.src)

    def fold(k, j, idx):
        value = make_cast(Load(src_reg, (as_expr(k),), s.src.dtype), acc_dtype)
        if s.kind in ("abssum", "absmax"):
            value = make_call("abs", value)
        update = Store(acc, (as_expr(j),), _combine(combine, Load(acc, (as_expr(j),), acc_dtype), value), s.span)
        return guarded(ctx, valid_condition(ctx, src_layout, idx, write=False), [update])

    loops = SlotLoops(ctx, src_layout)
    j = loops.fit(*_output_slots(ctx, s, src_layout, dim))
    if j is not None:
        out += loops.nest(fold(loops.slot(), j, loops.index(THREAD)))
    else:
        for k in range(src_layout.num_slots):
            idx = src_layout.inverse(THREAD, k)
            out += fold(k, ctx.slot(s.dst, tuple(i for d, i in enumerate(idx) if d != dim) or (0,)), idx)
    shuffled, shared = _thread_levels(src_layout, dim)
    rounds = sum(int(math.log2(level.size)) for level in shuffled)
    ctx.note_instruction(s, "in-thread fold" + (f", {rounds} shfl.xor round{'s' if rounds > 1 else ''}" if rounds else "") +
                         (", one round through shared memory" if shared else ""))
    for level in shuffled:
        out += _butterfly(acc, n_out, level, combine, s)
    parts = _Parts(acc, out)
    if shared:
        parts.write, parts.gather = _through_shared(ctx, acc, n_out, shared, combine, identity, s, offset)
    dst_reg = ctx.mem(s.dst)
    for j in range(n_out):
        total = Load(acc, (as_expr(j),), acc_dtype)
        if not s.clear:
            total = _combine(combine, make_cast(Load(dst_reg, (as_expr(j),), s.dst.dtype), acc_dtype), total)
        parts.result.append(Store(dst_reg, (as_expr(j),), make_cast(total, s.dst.dtype), s.span))
    return parts


def _acc_dtype(s: Reduce) -> DType:
    """Accumulation in float32 (float64 for float64), integers in their own dtype."""
    return DType("float64") if s.dst.dtype == "float64" else (DType("float32") if s.dst.dtype.is_float else s.dst.dtype)


def fused_runs(ctx, stmts) -> list[list]:
    """``stmts`` (one statement list) cut into runs: a run is several reductions in a row that go through shared
    memory with one accumulation dtype, none reading or writing a tile another of the run writes (so their order
    does not matter), whose scratch parts fit the kernel's scratch (``run_scratch_bytes`` planned it); every other
    statement is a run of its own. ``TILEAGENT_FUSE_REDUCTIONS=0``: every statement alone."""
    if not fuse_enabled():
        return [[s] for s in stmts]
    out = []
    for run in _runs(stmts, ctx.layouts, ctx.threads):
        if len(run) == 1 or sum(scratch_bytes(s, ctx.layouts, ctx.threads) for s in run) <= ctx.scratch_bytes:
            out.append(run)
        else:
            out += [[s] for s in run]
    return out


def run_scratch_bytes(body, layouts, threads: int) -> int:
    """The most scratch bytes a run of reductions of ``body`` (any depth) needs together. A pipelined loop's
    consumers are its body less the copies it issues ahead, so copies into shared tiles do not cut a run here."""
    from tileagent.compiler.ir.stmt import Copy
    from tileagent.compiler.ir.visit import walk

    if not fuse_enabled():
        return 0
    most = 0
    for stmts in [body] + [getattr(x, f) for x in walk(body) for f in ("body", "then_body", "else_body")
                           if isinstance(getattr(x, f, None), (tuple, list))]:
        kept = [s for s in stmts if not (isinstance(s, Copy) and s.dst.buffer.scope == "shared")]
        for run in _runs(kept, layouts, threads):
            if len(run) > 1:
                most = max(most, sum(scratch_bytes(s, layouts, threads) for s in run))
    return most


def fuse_enabled() -> bool:
    """Whether runs of reductions share one round (``TILEAGENT_FUSE_REDUCTIONS=0`` switches it off, for A/B runs)."""
    return os.environ.get("TILEAGENT_FUSE_REDUCTIONS", "").strip() != "0"


def _runs(stmts, layouts, threads: int) -> list[list]:
    out = []
    for s in stmts:
        if out and _joins(out[-1], s, layouts, threads):
            out[-1].append(s)
        else:
            out.append([s])
    return out


def _joins(run: list, s, layouts, threads: int) -> bool:
    """Whether ``s`` may join ``run`` (whose members after the first joined it so: checking the first is enough)."""
    first = run[0]
    if not (isinstance(s, Reduce) and isinstance(first, Reduce)) or _acc_dtype(first) != _acc_dtype(s):
        return False
    if scratch_bytes(s, layouts, threads) == 0 or scratch_bytes(first, layouts, threads) == 0:
        return False
    return all(s.dst not in (x.src, x.dst) and x.dst not in (s.src, s.dst) for x in run)


def _output_slots(ctx, s: Reduce, src_layout, dim: int):
    """Per source register: the output register it folds into (-1 where threads disagree), and whether any running
    thread holds a real element there."""
    table = src_layout.index_table()  # (threads, slots, dims)
    valid = src_layout.valid_table(ctx.threads)
    kept = [np.minimum(table[:, :, d], s.src.shape[d] - 1) for d in range(table.shape[2]) if d != dim]  # >= 0
    slots = ctx.frag(s.dst).tables()[1][tuple(kept)] if kept else np.zeros(table.shape[:2], dtype=np.int64)
    first = slots[valid.argmax(0), np.arange(slots.shape[1])]
    return np.where(((slots == first) | ~valid).all(0), first, -1), valid.any(0)


def scratch_bytes(s: Reduce, layouts, threads: int) -> int:
    """Shared scratch the reduction needs: none when every thread level it folds lies within a warp; otherwise one
    partial result per (destination element, combination of the levels that go through shared memory)."""
    if s.src not in layouts.fragments or s.dst not in layouts.fragments:
        return 0
    _, shared = _thread_levels(layouts.fragments[s.src], s.dim % s.src.ndim)
    if not shared:
        return 0
    dst = layouts.fragments[s.dst]
    partials = math.prod(dst.padded_shape) * math.prod(lv.size for lv in shared)
    spread = _spread(dst, shared, threads)
    return (_padded(partials) if spread else partials) * max(4, s.dst.dtype.bytes)


def _padded(index):
    """A scratch slot with one padding word after every 32 (``index + index // 32``)."""
    if isinstance(index, (int, np.ndarray)):
        return index + index // 32
    return make_binop("+", index, make_binop("//", index, 32))


def _spread(dst, levels, threads: int) -> bool:
    """Whether the partials go at [combination][element] with one padding word after every 32 (``_padded``) rather
    than at [element][combination]: where the lanes of a warp hold different destination elements (a reduction down
    columns, 4 or 8 columns a lane for 16-byte vectors) and [element][combination] has 4-way or worse shared-memory
    bank conflicts, counted for a warp over every write and read. Down columns over 16 warps it wrote and read with
    32-way conflicts (mean_seq's fp16 column tile: ~65000 cycles a block, every block at once at the end of the
    kernel), over 4 warps 8-way; the padded layout serves each access in one wavefront. A reduction whose lanes
    share their element (rows), or with at most 2-way conflicts (mla_decode's row maxima on mma.sync), keeps
    [element][combination]."""
    from tileagent.compiler.lower.context import eval_per_thread

    digit, group = np.zeros(threads, dtype=np.int64), 1
    for lv in levels:
        digit += (np.arange(threads) // lv.stride) % lv.size * group
        group *= lv.size
    elements, padded = math.prod(dst.padded_shape), dst.padded_shape
    flats = []
    for j in range(dst.num_slots):
        flat = np.zeros(threads, dtype=np.int64)
        for i, n in zip(dst.inverse(THREAD, j), padded):
            values = eval_per_thread(i, threads)
            if values is None:
                return False
            flat = flat * n + values
        flats.append(flat)
    if threads < 64 or all(len(np.unique(f[:32])) == 1 for f in flats):
        return False

    def ways(slots):  # (accesses, threads) -> per access, the most distinct slots one bank serves to warp 0
        return [int(np.bincount(np.unique(lanes) % 32).max()) for lanes in slots[:, :32]]

    flat = np.stack(flats)
    r = np.arange(group)[:, None, None]
    old = ways(np.concatenate([flat * group + digit, (flat[None] * group + r).reshape(-1, threads)]))
    new = ways(_padded(np.concatenate([digit * elements + flat, (r * elements + flat[None]).reshape(-1, threads)])))
    return max(old) >= 4 and sum(new) < sum(old)  # 2-way (mla_decode's row maxima on mma.sync) stays as it was


def _thread_levels(src_layout, dim: int):
    """The thread levels of the reduced dim: (those a warp butterfly combines, those combined through shared
    memory). Butterflies run first, so the shared round sees one partial per combination of its own levels."""
    levels = _split_at_warp([lv for lv in src_layout.dims[dim] if lv.is_thread])
    shuffled = [lv for lv in levels if _pow2(lv.size) and _pow2(lv.stride) and lv.stride * lv.size <= 32]
    return shuffled, [lv for lv in levels if lv not in shuffled]


def _split_at_warp(levels):
    """Split a thread level that straddles the warp boundary into its in-warp and cross-warp parts."""
    out = []
    for lv in levels:
        if lv.stride < 32 < lv.stride * lv.size and _pow2(lv.size) and _pow2(lv.stride):
            inner = 32 // lv.stride
            out += [Level(inner, lv.stride), Level(lv.size // inner, 32)]
        else:
            out.append(lv)
    return out


def _butterfly(acc, n_out, level, combine, s) -> list:
    """Combine a power-of-two level inside a warp with shfl_xor rounds; every lane ends with the same value."""
    out = []
    mask = level.stride
    while mask < level.stride * level.size:
        for j in range(n_out):
            cur = Load(acc, (as_expr(j),), acc.dtype)
            out.append(Store(acc, (as_expr(j),), _combine(combine, cur, make_call_shfl(cur, mask)), s.span))
        mask *= 2
    return out


def _through_shared(ctx, acc, n_out, levels, combine, identity, s, offset: int = 0) -> tuple[list, list]:
    """Combine ``levels`` through the scratch: each thread writes its partial of every destination element it holds
    at (its digits in ``levels``, element), barrier, then folds all partials of the element in the same order (so
    every holder gets the same value). Threads that hold the same element and digits hold the same value (they
    differ only in combined or replicated levels), so their identical writes do not conflict; threads past the
    source's ``threads_used`` hold nothing and do not write. Returns (the writes, the folds after the barrier); the
    partials start ``offset`` elements into the scratch (a run of reductions gives each its own part)."""
    ws = ctx.scratch(acc.dtype)
    dst, src = ctx.frag(s.dst), ctx.frag(s.src)
    group, digit = 1, 0
    for lv in levels:
        digit = make_binop("+", digit, make_binop("*", make_binop("%", make_binop("//", THREAD, lv.stride), lv.size),
                                                  group))
        group *= lv.size
    padded = dst.padded_shape

    elements = math.prod(padded)

    def element(j):
        flat = 0
        for i, n in zip(dst.inverse(THREAD, j), padded):
            flat = make_binop("+", make_binop("*", flat, n), i)
        return flat

    spread = _spread(dst, levels, ctx.threads)

    def slot(j, combination):  # _spread: [combination][element] padded, else [element][combination]
        if spread:
            return make_binop("+", _padded(make_binop("+", make_binop("*", combination, elements), element(j))),
                              offset)
        return make_binop("+", make_binop("+", make_binop("*", element(j), group), combination), offset)

    writes = [Store(ws, (slot(j, digit),), Load(acc, (as_expr(j),), acc.dtype), s.span) for j in range(n_out)]
    if src.threads_used < ctx.threads:
        writes = guarded(ctx, make_cmp("<", THREAD, src.threads_used), writes)
    out = []
    for j in range(n_out):
        r = ctx.var("r")
        out.append(Store(acc, (as_expr(j),), identity, s.span))
        out.append(For(r, 0, group, 1, "unroll", (Store(acc, (as_expr(j),), _combine(
            combine, Load(acc, (as_expr(j),), acc.dtype), Load(ws, (slot(j, r),), acc.dtype)),
            s.span),), span=s.span))
    return writes, out


def make_call_shfl(value, mask: int):
    return Call("shfl_xor", (value, Const(mask, DType("int32")), Const(32, DType("int32"))), value.dtype)


def _combine(op: str, a, b):
    if op in ("+", "*"):
        return make_binop(op, a, b)
    return make_call(op, a, b)


def _identity(op: str, dtype: DType):
    if op in ("+", "*"):
        unit = 0 if op == "+" else 1
        return Const(float(unit) if dtype.is_float else unit, dtype)
    big = math.inf if dtype.is_float else (2 ** (dtype.bits - 1) - 1)
    return Const(-big if op == "max" else big, dtype)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0

