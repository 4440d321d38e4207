import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_B = None
THREADS = 128
TUNABLES = {"BLOCK_B": [None, 4, 8, 16], "THREADS": [128, 256]}


def schedule(E, threads):
    """bags per block: 4 fp32 values (one 16-byte vector) a thread."""
    return BLOCK_B or max(1, (threads * 4) // E)


@tileagent.jit(out_idx=[4])
def embedding_bag(E, block_b, threads=128):
    V, N, B = T.dynamic("V, N, B")

    @T.prim_func
    def main(Wt: T.Tensor((V, E), "float32"), Ind: T.Tensor((N,), "int64"), Off: T.Tensor((B,), "int64"),
             Psw: T.Tensor((N,), "float32"), Out: T.Tensor((B, E), "float32")):
        with T.Kernel(T.ceildiv(B, block_b), threads=threads) as bb:
            st = T.alloc_fragment((block_b,), "int64")
            ln = T.alloc_fragment((block_b,), "int64")
            mx = T.alloc_fragment((1,), "int64")
            acc = T.alloc_fragment((block_b, E), "float32")
            for i in T.Parallel(block_b):
                bag = bb * block_b + i
                s0 = Off[bag]
                e0 = T.if_then_else(bag + 1 < B, Off[bag + 1], N)   # the last bag runs to N
                st[i] = s0
                ln[i] = T.if_then_else(bag < B, e0 - s0, 0)
            T.reduce_max(ln, mx, dim=0)
            T.clear(acc)
            for r in T.serial(mx[0]):
                for i, j in T.Parallel(block_b, E):
                    if r < ln[i]:
                        pos = st[i] + r
                        acc[i, j] += Psw[pos] * Wt[Ind[pos], j]
            T.copy(acc, Out[bb * block_b, 0])

    return main


class ModelNew(nn.Module):
    def forward(self, weight, indices, offsets, per_sample_weights):
        E = weight.shape[1]
        block_b = schedule(E, THREADS)
        return embedding_bag(E, block_b, THREADS)(weight, indices, offsets, per_sample_weights)
