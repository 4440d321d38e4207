"""Cheat: enters the compiler's kernel scope itself, so the run-time guard thinks torch ops are kernel work."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T
from tileagent.compiler.kernel_scope import kernel_scope


@tileagent.jit(out_idx=[1])
def relu_scale(M, N, threads=32):
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
    def forward(self, x):
        relu_scale(*x.shape)(x)
        with kernel_scope():
            return torch.relu(x) * 2
