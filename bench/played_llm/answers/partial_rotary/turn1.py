import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_S = None
THREADS = None
TUNABLES = {"BLOCK_S": [None, 1, 2, 4], "THREADS": [None, 128, 256]}


def schedule(H, D):
    """(block_s, threads): about 8K elements (16 KB of bf16) a block, 16-32 values a thread."""
    block_s = 1
    while block_s * 2 * H * D <= 8192:
        block_s *= 2
    return block_s, 256


@tileagent.jit(out_idx=[3])
def partial_rope(H, D, R, block_s, threads, dtype="bfloat16"):
    B, S = T.dynamic("B, S")
    R2 = R // 2

    @T.prim_func
    def main(Q: T.Tensor((B, S, H, D), dtype), Cos: T.Tensor((S, R), "float32"), Sin: T.Tensor((S, R), "float32"),
             Y: T.Tensor((B, S, H, D), dtype)):
        with T.Kernel(T.ceildiv(S, block_s), B, threads=threads) as (bs, b):
            Q_s = T.alloc_shared((block_s, H, D), dtype)
            C_s = T.alloc_shared((block_s, R), "float32")
            S_s = T.alloc_shared((block_s, R), "float32")
            o = T.alloc_fragment((block_s, H, D), "float32")
            T.copy(Q[b, bs * block_s, 0, 0], Q_s)
            T.copy(Cos[bs * block_s, 0], C_s)
            T.copy(Sin[bs * block_s, 0], S_s)
            for i, h, j in T.Parallel(block_s, H, D):
                x = T.cast(Q_s[i, h, j], "float32")
                p = T.if_then_else(j < R2, j + R2, j - R2)
                xp = T.cast(Q_s[i, h, p], "float32")
                jc = T.min(j, R - 1)
                rot = T.if_then_else(j < R2, -xp, xp)
                o[i, h, j] = T.if_then_else(j < R, x * C_s[i, jc] + rot * S_s[i, jc], x)
            T.copy(o, Y[b, bs * block_s, 0, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, cos, sin):
        B, S, H, D = q.shape
        R = cos.shape[-1]
        bs, th = schedule(H, D)
        return partial_rope(H, D, R, BLOCK_S or bs, THREADS or th)(q, cos, sin)
