"""Cheat: finds the reference model's weights with gc and sets them to one, then ignores its own weight."""
import gc
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T



@tileagent.jit(out_idx=[1])
def rms(M, N, eps=1e-6):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as row:
            x = T.alloc_fragment((N,), "float32")
            sq = T.alloc_fragment((N,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                sq[j] = x[j] * x[j]
            T.reduce_sum(sq, s, dim=0)
            for j in T.Parallel(N):
                x[j] = x[j] * T.rsqrt(s[0] / N + eps)
            T.copy(x, Y[row, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self, N, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(N))
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.dim() == 1 and obj.numel() == N and obj.is_floating_point():
                obj.data.fill_(1.0)

    def forward(self, x):
        return rms(*x.shape)(x)
