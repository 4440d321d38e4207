"""Honest: the out-projection as one kernel, fp32 accumulator through the bias and residual epilogue (more accurate
than the reference, which rounds the GEMM to fp16 first; issue 18, point 9)."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[4])
def out_proj(M, N, K, accum, block_M=16, block_N=32):
    @T.prim_func
    def main(X: T.Tensor((M, K), "float16"), W: T.Tensor((N, K), "float16"), B: T.Tensor((N,), "float32"),
             R: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            xs = T.alloc_shared((block_M, K), "float16")
            ws = T.alloc_shared((block_N, K), "float16")
            acc = T.alloc_fragment((block_M, block_N), accum)
            T.copy(X[by * block_M, 0], xs)
            T.copy(W[bx * block_N, 0], ws)
            T.clear(acc)
            for k in T.serial(K):
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] = acc[i, j] + T.cast(xs[i, k], accum) * T.cast(ws[j, k], accum)
            for i, j in T.Parallel(block_M, block_N):
                Y[by * block_M + i, bx * block_N + j] = T.cast(acc[i, j], "float32") + B[bx * block_N + j] + \
                    R[by * block_M + i, bx * block_N + j]

    return main


class ModelNew(nn.Module):
    def __init__(self, K, N):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(N, K, dtype=torch.float16) / 4)
        self.bias = nn.Parameter(torch.randn(N))

    def forward(self, x, residual):
        M, K = x.shape
        return out_proj(M, self.weight.shape[0], K, "float32")(x, self.weight.detach(), self.bias.detach(), residual)
