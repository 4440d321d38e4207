"""The CPU interpreter, numerically: each kernel against a torch reference computed in the same test."""

from pathlib import Path

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.errors import KernelArgumentError, KernelFault

F32 = dict(rtol=1e-5, atol=1e-6)
EXACT = dict(rtol=0, atol=0)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


def build(func, out_idx=None):
    return tileagent.compile(func, target="cpu", out_idx=out_idx)


def line_of(marker: str, path=__file__) -> int:
    """The line of ``path`` (this file by default) that ends with the comment ``# marker``."""
    lines = Path(path).read_text().splitlines()
    hits = [n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


# -- T.copy ------------------------------------------------------------------------------------------------------


def test_copy_reads_zero_past_the_global_edge():
    M, B = 37, 16

    @T.prim_func
    def block_sum(X: T.Tensor((M,), "float32"), S: T.Tensor((3,), "float32")):
        with T.Kernel(T.ceildiv(M, B)) as bx:
            xs = T.alloc_shared((B,), "float32")
            xf = T.alloc_fragment((B,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bx * B], xs)
            T.copy(xs, xf)
            T.reduce_sum(xf, s, dim=0)
            S[bx] = s[0]

    x, s = torch.randn(M), nan(3)
    build(block_sum)(x, s)
    torch.testing.assert_close(s, torch.stack([c.sum() for c in x.split(B)]), **F32)


def test_copy_drops_writes_past_the_global_edge():
    M, N, B = 37, 8, 16

    @T.prim_func
    def roundtrip(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, B)) as bx:
            xs = T.alloc_shared((B, N), "float32")
            xf = T.alloc_fragment((B, N), "float32")
            T.copy(X[bx * B, 0], xs)
            T.copy(xs, xf)
            for i, j in T.Parallel(B, N):
                xf[i, j] = xf[i, j] * 3.0
            T.copy(xf, Y[bx * B, 0])

    x, y = torch.randn(M, N), nan(M, N)
    build(roundtrip)(x, y)
    torch.testing.assert_close(y, x * 3.0, **EXACT)


def test_parallel_element_access_reads_zero_and_drops_writes_past_the_global_edge():
    M, B = 21, 8

    @T.prim_func
    def shift_add(X: T.Tensor((M,), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, B)) as bx:
            for i in T.Parallel(B):
                Y[bx * B + i] = X[bx * B + i] + X[bx * B + i + 4]

    x, y = torch.randn(M), nan(M)
    build(shift_add)(x, y)
    torch.testing.assert_close(y, x + torch.cat([x[4:], torch.zeros(4)]), **EXACT)


def test_copy_from_an_element_origin_into_slices_of_the_output():
    M, K, BM, BK = 64, 48, 32, 16

    @T.prim_func
    def tiles(A: T.Tensor((M, K), "float32"), B: T.Tensor((M, K), "float32")):
        with T.Kernel(M // BM) as by:
            A_s = T.alloc_shared((BM, BK), "float32")
            for k in T.serial(K // BK):
                T.copy(A[by * 32, k * 16], A_s)
                T.copy(A_s, B[by * BM:(by + 1) * BM, k * BK:(k + 1) * BK])

    a, b = torch.randn(M, K), nan(M, K)
    build(tiles)(a, b)
    torch.testing.assert_close(b, a, **EXACT)


def test_copy_of_a_column_slice_into_an_element_origin():
    M, K, W, BM = 40, 32, 16, 8

    @T.prim_func
    def middle(A: T.Tensor((M, K), "float32"), B: T.Tensor((M, W), "float32")):
        with T.Kernel(M // BM) as by:
            s = T.alloc_shared((BM, W), "float32")
            T.copy(A[by * BM:(by + 1) * BM, 8:8 + W], s)
            T.copy(s, B[by * BM, 0])

    a, b = torch.randn(M, K), nan(M, W)
    build(middle)(a, b)
    torch.testing.assert_close(b, a[:, 8:8 + W], **EXACT)


def test_copy_broadcasts_a_4d_slice_into_a_2d_tile_and_back():
    batch, seq, heads, dim, BM = 2, 40, 3, 16, 16
    shape = (batch, seq, heads, dim)

    @T.prim_func
    def scale(Q: T.Tensor(shape, "float32"), O: T.Tensor(shape, "float32")):
        with T.Kernel(T.ceildiv(seq, BM), heads, batch) as (bx, by, bz):
            q_s = T.alloc_shared((BM, dim), "float32")
            q_f = T.alloc_fragment((BM, dim), "float32")
            T.copy(Q[bz, bx * BM:(bx + 1) * BM, by, :], q_s)
            T.copy(q_s, q_f)
            for i, j in T.Parallel(BM, dim):
                q_f[i, j] = q_f[i, j] * 2.0 + by
            T.copy(q_f, O[bz, bx * BM:(bx + 1) * BM, by, :])

    q, o = torch.randn(shape), nan(*shape)
    build(scale)(q, o)
    torch.testing.assert_close(o, q * 2.0 + torch.arange(heads).float().view(1, 1, heads, 1), **EXACT)


def test_copy_converts_fp16_to_fp32_fragment_to_bf16_output():
    M, N, BM = 24, 32, 8

    @T.prim_func
    def convert(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "bfloat16")):
        with T.Kernel(M // BM) as bx:
            x = T.alloc_fragment((BM, N), "float32")
            T.copy(X[bx * BM, 0], x)
            for i, j in T.Parallel(BM, N):
                x[i, j] = x[i, j] * x[i, j] + 1.0
            T.copy(x, Y[bx * BM, 0])

    x, y = torch.randn(M, N, dtype=torch.float16), nan(M, N, dtype=torch.bfloat16)
    build(convert)(x, y)
    xf = x.float()
    torch.testing.assert_close(y, (xf * xf + 1.0).to(torch.bfloat16), **EXACT)


# -- T.Parallel and scalar math -------------------------------------------------------------------------------


def test_parallel_let_bindings_and_if_then_else_chain():
    M, N, BM = 16, 12, 8

    @T.prim_func
    def chain(X: T.Tensor((M, N), "float32"), Z: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M // BM) as bx:
            for i, j in T.Parallel(BM, N):
                v = X[bx * BM + i, j] * 2.0
                w = v - Z[bx * BM + i, j]
                w = T.if_then_else(w > 0, w, w * 0.25)
                Y[bx * BM + i, j] = w + v * j

    x, z, y = torch.randn(M, N), torch.randn(M, N), nan(M, N)
    build(chain)(x, z, y)
    v = x * 2.0
    w = v - z
    torch.testing.assert_close(y, torch.where(w > 0, w, w * 0.25) + v * torch.arange(N).float(), **F32)


def test_runtime_if_in_parallel_writes_only_where_the_condition_holds():
    N = 64

    @T.prim_func
    def masked(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(N):
                if X[i] > 0:
                    Y[i] = X[i] * 2.0
                else:
                    Y[i] = -1.0
                if i % 3 == 0:
                    Z[i] = X[i]

    x, y, z = torch.randn(N), nan(N), nan(N)
    build(masked)(x, y, z)
    torch.testing.assert_close(y, torch.where(x > 0, x * 2.0, torch.tensor(-1.0)), **EXACT)
    keep = torch.arange(N) % 3 == 0
    torch.testing.assert_close(z, torch.where(keep, x, torch.tensor(float("nan"))), equal_nan=True, **EXACT)


UNARY = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "rsqrt": torch.rsqrt,
         "sqrt": torch.sqrt, "abs": torch.abs, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
         "floor": torch.floor, "ceil": torch.ceil, "sin": torch.sin, "cos": torch.cos}
POSITIVE_ONLY = ("log", "log2", "rsqrt", "sqrt")


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_math_intrinsic_matches_torch(name):
    N = 64
    op = getattr(T, name)

    @T.prim_func
    def unary(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(N):
                Y[i] = op(X[i])

    x = torch.rand(N) * 4 + 0.05 if name in POSITIVE_ONLY else torch.randn(N) * 3
    y = nan(N)
    build(unary)(x, y)
    torch.testing.assert_close(y, UNARY[name](x), **F32)


BINARY = {"pow": torch.pow, "max": torch.maximum, "min": torch.minimum, "atan2": torch.atan2, "fmod": torch.fmod}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_math_intrinsic_matches_torch(name):
    N = 64
    op = getattr(T, name)

    @T.prim_func
    def binary(X: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(N):
                Y[i] = op(X[i], Z[i])

    x = torch.rand(N) * 3 + 0.1 if name == "pow" else torch.randn(N)
    z, y = torch.randn(N), nan(N)
    build(binary)(x, z, y)
    torch.testing.assert_close(y, BINARY[name](x, z), **F32)


def test_max_with_a_literal_is_relu():
    N = 32

    @T.prim_func
    def relu(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(N):
                Y[i] = T.max(X[i], 0)

    x, y = torch.randn(N), nan(N)
    build(relu)(x, y)
    torch.testing.assert_close(y, torch.relu(x), **EXACT)


# -- reductions --------------------------------------------------------------------------------------------------

REDUCE = {"sum": lambda x, d: x.sum(d), "max": lambda x, d: x.amax(d), "min": lambda x, d: x.amin(d),
          "abssum": lambda x, d: x.abs().sum(d), "absmax": lambda x, d: x.abs().amax(d)}
COMBINE = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum, "absmax": torch.maximum}


def _reduce_kernel(kind, dim, R, C, clear):
    op = getattr(T, f"reduce_{kind}")
    n = C if dim == 0 else R
    extra = {} if kind == "abssum" else {"clear": clear}

    @T.prim_func
    def reduce(X: T.Tensor((R, C), "float32"), Y0: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            x = T.alloc_fragment((R, C), "float32")
            y = T.alloc_fragment((n,), "float32")
            T.copy(X, x)
            T.copy(Y0, y)
            op(x, y, dim=dim, **extra)
            T.copy(y, Y)

    return build(reduce), n


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", sorted(REDUCE))
def test_reduce_over_a_dim_matches_torch(kind, dim):
    R, C = 8, 12
    kernel, n = _reduce_kernel(kind, dim, R, C, clear=True)
    x, y = torch.randn(R, C), nan(n)
    kernel(x, torch.randn(n), y)
    torch.testing.assert_close(y, REDUCE[kind](x, dim), **F32)


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("kind", sorted(COMBINE))
def test_reduce_without_clear_combines_with_the_old_contents(kind, dim):
    R, C = 8, 12
    kernel, n = _reduce_kernel(kind, dim, R, C, clear=False)
    x, y = torch.randn(R, C), nan(n)
    y0 = REDUCE[kind](x, dim) + torch.tensor([0.5, -0.5]).repeat(n // 2)
    want = COMBINE[kind](y0, REDUCE[kind](x, dim))
    assert not torch.equal(want, REDUCE[kind](x, dim))
    kernel(x, y0, y)
    torch.testing.assert_close(y, want, **F32)


def test_reduce_of_a_shared_tile_into_a_fragment():
    R, C = 6, 20

    @T.prim_func
    def row_max(X: T.Tensor((R, C), "float32"), Y: T.Tensor((R,), "float32")):
        with T.Kernel(1):
            s = T.alloc_shared((R, C), "float32")
            m = T.alloc_fragment((R,), "float32")
            T.copy(X, s)
            T.reduce_max(s, m, dim=1)
            T.copy(m, Y)

    x, y = torch.randn(R, C), nan(R)
    build(row_max)(x, y)
    torch.testing.assert_close(y, x.amax(1), **EXACT)


# -- T.gemm ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)],
                         ids=["nn", "nt", "tn", "tt"])
def test_gemm_pipelined_k_loop_with_ragged_tails_matches_torch(ta, tb, dtype):
    M, N, K, BM, BN, BK = 40, 36, 52, 16, 16, 16
    dt = str(dtype).split(".")[1]
    a_shape, a_tile = ((K, M), (BK, BM)) if ta else ((M, K), (BM, BK))
    b_shape, b_tile = ((N, K), (BN, BK)) if tb else ((K, N), (BK, BN))

    @T.prim_func
    def matmul(A: T.Tensor(a_shape, dt), B: T.Tensor(b_shape, dt), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=128) as (bx, by):
            A_s = T.alloc_shared(a_tile, dt)
            B_s = T.alloc_shared(b_tile, dt)
            C_l = T.alloc_fragment((BM, BN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, BK), num_stages=3):
                if ta:
                    T.copy(A[k * BK, by * BM], A_s)
                else:
                    T.copy(A[by * BM, k * BK], A_s)
                if tb:
                    T.copy(B[bx * BN, k * BK], B_s)
                else:
                    T.copy(B[k * BK, bx * BN], B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=ta, transpose_B=tb)
            T.copy(C_l, C[by * BM, bx * BN])

    a, b, c = torch.randn(a_shape, dtype=dtype), torch.randn(b_shape, dtype=dtype), nan(M, N)
    build(matmul)(a, b, c)
    af, bf = a.float(), b.float()
    ref = (af.T if ta else af) @ (bf.T if tb else bf)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)


def test_gemm_clear_accum_ignores_old_contents_and_plain_gemm_accumulates():
    M, N, K = 16, 24, 32

    @T.prim_func
    def twice(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_l = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C)

    a, b, c = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16), nan(M, N)
    build(twice)(a, b, c)
    torch.testing.assert_close(c, 2 * (a.float() @ b.float()), rtol=1e-2, atol=1e-2)


# -- atomics -----------------------------------------------------------------------------------------------------


def test_scalar_atomic_add_in_parallel_sums_columns_over_blocks():
    M, N, BM = 37, 12, 8

    @T.prim_func
    def colsum(X: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(M, BM)) as bx:
            for i, j in T.Parallel(BM, N):
                T.atomic_add(S[j], X[bx * BM + i, j])

    x, s = torch.randn(M, N), torch.zeros(N)
    build(colsum)(x, s)
    torch.testing.assert_close(s, x.sum(0), **F32)


def test_tile_atomic_add_accumulates_split_k_partial_products():
    M, N, K, BM, BN, BK, SPLIT = 32, 24, 64, 16, 24, 16, 4

    @T.prim_func
    def split_k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), SPLIT) as (bx, by, bz):
            A_s = T.alloc_shared((BM, BK), "float16")
            B_s = T.alloc_shared((BK, BN), "float16")
            C_l = T.alloc_fragment((BM, BN), "float32")
            T.copy(A[by * BM, bz * BK], A_s)
            T.copy(B[bz * BK, bx * BN], B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.atomic_add(C[by * BM, bx * BN], C_l)

    a, b, c = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16), torch.zeros(M, N)
    build(split_k)(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)


# -- scalars and sequential loops ----------------------------------------------------------------------------


def test_alloc_var_carries_a_running_sum_and_max_across_a_serial_loop():
    M, K = 5, 9

    @T.prim_func
    def scan(X: T.Tensor((M, K), "float32"), S: T.Tensor((M, K), "float32"), Mx: T.Tensor((M, K), "float32")):
        with T.Kernel(M) as bx:
            acc = T.alloc_var("float32")
            best = T.alloc_var("float32", init=-T.infinity("float32"))
            acc = 0.0
            for k in T.serial(K):
                acc = acc + X[bx, k]
                best = T.max(best, X[bx, k])
                S[bx, k] = acc
                Mx[bx, k] = best

    x, s, mx = torch.randn(M, K), nan(M, K), nan(M, K)
    build(scan)(x, s, mx)
    torch.testing.assert_close(s, x.cumsum(1), **F32)
    torch.testing.assert_close(mx, x.cummax(1).values, **EXACT)


def test_runtime_if_on_a_scalar_outside_parallel_counts_positives():
    M, K = 6, 10

    @T.prim_func
    def count(X: T.Tensor((M, K), "float32"), C: T.Tensor((M,), "int32")):
        with T.Kernel(M) as bx:
            n = T.alloc_var("int32", init=0)
            for k in T.serial(K):
                if X[bx, k] > 0:
                    n += 1
            C[bx] = n

    x, c = torch.randn(M, K), torch.full((M,), -1, dtype=torch.int32)
    build(count)(x, c)
    torch.testing.assert_close(c, (x > 0).sum(1).to(torch.int32), **EXACT)


def test_alloc_local_indexed_by_a_serial_loop_variable():
    M, K = 4, 6

    @T.prim_func
    def reverse(X: T.Tensor((M, K), "float32"), Y: T.Tensor((M, K), "float32")):
        with T.Kernel(M) as bx:
            loc = T.alloc_local((K,), "float32")
            for k in T.serial(K):
                loc[k] = X[bx, k] * 2.0
            for k in T.serial(K):
                Y[bx, K - 1 - k] = loc[k]

    x, y = torch.randn(M, K), nan(M, K)
    build(reverse)(x, y)
    torch.testing.assert_close(y, (x * 2.0).flip(1), **EXACT)


def test_unroll_and_python_range_loops_run_every_iteration():
    M, K = 3, 8

    @T.prim_func
    def sums(X: T.Tensor((M, K), "float32"), All: T.Tensor((M,), "float32"), Even: T.Tensor((M,), "float32")):
        with T.Kernel(M) as bx:
            a = T.alloc_var("float32", init=0.0)
            e = T.alloc_var("float32", init=0.0)
            for k in T.unroll(K):
                a += X[bx, k]
            for k in range(0, K, 2):
                e += X[bx, k]
            All[bx] = a
            Even[bx] = e

    x, a, e = torch.randn(M, K), nan(M), nan(M)
    build(sums)(x, a, e)
    torch.testing.assert_close(a, x.sum(1), **F32)
    torch.testing.assert_close(e, x[:, 0::2].sum(1), **F32)


def test_python_for_over_a_tuple_unrolls_with_compile_time_values():
    N = 16
    weights = ((1.0, 0), (2.5, 1), (-0.5, 2))

    @T.prim_func
    def scaled(X: T.Tensor((N,), "float32"), Y: T.Tensor((3, N), "float32")):
        with T.Kernel(1):
            for w, row in weights:
                for i in T.Parallel(N):
                    v = X[i] * w
                    Y[row, i] = v + row

    x, y = torch.randn(N), nan(3, N)
    build(scaled)(x, y)
    torch.testing.assert_close(y, torch.stack([x * w + r for w, r in weights]), **EXACT)


@tileagent.jit(out_idx=[1], target="cpu")
def _activation(N, relu):
    @T.prim_func
    def act(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(N):
                if relu:
                    Y[i] = T.max(X[i], 0.0)
                else:
                    Y[i] = X[i] * 0.5

    return act


@pytest.mark.parametrize("relu", [True, False])
def test_python_if_on_a_compile_time_flag_picks_one_branch(relu):
    x = torch.randn(32)
    y = _activation(32, relu)(x)
    torch.testing.assert_close(y, torch.relu(x) if relu else x * 0.5, **EXACT)


# -- shapes, launches, outputs -------------------------------------------------------------------------------


def test_dynamic_shape_kernel_runs_at_two_sizes():
    M = T.dynamic("m")
    N, BM = 8, 16

    @T.prim_func
    def affine(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, BM)) as bx:
            x = T.alloc_fragment((BM, N), "float32")
            T.copy(X[bx * BM, 0], x)
            for i, j in T.Parallel(BM, N):
                x[i, j] = x[i, j] * 2.0 - 1.0
            T.copy(x, Y[bx * BM, 0])

    kernel = build(affine, out_idx=[1])
    for m in (20, 45):
        x = torch.randn(m, N)
        y = kernel(x)
        assert y.shape == (m, N)
        torch.testing.assert_close(y, x * 2.0 - 1.0, **EXACT)


def test_second_kernel_scope_reads_what_the_first_wrote():
    N, B = 32, 8

    @T.prim_func
    def two(X: T.Tensor((N,), "float32"), Tmp: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(N // B) as bx:
            for i in T.Parallel(B):
                Tmp[bx * B + i] = X[bx * B + i] * 2.0
        with T.Kernel(N // B) as bx:
            for i in T.Parallel(B):
                Y[bx * B + i] = Tmp[bx * B + i] + Tmp[N - 1 - bx * B - i]

    x, tmp, y = torch.randn(N), nan(N), nan(N)
    build(two)(x, tmp, y)
    torch.testing.assert_close(y, x * 2.0 + (x * 2.0).flip(0), **EXACT)


def _three(N):
    @T.prim_func
    def three(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(N):
                Y[i] = X[i] + 1.0
                Z[i] = X[i] * X[i]

    return three


def test_out_idx_with_one_output_returns_that_tensor():
    x, z = torch.randn(16), nan(16)
    y = build(_three(16), out_idx=-2)(x, z)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, x + 1.0, **EXACT)
    torch.testing.assert_close(z, x * x, **EXACT)


def test_out_idx_with_two_outputs_returns_a_list_in_parameter_order():
    x = torch.randn(16)
    out = build(_three(16), out_idx=[2, 1])(x)
    assert isinstance(out, list) and len(out) == 2
    torch.testing.assert_close(out[0], x + 1.0, **EXACT)
    torch.testing.assert_close(out[1], x * x, **EXACT)


def test_scalar_parameters_set_a_loop_bound_and_a_value():
    @T.prim_func
    def head(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32"), n: T.int32, c: T.float32):
        with T.Kernel(1):
            for k in T.serial(n):
                Y[k] = X[k] * c

    x, y = torch.randn(8), nan(8)
    build(head)(x, y, 5, 1.5)
    torch.testing.assert_close(y[:5], x[:5] * 1.5, **EXACT)
    assert y[5:].isnan().all()


# -- argument checks ---------------------------------------------------------------------------------------------


def _pair_kernel():
    M = T.dynamic("m")

    @T.prim_func
    def pair(X: T.Tensor((8, 4), "float32"), Y: T.Tensor((8, 4), "float32"), D: T.Tensor((M,), "float32"),
             E: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            for i, j in T.Parallel(8, 4):
                Y[i, j] = X[i, j]

    return build(pair)


def _args():
    return [torch.randn(8, 4), torch.randn(8, 4), torch.randn(5), torch.randn(5)]


def test_wrong_argument_count_is_rejected_with_the_parameter_names():
    with pytest.raises(KernelArgumentError) as e:
        _pair_kernel()(*_args()[:2])
    assert str(e.value) == "kernel pair expects 4 input(s) (X, Y, D, E) but got 2"


def test_wrong_dtype_is_rejected_naming_the_parameter():
    args = _args()
    args[1] = args[1].half()
    with pytest.raises(KernelArgumentError) as e:
        _pair_kernel()(*args)
    assert str(e.value) == "parameter 'Y' expects dtype float32, got torch.float16"


def test_wrong_rank_is_rejected_naming_the_parameter():
    args = _args()
    args[0] = torch.randn(32)
    with pytest.raises(KernelArgumentError) as e:
        _pair_kernel()(*args)
    assert str(e.value) == "parameter 'X' expects rank 2 (8, 4), got a tensor of rank 1 (32,)"


def test_wrong_shape_is_rejected_naming_the_parameter_and_dim():
    args = _args()
    args[1] = torch.randn(8, 5)
    with pytest.raises(KernelArgumentError) as e:
        _pair_kernel()(*args)
    assert str(e.value) == "parameter 'Y' expects shape (8, 4), got (8, 5) (dim 1: expected 4, got 5)"


def test_inconsistent_dynamic_dim_is_rejected_naming_the_parameter():
    args = _args()
    args[3] = torch.randn(6)
    with pytest.raises(KernelArgumentError) as e:
        _pair_kernel()(*args)
    assert str(e.value) == "parameter 'E' dim 0 is 6, but 'm' was already bound to 5 by an earlier argument"


def test_non_contiguous_tensor_is_rejected_naming_the_parameter():
    args = _args()
    args[0] = torch.randn(4, 8).t()
    with pytest.raises(KernelArgumentError) as e:
        _pair_kernel()(*args)
    assert str(e.value) == (
        "parameter 'X' must be contiguous (row-major), got a view with strides (1, 8): declare the parameter in "
        "the layout the tensor has in memory (a transpose's base shape) and index it accordingly in the kernel; "
        ".contiguous() copies with a torch kernel, which a candidate's forward may not run")


def test_a_slice_of_a_wider_tensor_is_rejected_with_the_way_to_pass_it():
    """Played LLM session 36: GeGLU's h.chunk(2, -1) halves were told to declare "a transpose's base shape"."""
    args = _args()
    args[0] = torch.randn(8, 20)[:, :4]
    with pytest.raises(KernelArgumentError) as e:
        _pair_kernel()(*args)
    assert str(e.value) == (
        "parameter 'X' must be contiguous (row-major), got a view with strides (20, 1): declare the whole tensor the "
        "slice is cut from (chunk, narrow or [..., a:b] make such views: pass the tensor before the cut) and index "
        "the part inside the kernel; .contiguous() copies with a torch kernel, which a candidate's forward may not "
        "run")


# -- run-time faults and printing --------------------------------------------------------------------------------


def test_out_of_bounds_shared_store_faults_at_the_dsl_line():
    n = T.dynamic("n")

    @T.prim_func
    def overrun(X: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            s = T.alloc_shared((8,), "float32")
            for k in T.serial(n):
                s[k] = X[k]  # shared-store-fault

    kernel = build(overrun)
    kernel(torch.randn(8))
    with pytest.raises(KernelFault) as e:
        kernel(torch.randn(9))
    assert str(e.value).startswith(f"{__file__}:{line_of('shared-store-fault')}:")
    assert "'s'" in str(e.value)


def test_out_of_bounds_fragment_load_faults_at_the_dsl_line():
    @T.prim_func
    def shifted(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(2) as bx:
            f = T.alloc_fragment((8,), "float32")
            T.copy(X, f)
            for i in T.Parallel(8):
                Y[i] = f[i + bx]  # fragment-load-fault

    with pytest.raises(KernelFault) as e:
        build(shifted)(torch.randn(8), nan(8))
    assert str(e.value).startswith(f"{__file__}:{line_of('fragment-load-fault')}:")


def test_out_of_bounds_shared_region_copy_faults_at_the_dsl_line():
    @T.prim_func
    def window(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(2) as bx:
            s = T.alloc_shared((8,), "float32")
            T.copy(X[0:4], s[bx * 6:bx * 6 + 4])  # region-copy-fault
            T.copy(s, Y)

    with pytest.raises(KernelFault) as e:
        build(window)(torch.randn(8), nan(8))
    assert str(e.value).startswith(f"{__file__}:{line_of('region-copy-fault')}:")


def test_masked_off_lanes_of_a_runtime_if_do_not_store_to_on_chip_memory():
    N, H = 16, 8

    @T.prim_func
    def half(X: T.Tensor((N,), "float32"), Y: T.Tensor((H,), "float32")):
        with T.Kernel(1):
            f = T.alloc_fragment((H,), "float32")
            for i in T.Parallel(N):
                if i < H:
                    f[i] = X[i] + 1.0
            T.copy(f, Y)

    x, y = torch.randn(N), nan(H)
    build(half)(x, y)
    torch.testing.assert_close(y, x[:H] + 1.0, **EXACT)


def test_masked_off_lanes_of_a_runtime_if_do_not_load_from_on_chip_memory():
    N, H = 16, 8

    @T.prim_func
    def pad(X: T.Tensor((H,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            f = T.alloc_fragment((H,), "float32")
            T.copy(X, f)
            for i in T.Parallel(N):
                if i < H:
                    Y[i] = f[i] * 2.0
                else:
                    Y[i] = 0.0

    x, y = torch.randn(H), nan(N)
    build(pad)(x, y)
    torch.testing.assert_close(y, torch.cat([x * 2.0, torch.zeros(N - H)]), **EXACT)


def test_print_of_a_scalar_writes_its_value_to_stdout(capsys):
    @T.prim_func
    def show(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
        with T.Kernel(1) as bx:
            acc = T.alloc_var("float32", init=2.5)
            T.print(acc, msg="acc-value")
            T.print(X[1] * 2.0, msg="x1-doubled")
            for i in T.Parallel(4):
                Y[i] = X[i]

    x, y = torch.tensor([1.0, 3.25, 0.0, 0.0]), nan(4)
    build(show)(x, y)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[0].startswith("acc-value") and "2.5" in out[0]
    assert out[1].startswith("x1-doubled") and "6.5" in out[1]
    torch.testing.assert_close(y, x, **EXACT)


@tileagent.jit(out_idx=[1])
def _strided_rows(HW):
    R = T.dynamic("R")

    @T.prim_func
    def main(X: T.Tensor((R * HW,), "float32"), Y: T.Tensor((R,), "float32")):
        with T.Kernel(T.ceildiv(R, 32), threads=32) as b:
            for i in T.Parallel(32):
                if b * 32 + i < R:
                    Y[b * 32 + i] = X[(b * 32 + i) * HW]
    return main


def test_a_dim_written_as_a_constant_multiple_binds_its_variable():
    """Played LLM, session 24: an input ``T.Tensor((R * HW,))`` with an output ``(R,)`` failed at call time with a
    bare KeyError: 'R'. R is solved from the input's size; a size that is no multiple says so."""
    x = torch.arange(49 * 5, dtype=torch.float32)
    torch.testing.assert_close(_strided_rows(49)(x), x[::49], **EXACT)
    with pytest.raises(KernelArgumentError) as e:
        _strided_rows(49)(torch.zeros(49 * 5 + 1))
    assert str(e.value) == "parameter 'X' dim 0 is 246, which is not R * 49 for any non-negative integer 'R'"


@tileagent.jit(out_idx=[1])
def _row_means(HW):
    L = T.dynamic("L")

    @T.prim_func
    def main(X: T.Tensor((L,), "float32"), Y: T.Tensor((L // HW,), "float32")):
        with T.Kernel(T.ceildiv(L // HW, 32), threads=32) as b:
            for i in T.Parallel(32):
                if b * 32 + i < L // HW:
                    Y[b * 32 + i] = X[(b * 32 + i) * HW + 1]
    return main


def test_an_output_dim_floor_divided_by_a_constant_is_allocated():
    """Played LLM, session 24: an output ``(L // HW,)`` was refused ("only sums and constant multiples")."""
    x = torch.arange(49 * 3 + 5, dtype=torch.float32)
    torch.testing.assert_close(_row_means(49)(x), x[1:49 * 3:49], **EXACT)


def test_uint32_arithmetic_wraps_as_on_the_gpu():
    """Torch has no CPU arithmetic for uint32 ("add_stub" not implemented): a uint32 load is held as int64 and + - *
    << wrap at 32 bits, so (x * 3 + 1) >> 1 past 2**32 agrees with the GPU's unsigned arithmetic."""
    @T.prim_func
    def main(X: T.Tensor((64,), "uint32"), Y: T.Tensor((64,), "uint32")):
        with T.Kernel(1, threads=64) as b:
            for i in T.Parallel(64):
                Y[i] = (X[i] * 3 + 1) >> 1

    x = (torch.arange(64, dtype=torch.int64) + (1 << 32) - 32).to(torch.uint32)
    y = build(main, out_idx=[1])(x)
    assert y.dtype == torch.uint32
    assert torch.equal(y.to(torch.int64), ((x.to(torch.int64) * 3 + 1) & 0xFFFFFFFF) >> 1)
