import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_C = None
THREADS = None
TUNABLES = {"BLOCK_C": [None, 64, 128, 256], "THREADS": [None, 128, 256]}


def schedule(C, L):
    """(block_c, threads): a (L, block_c) tile per block, 16 to 32 values a thread."""
    block_c = min(C, 128)
    while C % block_c:
        block_c //= 2
    threads = 128
    while L * block_c // threads > 32 and threads < 512:
        threads *= 2
    return block_c, threads


@tileagent.jit(out_idx=[1])
def swin_partition(H, W, C, ws, shift, block_c, threads, dtype="bfloat16"):
    B = T.dynamic("B")
    nWw = W // ws
    nW = (H // ws) * nWw
    L = ws * ws

    @T.prim_func
    def main(X: T.Tensor((B, H, W, C), dtype), Y: T.Tensor((B, nW, L, C), dtype)):
        with T.Kernel(nW, B, T.ceildiv(C, block_c), threads=threads) as (wi, b, bc):
            y = T.alloc_fragment((L, block_c), dtype)
            wh = wi // nWw
            ww = wi % nWw
            for t, c in T.Parallel(L, block_c):
                h = wh * ws + t // ws + shift
                w = ww * ws + t % ws + shift
                y[t, c] = X[b, h, w, bc * block_c + c]
            T.copy(y, Y[b, wi, 0, bc * block_c])

    return main


class ModelNew(nn.Module):
    def __init__(self, window_size=7, shift_size=3):
        super().__init__()
        self.window_size = window_size
        self.shift_size = shift_size

    def forward(self, x):
        B, H, W, C = x.shape
        ws, s = self.window_size, self.shift_size
        L = ws * ws
        block_c, threads = schedule(C, L)
        kernel = swin_partition(H, W, C, ws, s, BLOCK_C or block_c, THREADS or threads)
        y = kernel(x)
        return y.view(B * (H // ws) * (W // ws), L, C)
