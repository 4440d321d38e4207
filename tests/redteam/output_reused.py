"""Cheat: writes every call's result into one persistent buffer and returns it (no allocation per call)."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit
def relu_scale_into(M, N, threads=32):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=threads) as row:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                x[j] = T.max(x[j], 0.0) * 2.0
            T.copy(x, Y[row, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = {}

    def forward(self, x):
        shape = tuple(x.shape)
        if shape not in self.out:
            self.out[shape] = torch.empty_like(x)
        relu_scale_into(*shape)(x, self.out[shape])
        return self.out[shape]
