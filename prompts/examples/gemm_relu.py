"""C = ReLU(A @ B), A (M, K) and B (K, N) fp16, fp32 accumulation on tensor cores: a verified example kernel.

A classic tiled GEMM: each block owns a ``block_M x block_N`` tile of C. Along K it copies an A tile and a B tile
into shared memory and accumulates ``T.gemm`` into a float32 fragment; the ReLU epilogue runs on that fragment
(a T.Parallel loop over the accumulator's own shape uses the accumulator's layout), and the result is stored as fp16.
Ragged M, N and K need no masking: out-of-bounds reads give 0 (adding nothing to the sum) and out-of-bounds stores
are dropped. M is dynamic. ``T.use_swizzle`` orders the blocks in panels so that neighbours share A and B tiles in L2.
"""
import torch

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[2])
def gemm_relu(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128, panel=8,
              dtype="float16"):
    rows = M if M is not None else T.dynamic("M")

    @T.prim_func
    def main(A: T.Tensor((rows, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((rows, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(rows, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")

            T.use_swizzle(panel_size=panel)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc)  # acc += A_s @ B_s; 4 warps split the tile (GemmWarpPolicy.Square)
            for i, j in T.Parallel(block_M, block_N):
                acc[i, j] = T.max(acc[i, j], 0.0)
            T.copy(acc, C[by * block_M, bx * block_N])

    return main


def reference(a, b):
    return torch.relu(a.float() @ b.float()).to(a.dtype)


def check(device="cuda", M=1000, N=768, K=520, **schedule):
    kernel = gemm_relu(None, N, K, **schedule)
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), reference(a, b), rtol=1e-2, atol=1e-2)
    return kernel
