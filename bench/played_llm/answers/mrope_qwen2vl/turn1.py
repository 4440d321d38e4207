import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_T = None
THREADS = None
TUNABLES = {"BLOCK_T": [None, 1, 2, 4], "THREADS": [None, 128, 256]}


def schedule(Hq, half):
    """(block_t, threads): one thread per 8-value run of each half-row, 256+ runs a block."""
    runs_per_tok = Hq * (half // 8)
    block_t = 1
    while block_t * runs_per_tok < 256 and block_t < 16:
        block_t *= 2
    runs = block_t * runs_per_tok
    threads = runs if runs <= 512 and runs % 32 == 0 else 256
    return block_t, threads


@tileagent.jit(out_idx=[4])
def mrope(Hq, D, sec0, sec1, block_t, threads, dtype="bfloat16"):
    NT, P = T.dynamic("NT, P")
    half = D // 2

    @T.prim_func
    def main(Q: T.Tensor((NT, Hq, D), dtype), Pos: T.Tensor((3, NT), "int64"),
             Cos: T.Tensor((P, half), "float32"), Sin: T.Tensor((P, half), "float32"),
             O: T.Tensor((NT, Hq, D), dtype)):
        with T.Kernel(T.ceildiv(NT, block_t), threads=threads) as bt:
            x1 = T.alloc_fragment((block_t, Hq, half), "float32")
            x2 = T.alloc_fragment((block_t, Hq, half), "float32")
            c = T.alloc_fragment((block_t, half), "float32")
            s = T.alloc_fragment((block_t, half), "float32")
            T.copy(Q[bt * block_t, 0, 0], x1)
            T.copy(Q[bt * block_t, 0, half], x2)
            for i, j in T.Parallel(block_t, half):
                tok = bt * block_t + i
                sec = T.if_then_else(j < sec0, 0, T.if_then_else(j < sec1, 1, 2))
                p = Pos[sec, tok]                       # tokens past NT read 0: a valid row, never stored
                c[i, j] = Cos[p, j]
                s[i, j] = Sin[p, j]
            for i, h, j in T.Parallel(block_t, Hq, half):
                a = x1[i, h, j]
                b = x2[i, h, j]
                x1[i, h, j] = a * c[i, j] - b * s[i, j]
                x2[i, h, j] = b * c[i, j] + a * s[i, j]
            T.copy(x1, O[bt * block_t, 0, 0])
            T.copy(x2, O[bt * block_t, 0, half])

    return main


class ModelNew(nn.Module):
    def __init__(self, mrope_section=(16, 24, 24)):
        super().__init__()
        self.mrope_section = list(mrope_section)

    def forward(self, q, positions, cos_cache, sin_cache):
        n_tok, Hq, D = q.shape
        sec0 = self.mrope_section[0]
        sec1 = sec0 + self.mrope_section[1]
        block_t, threads = schedule(Hq, D // 2)
        kern = mrope(Hq, D, sec0, sec1, BLOCK_T or block_t, THREADS or threads)
        return kern(q, positions, cos_cache, sin_cache)
