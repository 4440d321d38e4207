"""Lowering of ``T.gemm`` to ``wgmma.mma_async`` m64nNk16 with both operands in shared memory (sm_90a).

In: a Gemm the registry entry ``compiler.instructions.wgmma`` accepted (its reason() checked dtypes, scopes, row
widths and the warpgroup split); the accumulator has that entry's layout and both shared operands its canonical
layout (``compiler.layout.layout.wgmma_operand``: swizzle width W, rows wider than W cut into W-byte column blocks of
``R x W`` bytes, R the tile's rows). Out: thread IR.
How: ``WgmmaFence``; for each of the warpgroup's 64-row atoms a and each 16-deep K step kb one ``Wgmma`` whose
descriptors are (PTX ISA "Shared Memory Matrix Layout", CuTe ``make_gmma_desc``):

- A (M x K, K-major): start at A[row0 + 64 a, 16 kb] (inside column block 16 kb // (W / e), 32 bytes further per K
  step inside it), SBO = 8 W (eight W-byte rows), LBO 16 (unused for swizzled K-major).
- A stored K x M (transpose_A, M-major, imm-trans-a 1): as an N-major B with M for N: start at A[16 kb, row0 + 64 a],
  SBO = 8 W, LBO = R x W.
- B stored N x K (transpose_B, K-major): start at B[0, 16 kb], SBO = 8 W, LBO 16.
- B stored K x N (N-major, imm-trans-b 1): start at B[16 kb, 0], SBO = 8 W (eight K rows), LBO = R x W (the next
  W-byte column block along N).

The start is the layout's own offset of that element, whose swizzle key is 0 (the row is a multiple of 8), plus the
pipeline stage. Then ``WgmmaCommit`` and ``WgmmaWait(0)``. Inside a software pipeline, ``ctx.wgmma_schedule`` (a
``pipeline.WgmmaSchedule``) may make the fence a bare ``wgmma.fence`` (``sync=False``: the pipeline's proxy fence
and barrier came just before) and the wait ``WgmmaWait(1)`` (the pipeline waits for the group later), or leave
the wait out (``wait=False``: the next statement is a wgmma gemm chained onto the same accumulator, whose wait
retires both groups). The fence names the registers the gemm's wgmmas use (accumulators; packed RS A registers) and
a wait that retires the group names the accumulators (``WgmmaFence.operands``, ``WgmmaWait.operands``): the CUDA
code pins them there, so the C++ compiler keeps their writes before the fence and their reads after the wait.
Guarantees: C += op(A) @ op(B) for the whole tile (C = op(A) @ op(B) with clear_accum, through scale-d 0 on the first
K step), the accumulators complete before the statement after the gemm runs (with ``wait_group 1``: before the
statement after the pipeline's loop, which waits for every group; without a wait: before the statement after the
chained gemm); every thread executes every Wgmma.
Raises TargetError E602 when a shared operand's layout is not its wgmma canonical layout (an annotated layout).

RS (A in registers, ``instructions.wgmma.WgmmaM64NK16RS``): the same sequence with ``WgmmaRS`` statements; per row
atom and K step the A registers are found from A's fragment layout itself (``register_operand``): for every thread
of every warpgroup and each of the eight PTX A elements (``instructions.wgmma.a_position``) the thread must hold that
element, in a register slot that is the same constant for all threads (register indices are compile-time); packed
A (``ctx.packed``, .b32 pairs) names register slot // 2 for each pair, whose low half must be the even slot.
Anything else is TargetError E602 (never a wrong register).
"""

from __future__ import annotations

import math

import numpy as np

from tileagent.compiler.diagnostics import TargetError
from tileagent.compiler.instructions.base import k_step
from tileagent.compiler.instructions.wgmma import n_split
from tileagent.compiler.ir.expr import as_expr, make_binop
from tileagent.compiler.ir.stmt import Gemm
from tileagent.compiler.layout.layout import swizzle_width
from tileagent.compiler.tir import THREAD, Wgmma, WgmmaCommit, WgmmaFence, WgmmaRS, WgmmaWait

UNUSED_LBO = 16  # K-major swizzled layouts ignore the leading byte offset (PTX: "assumed to be 1", i.e. 16 bytes)


def operand_descriptor(ctx, buf, mn_major: bool) -> tuple[int, int, int]:
    """(LBO, SBO, swizzle width) in bytes of shared operand ``buf`` in its canonical layout (see the module)."""
    layout = ctx.shared_layouts[buf]
    width = swizzle_width(layout, buf.dtype.bytes)
    if width is None:
        raise TargetError(f"T.gemm on wgmma needs '{buf.name}' in its wgmma canonical shared layout (hardware "
                          f"swizzle, column blocks of at most 128 bytes), got {layout!r}", code="E602",
                          hint=f"drop the T.annotate_layout of '{buf.name}' or set pass config tl.disable_wgmma")
    lbo = math.prod(buf.shape[:-1]) * width if mn_major else UNUSED_LBO  # the rows of all stages: one column block
    return lbo, 8 * width, width


def register_operand(frag, m: int, k: int, warpgroups: int, packed: bool, name: str, n_split: int = 1) -> list:
    """Per (row atom a, K step kb), the register indices of A's fragment ``frag`` (M x K, the layout inference gave
    it) that hold PTX A elements a[0..7] (``a_position``) of that atom and step for every thread: 8 slots, or with
    ``packed`` 4 pair registers (slot // 2). TargetError E602 when the layout does not line up (see the module)."""
    from tileagent.compiler.instructions.wgmma import a_position

    owners = frag.owner_mask()
    _, slots = frag.tables()
    pos = np.array([[a_position(t, i) for i in range(8)] for t in range(128)])  # [128, 8, 2]
    rows_per_group = m // (warpgroups // n_split)  # n_split > 1: every warpgroup multiplies all rows of A
    out = {}
    for a in range(rows_per_group // 64):
        for kb in range(k // 16):
            found = None
            for q in range(warpgroups):
                r = q // n_split * rows_per_group + 64 * a + pos[..., 0]
                c = 16 * kb + pos[..., 1]
                threads = q * 128 + np.arange(128)[:, None]
                held = owners[r, c, np.broadcast_to(threads, r.shape)]
                got = slots[r, c]
                if not held.all() or (got != got[0]).any() or (found is not None and (got[0] != found).any()):
                    raise TargetError(f"T.gemm on wgmma RS: the register layout of '{name}' ({frag.describe()}) does "
                                      f"not hold the PTX m64k16 A fragment of row atom {a}, K step {kb} in the same "
                                      "registers of every thread", code="E602",
                                      hint="set pass config tl.disable_wgmma or stage A through T.alloc_shared")
                found = got[0]
            if packed:
                lo, hi = found[0::2], found[1::2]
                if (lo % 2).any() or (hi != lo + 1).any():
                    raise TargetError(f"T.gemm on wgmma RS: '{name}' is packed in .b32 pairs, but the A elements of "
                                      f"row atom {a}, K step {kb} are slots {found.tolist()}, not pairs", code="E602")
                out[a, kb] = tuple(int(x) // 2 for x in lo)
            else:
                out[a, kb] = tuple(int(x) for x in found)
    return out


def lower_wgmma(ctx, s: Gemm) -> list:
    a_buf, b_buf, c_buf = s.a.buffer, s.b.buffer, s.c.buffer
    rs = a_buf.scope == "fragment"
    split = n_split(s, ctx.threads)
    try:
        if not rs:
            a_lbo, a_sbo, a_sw = operand_descriptor(ctx, a_buf, s.transpose_a)
        b_lbo, b_sbo, b_sw = operand_descriptor(ctx, b_buf, not s.transpose_b)
        a_regs = register_operand(ctx.frag(a_buf), s.c.matrix_shape()[0], s.a.matrix_shape()[1],
                                  ctx.threads // 128, a_buf in ctx.packed, a_buf.name, split) if rs else None
    except TargetError as e:
        raise e.with_span(s.span)
    m, n_all = s.c.matrix_shape()
    k = s.a.matrix_shape()[0 if s.transpose_a else 1]
    q = ctx.threads // 128
    n = n_all // split  # columns per warpgroup: the instruction's N
    step = k_step(b_buf)  # K a wgmma: 16, or 8 for TF32 (32 bytes of a row either way)
    atoms = m // (q // split) // 64
    wg = make_binop("//", THREAD, 128) if q > 1 else as_expr(0)  # the thread's warpgroup
    row0 = make_binop("*", wg, m // q) if split == 1 else 0
    col0 = make_binop("*", wg, n) if split > 1 else 0
    c_reg = ctx.mem(c_buf)
    b_major = "k" if s.transpose_b else "mn"
    sched = ctx.wgmma_schedule.get(s)  # inside a software pipeline: its fence and wait (lower.pipeline)
    accumulators = accumulator_operand(ctx, s)
    registers = (accumulators,)
    if rs and a_buf in ctx.packed:  # .b32 pairs: pinned too (16-bit registers are packed at the wgmma itself)
        registers += ((ctx.mem(a_buf), tuple(sorted({int(x) for v in a_regs.values() for x in v}))),)
    out = [WgmmaFence(s.span, sync=sched is None or sched.sync, operands=registers)]
    for a in range(atoms):
        c_regs = tuple(as_expr(((a * 2 + h) * (n // 8) + j) * 2 + p)
                       for j in range(n // 8) for h in (0, 1) for p in (0, 1))  # PTX order d[4j + 2h + p]
        for kb in range(k // step):
            b_idx = ctx.offset(b_buf, _at(s.b, col0, step * kb) if s.transpose_b else _at(s.b, step * kb, col0))
            if rs:
                out.append(WgmmaRS(c_buf=c_reg, c=c_regs, a_buf=ctx.mem(a_buf),
                                   a=tuple(as_expr(x) for x in a_regs[a, kb]), b_buf=ctx.mem(b_buf),
                                   b_index=as_expr(b_idx), b_lbo=b_lbo, b_sbo=b_sbo, b_swizzle=b_sw,
                                   b_major=b_major, n=n, accumulate=not (s.clear_accum and kb == 0),
                                   dtype=str(b_buf.dtype), span=s.span))
                continue
            rows = make_binop("+", row0, 64 * a)
            a_idx = ctx.offset(a_buf, _at(s.a, step * kb, rows) if s.transpose_a else _at(s.a, rows, step * kb))
            out.append(Wgmma(c_buf=c_reg, c=c_regs, a_buf=ctx.mem(a_buf), a_index=as_expr(a_idx), a_lbo=a_lbo,
                             a_sbo=a_sbo, a_swizzle=a_sw, b_buf=ctx.mem(b_buf), b_index=as_expr(b_idx), b_lbo=b_lbo,
                             b_sbo=b_sbo, b_swizzle=b_sw, b_major=b_major, n=n,
                             accumulate=not (s.clear_accum and kb == 0), dtype=str(a_buf.dtype), span=s.span,
                             a_major="mn" if s.transpose_a else "k"))
    out.append(WgmmaCommit(s.span))
    if sched is None or sched.wait:  # else the next gemm's wait retires this group too (pipeline.WgmmaSchedule)
        out.append(WgmmaWait(0 if sched is None else sched.pending, s.span,
                             operands=(accumulators,) if sched is None or not sched.pending else ()))
    return out


def accumulator_operand(ctx, s: Gemm) -> tuple:
    """(local buffer, register indices) of the accumulator registers of ``s`` in each thread: the whole register array
    of its C fragment (every row atom's wgmmas write it); what ``WgmmaFence`` / ``WgmmaWait`` pin in the CUDA code."""
    reg = ctx.mem(s.c.buffer)
    return reg, tuple(range(int(reg.shape[0])))


def _at(r, i, j):
    idx = list(r.starts)
    idx[-2] = make_binop("+", idx[-2], i)
    idx[-1] = make_binop("+", idx[-1], j)
    return tuple(idx)
