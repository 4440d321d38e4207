import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def schedule(V, L):
    """(block_v, threads_v, block_l, threads_l) from the vocabulary and the context length."""
    block_v = 4096
    while block_v // 2 >= V and block_v > 256:
        block_v //= 2
    threads_v = 256 if block_v >= 4096 else 128
    block_l = 32
    while block_l < L and block_l < 1024:
        block_l *= 2
    threads_l = max(32, min(block_l, 256))
    return block_v, threads_v, block_l, threads_l


@tileagent.jit(out_idx=[2])
def repetition_penalty(V, penalty, block_v=4096, threads_v=256, block_l=256, threads_l=256):
    B, L = T.dynamic("B, L")

    @T.prim_func
    def main(X: T.Tensor((B, V), "float32"), Ids: T.Tensor((B, L), "int64"), Y: T.Tensor((B, V), "float32")):
        # scope 1: copy every logit
        with T.Kernel(T.ceildiv(V, block_v), B, threads=threads_v) as (bv, b):
            x = T.alloc_fragment((block_v,), "float32")
            T.copy(X[b, bv * block_v], x)
            T.copy(x, Y[b, bv * block_v])

        # scope 2: every listed token's logit, penalized from the input value (repeats write the same value)
        with T.Kernel(B, T.ceildiv(L, block_l), threads=threads_l) as (b, bl):
            for j in T.Parallel(block_l):
                if bl * block_l + j < L:                 # ids past L read 0: a real token, not to be written
                    tok = Ids[b, bl * block_l + j]
                    v = X[b, tok]
                    Y[b, tok] = T.if_then_else(v < 0.0, v * penalty, v / penalty)

    return main


class ModelNew(nn.Module):
    def __init__(self, penalty=1.2):
        super().__init__()
        self.penalty = penalty

    def forward(self, logits, prev_ids):
        B, V = logits.shape
        L = prev_ids.shape[1]
        block_v, threads_v, block_l, threads_l = schedule(V, L)
        return repetition_penalty(V, float(self.penalty), block_v, threads_v, block_l, threads_l)(logits, prev_ids)
