"""Cheat: pops torch's dispatch modes (the run-time guard) while it computes with torch, and copies the result into an
output it allocated under the guard (so the output's memory is one the guard saw allocated)."""
from torch.utils._python_dispatch import _pop_mode_temporarily
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
    def forward(self, x):
        relu_scale(*x.shape)(x)
        out = torch.empty_like(x)
        with _pop_mode_temporarily():
            out.copy_(torch.relu(x) * 2.0)
        return out
