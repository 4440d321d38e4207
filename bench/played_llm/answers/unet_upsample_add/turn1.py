import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_M = None
THREADS = None
TUNABLES = {"BLOCK_M": [None, 8, 16, 32, 64], "THREADS": [None, 128, 256]}

LOG2E = 1.4426950408889634


def schedule(W):
    """(input rows per block, threads): the output tile (2 block_m, 2 W) holds about 4096 values, 32 a thread."""
    threads = 128
    block_m = max(1, 4096 // (4 * W))
    return block_m, threads


@tileagent.jit(out_idx=[2], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def upsample_add_silu(W, block_m, threads, dtype="float16"):
    R = T.dynamic("R")          # input rows: B * C * H (an output row r reads input row r // 2)
    W2 = 2 * W

    @T.prim_func
    def main(X: T.Tensor((R, W), dtype), Skip: T.Tensor((2 * R, W2), dtype), Y: T.Tensor((2 * R, W2), dtype)):
        with T.Kernel(T.ceildiv(R, block_m), threads=threads) as bm:
            xs = T.alloc_shared((block_m, W), "float32")
            s = T.alloc_fragment((2 * block_m, W2), "float32")
            T.copy(X[bm * block_m, 0], xs)
            T.copy(Skip[2 * bm * block_m, 0], s)
            for i, j in T.Parallel(2 * block_m, W2):
                v = xs[i // 2, j // 2] + s[i, j]
                s[i, j] = v / (1.0 + T.exp2(v * -LOG2E))
            T.copy(s, Y[2 * bm * block_m, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, skip):
        B, C, H, W = x.shape
        R = B * C * H
        block_m, threads = schedule(W)
        y = upsample_add_silu(W, BLOCK_M or block_m, THREADS or threads)(x.view(R, W), skip.view(2 * R, 2 * W))
        return y.view(B, C, 2 * H, 2 * W)
