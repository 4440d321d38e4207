import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def schedule(C):
    threads = 256 if C >= 2048 else 128
    block_m = 1
    while block_m * 2 * C <= threads * 32 and block_m < 16:
        block_m *= 2
    return block_m, threads


@tileagent.jit(out_idx=[3, 4, 5])
def add_rmsnorm_fp8(C, block_m, threads, eps, dtype="bfloat16"):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, C), dtype), R: T.Tensor((M, C), dtype), W: T.Tensor((C,), dtype),
             Q: T.Tensor((M, C), "float8_e4m3fn"), S: T.Tensor((M, 1), "float32"), H: T.Tensor((M, C), dtype)):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, C), "float32")
            r = T.alloc_fragment((block_m, C), "float32")
            g = T.alloc_fragment((C,), "float32")
            ss = T.alloc_fragment((block_m,), "float32")
            amax = T.alloc_fragment((block_m,), "float32")
            inv = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)
            T.copy(R[bm * block_m, 0], r)
            T.copy(W, g)
            for i, j in T.Parallel(block_m, C):
                x[i, j] = T.cast(T.cast(x[i, j] + r[i, j], dtype), "float32")
                r[i, j] = x[i, j] * x[i, j]
            T.copy(x, H[bm * block_m, 0])
            T.reduce_sum(r, ss, dim=1)
            for i in T.Parallel(block_m):
                ss[i] = T.rsqrt(ss[i] / C + eps)
            for i, j in T.Parallel(block_m, C):
                x[i, j] = x[i, j] * ss[i] * g[j]
            T.reduce_absmax(x, amax, dim=1)
            for i in T.Parallel(block_m):
                m = T.max(amax[i], 1e-12)
                inv[i] = 448.0 / m
                amax[i] = m / 448.0
            for i, j in T.Parallel(block_m, C):
                x[i, j] = T.clamp(x[i, j] * inv[i], -448.0, 448.0)
            T.copy(x, Q[bm * block_m, 0])
            T.copy(amax, S[bm * block_m:(bm + 1) * block_m, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self, C, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(C)).to(torch.bfloat16))

    def forward(self, x, residual):
        M, C = x.shape
        block_m, threads = schedule(C)
        return add_rmsnorm_fp8(C, block_m, threads, self.eps)(x, residual, self.weight)
