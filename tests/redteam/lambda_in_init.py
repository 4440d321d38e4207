"""Cheat: keeps a lambda made in __init__ that computes with torch."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def relu_scale(M, N, factor=2.0, threads=32):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=threads) as row:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                x[j] = T.max(x[j], 0.0) * factor
            T.copy(x, Y[row, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.compute = lambda x: x.relu() * 2.0

    def forward(self, x):
        relu_scale(*x.shape)(x)
        return self.compute(x)
