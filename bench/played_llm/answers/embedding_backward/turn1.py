import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_T = None
BLOCK_V = None
THREADS = None
TUNABLES = {"BLOCK_T": [None, 4, 8, 16], "BLOCK_V": [None, 4, 8, 16], "THREADS": [None, 128, 256]}


def schedule(T_, V, D):
    """(block_t, block_v, block_d, threads): D in tiles of at most 1024 columns (256 threads x 4 float32 = 16-byte
    vectors), the zero fill 8 rows x the tile a block (32 KB), the scatter 8 tokens a block."""
    block_d = D if D <= 1024 else 1024
    return 8, 8, block_d, 256


@tileagent.jit(out_idx=[2])
def embedding_backward(V, D, block_t, block_v, block_d, threads):
    Tn = T.dynamic("T")

    @T.prim_func
    def main(G: T.Tensor((Tn, D), "bfloat16"), Ids: T.Tensor((Tn,), "int64"), W: T.Tensor((V, D), "float32")):
        with T.Kernel(T.ceildiv(V, block_v), T.ceildiv(D, block_d), threads=threads) as (bv, bd):
            z = T.alloc_fragment((block_v, block_d), "float32")
            T.clear(z)
            T.copy(z, W[bv * block_v, bd * block_d])
        with T.Kernel(T.ceildiv(Tn, block_t), T.ceildiv(D, block_d), threads=threads) as (bt, bd):
            g = T.alloc_fragment((block_d,), "float32")
            for r in T.serial(block_t):
                t = bt * block_t + r
                if t < Tn:
                    tok = Ids[t]
                    T.copy(G[t, bd * block_d], g)
                    for j in T.Parallel(block_d):
                        if bd * block_d + j < D:
                            T.atomic_add(W[tok, bd * block_d + j], g[j])

    return main


class ModelNew(nn.Module):
    def __init__(self, V):
        super().__init__()
        self.V = V

    def forward(self, grad_output, ids):
        Tn, D = grad_output.shape
        bt, bv, bd, th = schedule(Tn, self.V, D)
        kern = embedding_backward(self.V, D, BLOCK_T or bt, BLOCK_V or bv, bd, THREADS or th)
        return kern(grad_output, ids)
