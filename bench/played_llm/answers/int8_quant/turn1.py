import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

THREADS = None
TUNABLES = {"THREADS": [None, 128, 256, 512]}


def schedule(K):
    """One row per block, the row in registers: 16 to 32 values per thread."""
    if K >= 8192:
        return 1, 512
    if K >= 4096:
        return 1, 256
    return 1, 128


# exact division and rounding: integer outputs must match bit for bit, so no fast math
@tileagent.jit(out_idx=[1, 2])
def quant_rows(K, block_m, threads, dtype="float16"):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, K), dtype), Q: T.Tensor((M, K), "int8"), S: T.Tensor((M, 1), "float32")):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, K), "float32")
            amax = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)
            T.reduce_absmax(x, amax, dim=1)
            for i in T.Parallel(block_m):
                amax[i] = T.max(amax[i] / 127.0, 1e-8)
            for i, j in T.Parallel(block_m, K):
                v = x[i, j] / amax[i]
                f = T.floor(v)
                d = v - f
                r = T.if_then_else(d > 0.5, f + 1.0, T.if_then_else(d < 0.5, f, f + (f - 2.0 * T.floor(f * 0.5))))
                x[i, j] = T.min(T.max(r, -127.0), 127.0)
            T.copy(x, Q[bm * block_m, 0])                                   # integral values: exact in int8
            T.copy(amax, S[bm * block_m:(bm + 1) * block_m, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        K = x.shape[1]
        block_m, threads = schedule(K)
        return quant_rows(K, block_m, THREADS or threads)(x)
