import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_N = None
BLOCK_K = None
NUM_STAGES = None
TUNABLES = {"BLOCK_N": [None, 128, 64, 256], "BLOCK_K": [None, 128, 64], "NUM_STAGES": [None, 3, 4, 2]}


def schedule(M, N, K):
    """(block_M, block_N, block_K, num_stages, threads) from the shapes."""
    if M <= 64:
        return 64, 128, 128, 4, 128
    return 128, 128, 128, 3, 128


@tileagent.jit(out_idx=[5])
def w8a8_gemm(N, K, block_M=128, block_N=128, block_K=128, num_stages=3, threads=128, panel=8):
    M = T.dynamic("M")

    @T.prim_func
    def main(A: T.Tensor((M, K), "int8"), A_scale: T.Tensor((M,), "float32"),
             B: T.Tensor((N, K), "int8"), B_scale: T.Tensor((N,), "float32"),
             Bias: T.Tensor((N,), "bfloat16"), C: T.Tensor((M, N), "bfloat16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "int8")
            B_s = T.alloc_shared((block_N, block_K), "int8")
            acc = T.alloc_fragment((block_M, block_N), "int32")
            y = T.alloc_fragment((block_M, block_N), "float32")
            sa = T.alloc_fragment((block_M,), "float32")
            sb = T.alloc_fragment((block_N,), "float32")
            bb = T.alloc_fragment((block_N,), "float32")

            T.use_swizzle(panel_size=panel)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)   # int8 x int8 -> int32, exact
            T.copy(A_scale[by * block_M], sa)
            T.copy(B_scale[bx * block_N], sb)
            T.copy(Bias[bx * block_N], bb)
            for i, j in T.Parallel(block_M, block_N):
                y[i, j] = sa[i] * (sb[j] * T.cast(acc[i, j], "float32")) + bb[j]
            T.copy(y, C[by * block_M, bx * block_N])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, a_scale, b, b_scale, bias):
        M, K = a.shape
        N = b.shape[0]
        block_M, block_N, block_K, num_stages, threads = schedule(M, N, K)
        kernel = w8a8_gemm(N, K, block_M=block_M, block_N=BLOCK_N or block_N, block_K=BLOCK_K or block_K,
                           num_stages=NUM_STAGES or num_stages, threads=threads)
        return kernel(a, a_scale.view(M), b, b_scale, bias)
