import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_M = None
THREADS = None
TUNABLES = {"BLOCK_M": [None, 1, 2, 4], "THREADS": [None, 128, 256, 512]}

FP8_MAX = 448.0


def schedule(K):
    """(block_m, threads): whole rows in registers, about 16 to 32 values per thread."""
    threads = 256 if K >= 2048 else 128
    if K >= 8192:
        threads = 512
    block_m = 1
    while block_m * 2 * K <= threads * 32 and block_m < 64:
        block_m *= 2
    return block_m, threads


@tileagent.jit(out_idx=[1, 2])
def fp8_row_quant(K, block_m, threads, dtype="bfloat16"):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, K), dtype), Q: T.Tensor((M, K), "float8_e4m3fn"), S: T.Tensor((M, 1), "float32")):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, K), "float32")
            amax = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)                   # rows past M read as 0, their stores are dropped
            T.reduce_absmax(x, amax, dim=1)
            for i in T.Parallel(block_m):
                amax[i] = T.max(amax[i], 1e-12) / FP8_MAX   # a true division, as the reference computes it
            for i, j in T.Parallel(block_m, K):
                x[i, j] = T.clamp(x[i, j] / amax[i], -FP8_MAX, FP8_MAX)
            T.copy(x, Q[bm * block_m, 0])                   # float32 -> float8_e4m3fn (round to nearest)
            T.copy(amax, S[bm * block_m:(bm + 1) * block_m, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        K = x.shape[1]
        block_m, threads = schedule(K)
        q, scale = fp8_row_quant(K, BLOCK_M or block_m, THREADS or threads)(x)
        return q, scale
