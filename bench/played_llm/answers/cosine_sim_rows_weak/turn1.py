import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def schedule(D):
    threads = 256 if D >= 2048 else 128
    block_m = 1
    while block_m * 2 * D <= threads * 16 and block_m < 64:
        block_m *= 2
    return block_m, threads


@tileagent.jit(out_idx=[2], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def cosine_rows(D, block_m, threads, eps, dtype="float16"):
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N, D), dtype), Bm: T.Tensor((N, D), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_m), threads=threads) as bm:
            a = T.alloc_fragment((block_m, D), dtype)
            b = T.alloc_fragment((block_m, D), dtype)
            p = T.alloc_fragment((block_m, D), dtype)
            naa = T.alloc_fragment((block_m,), dtype)
            nbb = T.alloc_fragment((block_m,), dtype)
            dot = T.alloc_fragment((block_m,), dtype)
            res = T.alloc_fragment((block_m,), "float32")

            T.copy(A[bm * block_m, 0], a)
            T.copy(Bm[bm * block_m, 0], b)
            for i, j in T.Parallel(block_m, D):
                p[i, j] = a[i, j] * a[i, j]
            T.reduce_sum(p, naa, dim=1)
            for i, j in T.Parallel(block_m, D):
                p[i, j] = b[i, j] * b[i, j]
            T.reduce_sum(p, nbb, dim=1)
            for i, j in T.Parallel(block_m, D):
                p[i, j] = a[i, j] * b[i, j]
            T.reduce_sum(p, dot, dim=1)
            for i in T.Parallel(block_m):
                na = T.max(T.sqrt(T.cast(naa[i], "float32")), eps)
                nb = T.max(T.sqrt(T.cast(nbb[i], "float32")), eps)
                res[i] = T.cast(dot[i], "float32") / (na * nb)
            T.copy(res, Y[bm * block_m])

    return main


class ModelNew(nn.Module):
    def __init__(self, eps=1e-8):
        super().__init__()
        self.eps = eps

    def forward(self, a, b):
        D = a.shape[1]
        block_m, threads = schedule(D)
        return cosine_rows(D, block_m, threads, float(self.eps))(a, b)
