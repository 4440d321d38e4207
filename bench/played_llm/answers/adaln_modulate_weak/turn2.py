import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def schedule(C):
    threads = 256 if C >= 4096 else 128
    block_m = 1
    while block_m * 2 * C <= threads * 32 and block_m < 64:
        block_m *= 2
    return block_m, threads


@tileagent.jit(out_idx=[3], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def adaln_modulate(C, block_m, threads, eps, dtype="bfloat16"):
    B, S = T.dynamic("B, S")

    @T.prim_func
    def main(X: T.Tensor((B, S, C), dtype), Shift: T.Tensor((B, C), dtype), Scale: T.Tensor((B, C), dtype),
             Y: T.Tensor((B, S, C), dtype)):
        with T.Kernel(T.ceildiv(S, block_m), B, threads=threads) as (bt, b):
            x = T.alloc_fragment((block_m, C), "float32")
            d = T.alloc_fragment((block_m, C), "float32")
            sh = T.alloc_fragment((C,), "float32")
            sc = T.alloc_fragment((C,), "float32")
            mean = T.alloc_fragment((block_m,), "float32")
            rstd = T.alloc_fragment((block_m,), "float32")

            T.copy(X[b, bt * block_m, 0], x)
            T.copy(Shift[b, 0], sh)
            T.copy(Scale[b, 0], sc)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(block_m):
                mean[i] = mean[i] * (1.0 / C)
            for i, j in T.Parallel(block_m, C):
                d[i, j] = (x[i, j] - mean[i]) * (x[i, j] - mean[i])
            T.reduce_sum(d, rstd, dim=1)
            for i in T.Parallel(block_m):
                rstd[i] = T.rsqrt(rstd[i] * (1.0 / C) + eps)
            for i, j in T.Parallel(block_m, C):
                x[i, j] = (x[i, j] - mean[i]) * rstd[i] * (1.0 + sc[j]) + sh[j]
            T.copy(x, Y[b, bt * block_m, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, shift, scale):
        C = x.shape[2]
        block_m, threads = schedule(C)
        return adaln_modulate(C, block_m, threads, float(self.eps))(x, shift, scale)
