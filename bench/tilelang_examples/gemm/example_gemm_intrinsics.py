# From TileLang (https://github.com/tile-ai/tilelang), examples/gemm/example_gemm_intrinsics.py at commit a35008a.
# MIT License, Copyright (c) Tile-AI (bench/tilelang_examples/LICENSE). Unmodified below this header.
from tilelang import tvm as tvm
from tvm import DataType
import tilelang
import tilelang.language as T
from tilelang.cuda.intrinsics import get_swizzle_layout
from tilelang.cuda.intrinsics.macro.mma_macro_generator import (
    TensorCoreIntrinEmitter,
)


def make_swizzle_layout(shared_buf):
    dtype = shared_buf.dtype
    shape = shared_buf.shape

    can_swizzle = shape[-1] * DataType(dtype).bits == 512
    if not can_swizzle:
        return T.Layout(shape, lambda *args: args)

    def transform_func(i, j):
        return list(get_swizzle_layout(i, j, shape[-1], dtype))

    return T.Layout(shape, transform_func)


@tilelang.jit
def tl_matmul(
    A,
    B,
    in_dtype,
    out_dtype,
    accum_dtype,
):
    assert in_dtype in [
        T.float16,
        T.int8,
    ], "Currently only float16 and int8 are supported"
    assert out_dtype in [
        T.float16,
        T.float32,
        T.int32,
    ], "Currently only float16, float32 and int32 are supported"

    micro_size_x = micro_size_y = micro_size_k = 16

    if out_dtype == T.int32:
        micro_size_k = 32

    # This is a debug config
    block_row_warps = 2
    block_col_warps = 2
    warp_row_tiles = 64
    warp_col_tiles = 64
    # chunk = 32 if in_dtype == T.float16 else 64
    chunk = 32
    shared_scope = "shared.dyn"

    # Pipeline Stage
    stage = 2

    block_M = block_row_warps * warp_row_tiles
    block_N = block_col_warps * warp_col_tiles
    block_K = chunk

    M, N, K = T.const("M, N, K")
    A_shape = (M, K)
    B_shape = (N, K)
    A_shared_shape = (block_M, block_K)
    B_shared_shape = (block_N, block_K)
    C_shared_shape = (
        block_M // micro_size_x,
        block_N // micro_size_y,
        micro_size_x,
        micro_size_y,
    )

    A: T.Tensor(A_shape, in_dtype)
    B: T.Tensor(B_shape, in_dtype)
    C = T.empty((M, N), out_dtype)

    warp_size = 32
    threads = warp_size * (block_row_warps * block_col_warps)
    local_size_a = (micro_size_x * micro_size_k) // warp_size
    local_size_b = (micro_size_y * micro_size_k) // warp_size
    local_size_c = (micro_size_x * micro_size_y) // warp_size
    warp_rows = warp_row_tiles // micro_size_x
    warp_cols = warp_col_tiles // micro_size_y

    # MMA Wrapper to Auto Generate Code for MMA
    mma_emitter = TensorCoreIntrinEmitter(
        a_dtype=in_dtype,
        b_dtype=in_dtype,
        accum_dtype=accum_dtype,
        a_transposed=False,
        b_transposed=True,
        block_row_warps=block_row_warps,
        block_col_warps=block_col_warps,
        warp_row_tiles=warp_row_tiles,
        warp_col_tiles=warp_col_tiles,
        chunk=chunk,
    )

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_shared = T.alloc_shared(A_shared_shape, in_dtype, scope=shared_scope)
        B_shared = T.alloc_shared(B_shared_shape, in_dtype, scope=shared_scope)
        C_shared = T.alloc_shared(C_shared_shape, out_dtype, scope=shared_scope)
        A_local = T.alloc_local((warp_rows * local_size_a), in_dtype)
        B_local = T.alloc_local((warp_cols * local_size_b), in_dtype)
        C_local = T.alloc_local((warp_rows * warp_cols * local_size_c), accum_dtype)

        T.annotate_layout(
            {
                A_shared: make_swizzle_layout(A_shared),
                B_shared: make_swizzle_layout(B_shared),
            }
        )

        # Improve L2 Cache
        T.use_swizzle(panel_size=10)

        T.clear(C_local)

        for ko in T.Pipelined((K // block_K), num_stages=stage):
            # Load A into shared memory
            for i, k in T.Parallel(block_M, block_K):
                A_shared[i, k] = A[by * block_M + i, ko * block_K + k]

            # Load B into shared memory
            for j, k in T.Parallel(block_N, block_K):
                B_shared[j, k] = B[bx * block_N + j, ko * block_K + k]

            for ki in T.serial(0, (block_K // micro_size_k)):
                # Load A into fragment
                mma_emitter.ldmatrix_a(A_local, A_shared, ki)

                # Load B into fragment
                mma_emitter.ldmatrix_b(B_local, B_shared, ki)

                # Perform Matrix Multiplication
                mma_emitter.mma(A_local, B_local, C_local)

        # Perform STMatrix
        mma_emitter.stmatrix(C_local, C_shared)

        # Store shared into global
        for i, j in T.Parallel(block_M, block_N):
            C[by * block_M + i, bx * block_N + j] = C_shared[
                i // micro_size_x,
                j // micro_size_y,
                i % micro_size_x,
                j % micro_size_y,
            ]

    return C


def ref_program(A, B):
    return A @ B.T


def main(M=4096, N=4096, K=4096):
    in_dtype, out_dtype, accum_dtype = T.float16, T.float16, T.float32
    kernel = tl_matmul.compile(M=M, N=N, K=K, in_dtype=in_dtype, out_dtype=out_dtype, accum_dtype=accum_dtype)
    src_code = kernel.get_kernel_source()
    # src_code is the generated cuda source
    assert src_code is not None

    profiler = kernel.get_profiler()

    latency = profiler.do_bench(profiler.func, warmup=25)

    print(latency)

    # Ensure that the latency is not None
    assert latency is not None

    profiler.assert_allclose(ref_program, atol=1e-2, rtol=1e-2)


def run_regression_perf(M=4096, N=4096, K=4096):
    in_dtype, out_dtype, accum_dtype = "float16", "float16", "float32"
    kernel = tl_matmul.compile(M=M, N=N, K=K, in_dtype=in_dtype, out_dtype=out_dtype, accum_dtype=accum_dtype)
    profiler = kernel.get_profiler()
    return profiler.do_bench(backend="cupti")


if __name__ == "__main__":
    main(M=4096, N=4096, K=4096)
