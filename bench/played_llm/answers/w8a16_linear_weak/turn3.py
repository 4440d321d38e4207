import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_N = None
BLOCK_K = None
TUNABLES = {"BLOCK_N": [None, 64, 128], "BLOCK_K": [None, 64, 128]}


def schedule(M, N, K):
    """(block_M, block_N, block_K, num_stages, threads) from the shapes forward gets."""
    if M <= 16:
        return 16, 64, 128, 3, 128       # decode-like: one 16-row tile, many column blocks
    if M <= 64:
        return 64, 64, 64, 3, 128
    return 128, 128, 64, 3, 128


@tileagent.jit(out_idx=[4])
def w8a16_linear(N, K, block_M, block_N, block_K, num_stages, threads, panel=8):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, K), "float16"), W: T.Tensor((N, K), "int8"), Scale: T.Tensor((N,), "float16"),
             Bias: T.Tensor((N,), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            Wq_s = T.alloc_shared((block_N, block_K), "int8")
            B_s = T.alloc_shared((block_N, block_K), "float16")
            wf = T.alloc_fragment((block_N, block_K), "float16")
            sc = T.alloc_fragment((block_N,), "float16")
            bf = T.alloc_fragment((block_N,), "float32")
            acc = T.alloc_fragment((block_M, block_N), "float32")

            T.use_swizzle(panel_size=panel)
            T.copy(Scale[bx * block_N], sc)
            T.copy(Bias[bx * block_N], bf)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(X[by * block_M, k * block_K], A_s)
                T.copy(W[bx * block_N, k * block_K], Wq_s)
                T.copy(Wq_s, wf)                                  # int8 -> fp16 (exact)
                for i, j in T.Parallel(block_N, block_K):
                    wf[i, j] = wf[i, j] * sc[i]                    # fp16(w * scale), the reference's dequantized weight
                T.copy(wf, B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            for i, j in T.Parallel(block_M, block_N):
                acc[i, j] = acc[i, j] + bf[j]
            T.copy(acc, Y[by * block_M, bx * block_N])

    return main


class ModelNew(nn.Module):
    def forward(self, x, weight, scale, bias):
        M, K = x.shape
        N = weight.shape[0]
        block_M, block_N, block_K, stages, threads = schedule(M, N, K)
        kern = w8a16_linear(N, K, block_M, BLOCK_N or block_N, BLOCK_K or block_K, stages, threads)
        return kern(x, weight, scale, bias)
