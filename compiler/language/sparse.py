"""``T.gemm_sp``: TileLang's 2:4 structured-sparse GEMM, run on the dense tensor cores.

In: ``T.gemm_sp(A_sparse, E, B, C, transpose_A=False, transpose_E=False, transpose_B=False, policy=...,
clear_accum=False)`` with ``A_sparse`` a shared (M, K / 2) tile of 16- or 8-bit values (the two kept of every four
along K), ``E`` a shared (M, K / e) tile of integer metadata in TileLang's ordered form (``examples/gemm_sp``'s
``compress``: per group of four along K one 4-bit field, the kept elements' positions in its low and high two bits;
a metadata element of b bits covers e = b / 4 * 4 values of K), ``B`` a shared (K, N) tile ((N, K) transposed) and
``C`` a fragment. Out: the statements ``Alloc`` of a shared (M, K) tile, the ``T.Parallel`` loop that scatters A's
kept values into it (zeros elsewhere) and the ``T.gemm`` of it with B into C.
Guarantees: C gets exactly what the dense product of the decompressed A gives (the CPU interpreter and every target
run these statements); the GEMM runs at dense speed: the sparse tensor-core instructions (mma.sp, wgmma.sp) are not in
the instruction registry. A float32 A (one kept of every two), a transposed A or E: E701.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError, ShapeError, UnsupportedError
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Load, Var, make_binop, make_cast, make_cmp, make_select
from tileagent.compiler.ir.stmt import Alloc, Buffer, Parallel, Region, Store
from tileagent.compiler.language.tileops import GemmWarpPolicy, gemm


def gemm_sp(A_sparse, E, B, C, transpose_A=False, transpose_E=False, transpose_B=False,
            policy=GemmWarpPolicy.Square, clear_accum=False, k_pack=1, wg_wait=0):
    """C (+)= decompress(A_sparse, E) @ op(B) (see the module docstring)."""
    for x, arg in ((A_sparse, "A_sparse"), (E, "E")):
        if not isinstance(x, Buffer) or x.scope != "shared" or x.ndim != 2:
            raise DSLTypeError(f"T.gemm_sp: {arg} must be a whole 2-d shared tile, got {x!r}", code="E309",
                               hint="copy the tile into T.alloc_shared first, as TileLang's example does")
    if transpose_A or transpose_E:
        raise UnsupportedError("T.gemm_sp with transpose_A or transpose_E is not supported",
                               hint="store A_sparse and E row-major (M rows, K along a row)")
    if A_sparse.dtype.bits not in (8, 16):
        raise UnsupportedError(f"T.gemm_sp on {A_sparse.dtype} A is not supported (16- and 8-bit 2:4 sparsity only)")
    if not E.dtype.is_int:
        raise DSLTypeError(f"T.gemm_sp: the metadata E must be an integer tile, got {E.dtype}", code="E302")
    m, half = A_sparse.shape
    k, per = 2 * half, E.dtype.bits  # a metadata element: per // 4 groups of four values of K
    if E.shape[0] != m or E.shape[1] * per != k:
        raise ShapeError(f"T.gemm_sp: E {tuple(E.shape)} does not index A_sparse {tuple(A_sparse.shape)}: {m} rows "
                         f"of {k // per} {E.dtype} elements, each covering {per} values of K", code="E403")
    dense = Buffer(f"{A_sparse.name}_dense", (m, k), A_sparse.dtype, "shared", A_sparse.span)
    i, j = Var(f"{dense.name}_i", DType("int32")), Var(f"{dense.name}_k", DType("int32"))
    group, lane = make_binop("//", j, 4), make_binop("%", j, 4)
    word = make_cast(Load(E, (i, make_binop("//", j, per)), E.dtype), DType("int32"))
    field = make_binop("&", make_binop(">>", word, make_binop("*", make_binop("%", group, per // 4), 4)), 15)
    first, second = (Load(A_sparse, (i, make_binop("+", make_binop("*", group, 2), h)), A_sparse.dtype) for h in (0, 1))
    value = make_select(make_cmp("==", lane, make_binop("&", field, 3)), first,
                        make_select(make_cmp("==", lane, make_binop(">>", field, 2)), second, 0))
    scatter = Parallel((i, j), (m, k), (Store(dense, (i, j), make_cast(value, dense.dtype)),))
    product = gemm(Region.whole(dense), B, C, False, transpose_B, policy, clear_accum)
    return [Alloc(dense), scatter] + (product if isinstance(product, list) else [product])
