"""Lowering of ``T.gemm`` to ``wgmma.mma_async`` m64nNk16 with both operands in shared memory (sm_90a).

In: a Gemm the registry entry ``compiler.instructions.wgmma`` accepted (its reason() checked dtypes, scopes, the
128-byte rows and the warpgroup split); the accumulator has that entry's layout. Out: thread IR.
How: ``WgmmaFence``; for each of the warpgroup's 64-row atoms a and each 16-deep K step kb one ``Wgmma`` whose A
descriptor starts at A[row0 + 64 a, 16 kb] and whose B descriptor starts at B[16 kb, 0] (K x N, N-major) or B[0, 16 kb]
(N x K, K-major), SBO 1024 bytes (eight 128-byte rows); the start moves by 32 bytes per K step inside a K-major swizzle
atom, which is how the hardware expects it. Then ``WgmmaCommit`` and ``WgmmaWait(0)``.
Guarantees: C += op(A) @ op(B) for the whole tile (C = op(A) @ op(B) with clear_accum, through scale-d 0 on the first
K step), the accumulators complete before the statement after the gemm runs; every thread executes every Wgmma.
Raises TargetError E602 when a shared operand's layout is not the 128B-swizzled row-major tile (an annotated
layout).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import TargetError
from tileagent.compiler.ir.expr import as_expr, make_binop
from tileagent.compiler.ir.stmt import Gemm
from tileagent.compiler.layout.layout import Swizzle
from tileagent.compiler.tir import THREAD, Wgmma, WgmmaCommit, WgmmaFence, WgmmaWait

SBO = 1024  # bytes between 8-row groups of a 128-byte-row swizzled tile


def lower_wgmma(ctx, s: Gemm) -> list:
    a_buf, b_buf, c_buf = s.a.buffer, s.b.buffer, s.c.buffer
    for buf in (a_buf, b_buf):
        layout = ctx.shared_layouts[buf]
        cols = buf.shape[-1]
        if tuple(layout._strides()) != (cols, 1) or layout.swizzle != Swizzle(3, 3, 3):
            raise TargetError(f"T.gemm on wgmma needs '{buf.name}' in the 128B-swizzled row-major layout, got "
                              f"strides {layout._strides()} swizzle {layout.swizzle}", s.span, code="E602",
                              hint=f"drop the T.annotate_layout of '{buf.name}' or unset TILEAGENT_ENABLE_WGMMA")
    m, n = s.c.matrix_shape()
    k = s.a.matrix_shape()[1]
    q = ctx.threads // 128
    atoms = m // q // 64
    row0 = make_binop("*", make_binop("//", THREAD, 128), m // q)
    c_reg = ctx.mem(c_buf)
    b_major = "k" if s.transpose_b else "mn"
    out = [WgmmaFence(s.span)]
    for a in range(atoms):
        c_regs = tuple(as_expr(((a * 2 + h) * (n // 8) + j) * 2 + p)
                       for j in range(n // 8) for h in (0, 1) for p in (0, 1))  # PTX order d[4j + 2h + p]
        for kb in range(k // 16):
            a_idx = ctx.offset(a_buf, _at(s.a, make_binop("+", row0, 64 * a), 16 * kb))
            b_idx = ctx.offset(b_buf, _at(s.b, 0, 16 * kb) if s.transpose_b else _at(s.b, 16 * kb, 0))
            out.append(Wgmma(c_reg, c_regs, ctx.mem(a_buf), as_expr(a_idx), SBO, ctx.mem(b_buf), as_expr(b_idx), SBO,
                             b_major, n, not (s.clear_accum and kb == 0), str(a_buf.dtype), s.span))
    out += [WgmmaCommit(s.span), WgmmaWait(0, s.span)]
    return out


def _at(r, i, j):
    idx = list(r.starts)
    idx[-2] = make_binop("+", idx[-2], i)
    idx[-1] = make_binop("+", idx[-1], j)
    return tuple(idx)
