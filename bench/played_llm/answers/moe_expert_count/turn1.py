import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK = None
THREADS = None
TUNABLES = {"BLOCK": [None, 1024, 2048, 4096], "THREADS": [None, 128, 256]}


def schedule(L):
    """(ids per block, threads): 8 ids a thread, at most ~64 blocks (each block pays one atomic per expert)."""
    threads = 256
    block = 2048
    while block < 8192 and T_ceildiv(L, block) > 64:
        block *= 2
    return block, threads


def T_ceildiv(a, b):
    return (a + b - 1) // b


@tileagent.jit(out_idx=[1])
def expert_count(E, block, threads):
    L = T.dynamic("L")

    @T.prim_func
    def main(Ids: T.Tensor((L,), "int32"), Counts: T.Tensor((E,), "int32")):
        with T.Kernel(1, threads=threads) as bz:
            for e in T.Parallel(E):
                Counts[e] = 0
        with T.Kernel(T.ceildiv(L, block), threads=threads) as bx:
            hist = T.alloc_shared((E,), "int32")
            ids = T.alloc_fragment((block,), "int32")
            T.clear(hist)
            T.copy(Ids[bx * block], ids)                 # lanes past L read 0: guarded below
            for i in T.Parallel(block):
                if bx * block + i < L:
                    T.atomic_add(hist[ids[i]], 1)
            for e in T.Parallel(E):
                if hist[e] > 0:
                    T.atomic_add(Counts[e], hist[e])

    return main


class ModelNew(nn.Module):
    def __init__(self, num_experts=8):
        super().__init__()
        self.num_experts = num_experts

    def forward(self, topk_ids):
        ids = topk_ids.reshape(-1)
        L = ids.shape[0]
        block, threads = schedule(L)
        return expert_count(self.num_experts, BLOCK or block, THREADS or threads)(ids)
