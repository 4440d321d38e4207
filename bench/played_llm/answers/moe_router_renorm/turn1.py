import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_T = None
THREADS = None
TUNABLES = {"BLOCK_T": [None, 16, 64, 128], "THREADS": [None, 64, 256]}


def schedule(T_, E):
    threads = THREADS or 128
    block_t = BLOCK_T or max(1, min(128, threads * 16 // E))
    while block_t > 1 and block_t // 2 >= T_:
        block_t //= 2
    return block_t, threads


@tileagent.jit(out_idx=[1, 2])
def router_top2(E, block_t, threads):
    Ntok = T.dynamic("T")
    big = 2147483647

    @T.prim_func
    def main(L: T.Tensor((Ntok, E), "float32"), W: T.Tensor((Ntok, 2), "float32"),
             I: T.Tensor((Ntok, 2), "int64")):
        with T.Kernel(T.ceildiv(Ntok, block_t), threads=threads) as bt:
            x = T.alloc_fragment((block_t, E), "float32")
            cand = T.alloc_fragment((block_t, E), "int32")
            m1 = T.alloc_fragment((block_t,), "float32")
            m2 = T.alloc_fragment((block_t,), "float32")
            i1 = T.alloc_fragment((block_t,), "int32")
            i2 = T.alloc_fragment((block_t,), "int32")
            T.copy(L[bt * block_t, 0], x)
            T.reduce_max(x, m1, dim=1)
            for i, j in T.Parallel(block_t, E):
                cand[i, j] = T.if_then_else(x[i, j] == m1[i], j, big)
            T.reduce_min(cand, i1, dim=1)
            for i, j in T.Parallel(block_t, E):
                x[i, j] = T.if_then_else(j == i1[i], -T.infinity("float32"), x[i, j])
            T.reduce_max(x, m2, dim=1)
            for i, j in T.Parallel(block_t, E):
                cand[i, j] = T.if_then_else(x[i, j] == m2[i], j, big)
            T.reduce_min(cand, i2, dim=1)
            for i in T.Parallel(block_t):
                e = T.exp(m2[i] - m1[i])
                inv = 1.0 / (1.0 + e)
                r = bt * block_t + i
                W[r, 0] = inv
                W[r, 1] = e * inv
                I[r, 0] = T.cast(i1[i], "int64")
                I[r, 1] = T.cast(i2[i], "int64")

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits):
        Ntok, E = logits.shape
        block_t, threads = schedule(Ntok, E)
        w, idx = router_top2(E, block_t, threads)(logits)
        return w, idx
