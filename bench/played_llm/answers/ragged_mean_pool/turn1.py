import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_D = None
BLOCK_S = None
TUNABLES = {"BLOCK_D": [None, 64, 128, 256], "BLOCK_S": [None, 32, 64, 128]}


def schedule(B, D):
    """(block_d, block_s, threads): a (block_s, block_d) tile of 4096 values on 128 threads; enough blocks."""
    block_d = 128
    while block_d > 64 and B * (D // block_d) < 132 * 4:
        block_d //= 2
    return block_d, 4096 // block_d, 128


@tileagent.jit(out_idx=[2])
def ragged_mean(D, block_d, block_s, threads, dtype="bfloat16"):
    B, S = T.dynamic("B, S")

    @T.prim_func
    def main(X: T.Tensor((B, S, D), dtype), Lengths: T.Tensor((B,), "int64"), Y: T.Tensor((B, D), "float32")):
        with T.Kernel(T.ceildiv(D, block_d), B, threads=threads) as (bd, b):
            xs = T.alloc_shared((block_s, block_d), dtype)
            acc = T.alloc_fragment((block_s, block_d), "float32")
            tot = T.alloc_fragment((block_d,), "float32")
            L = Lengths[b]
            T.clear(acc)
            for t in T.Pipelined(T.ceildiv(L, block_s), num_stages=2):
                T.copy(X[b, t * block_s, bd * block_d], xs)
                for i, j in T.Parallel(block_s, block_d):
                    acc[i, j] += T.if_then_else(t * block_s + i < L, T.cast(xs[i, j], "float32"), 0.0)
            T.reduce_sum(acc, tot, dim=0)
            for j in T.Parallel(block_d):
                tot[j] = tot[j] / T.cast(L, "float32")
            T.copy(tot, Y[b, bd * block_d])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, lengths):
        B, S, D = x.shape
        block_d, block_s, threads = schedule(B, D)
        if BLOCK_D:
            block_d = BLOCK_D
            block_s = BLOCK_S or max(8, 4096 // block_d)
        elif BLOCK_S:
            block_s = BLOCK_S
        return ragged_mean(D, block_d, block_s, threads)(x, lengths)
