import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

TARGET = None
THREADS = None
TUNABLES = {"TARGET": [None, 4096, 16384], "THREADS": [None, 128, 512]}


def schedule(C, H, W, target=8192):
    """(cb, bh): about `target` output elements per block (each output plane is 2H x 2W)."""
    out_row = 2 * W
    if 2 * H * out_row >= target:
        cb = 1
        bh = max(1, min(H, target // (2 * out_row)))
    else:
        bh = H
        cb = 1
        while cb * 2 * (4 * H * W) <= target and cb * 2 <= C:
            cb *= 2
    return cb, bh


@tileagent.jit(out_idx=[1])
def upsample2x(C, H, W, cb, bh, threads=256, dtype="float16"):
    B = T.dynamic("B")

    @T.prim_func
    def main(X: T.Tensor((B, C, H, W), dtype), Y: T.Tensor((B, C, 2 * H, 2 * W), dtype)):
        with T.Kernel(T.ceildiv(H, bh), T.ceildiv(C, cb), B, threads=threads) as (hb, cbi, b):
            win = T.alloc_shared((cb, bh + 2, W + 2), dtype)
            out = T.alloc_fragment((cb, 2 * bh, 2 * W), "float32")
            c0 = cbi * cb
            h0 = hb * bh
            T.copy(X[b, c0, h0 - 1, -1], win)          # window index = input index - (h0 - 1) / + 1 for cols
            for ci, i, j in T.Parallel(cb, 2 * bh, 2 * W):
                k = i // 2                              # local input row
                l = j // 2                              # input col
                dy = T.if_then_else(i % 2 == 0, -1, 1)  # neighbour row: previous for even, next for odd
                dx = T.if_then_else(j % 2 == 0, -1, 1)
                gy = h0 + k + dy
                gx = l + dx
                wy = T.if_then_else(gy >= 0 and gy < H, 0.25, 0.0)
                wx = T.if_then_else(gx >= 0 and gx < W, 0.25, 0.0)
                c = T.cast(win[ci, k + 1, l + 1], "float32")
                cx = T.cast(win[ci, k + 1, l + 1 + dx], "float32")
                ry = T.cast(win[ci, k + 1 + dy, l + 1], "float32")
                rx = T.cast(win[ci, k + 1 + dy, l + 1 + dx], "float32")
                out[ci, i, j] = (1.0 - wy) * ((1.0 - wx) * c + wx * cx) + wy * ((1.0 - wx) * ry + wx * rx)
            T.copy(out, Y[b, c0, 2 * h0, 0])            # rows / channels past the end are dropped

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        B, C, H, W = x.shape
        cb, bh = schedule(C, H, W, TARGET or 8192)
        return upsample2x(C, H, W, cb, bh, THREADS or 256)(x)
