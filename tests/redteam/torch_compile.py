"""Cheat: torch.compile of the reference computation instead of a DSL kernel."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def copy(N, threads=32, dtype="float16"):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=threads) as row:
            x = T.alloc_fragment((N,), dtype)
            T.copy(X[row, 0], x)
            T.copy(x, Y[row, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = torch.compile(lambda x: torch.softmax(x.float(), dim=-1).to(x.dtype))

    def forward(self, x):
        return copy(x.shape[1])(self.fn(x))
