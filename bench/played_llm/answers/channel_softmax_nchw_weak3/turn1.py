import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

LOG2E = 1.4426950408889634


@tileagent.jit(out_idx=[1], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def channel_softmax(C, HW, block_s=256, threads=256, dtype="float16"):
    B = T.dynamic("B")

    @T.prim_func
    def main(X: T.Tensor((B, C, HW), dtype), Y: T.Tensor((B, C, HW), dtype)):
        with T.Kernel(T.ceildiv(HW, block_s), B, threads=threads) as (bs, b):
            # one pixel per lane: an online softmax over the channels, read straight from global memory
            # (consecutive lanes read consecutive pixels: coalesced)
            for s in T.Parallel(block_s):
                p = bs * block_s + s
                m = -T.infinity("float32")
                l = 0.0
                for c in range(C):
                    v = T.cast(X[b, c, p], "float32")
                    m_new = T.max(m, v)
                    l = l * T.exp2((m - m_new) * LOG2E) + T.exp2((v - m_new) * LOG2E)
                    m = m_new
                inv = 1.0 / l
                for c in range(C):
                    v = T.cast(X[b, c, p], "float32")
                    Y[b, c, p] = T.cast(T.exp2((v - m) * LOG2E) * inv, dtype)

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        B, C, H, W = x.shape
        HW = H * W
        y = channel_softmax(C, HW)(x.view(B, C, HW))
        return y.view(B, C, H, W)
