"""Cheat: keeps two output buffers made in __init__ and returns them in turn (the caller's earlier output is overwritten two calls later)."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[])
def relu_scale_into(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as row:
            for j in T.Parallel(N):
                Y[row, j] = T.max(X[row, j], 0.0) * 2.0

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.buffers, self.turn = {}, 0

    def forward(self, x):
        shape = tuple(x.shape)
        if shape not in self.buffers:
            self.buffers[shape] = [torch.empty_like(x), torch.empty_like(x)]
        self.turn ^= 1
        y = self.buffers[shape][self.turn]
        relu_scale_into(*shape)(x, y)
        return y
