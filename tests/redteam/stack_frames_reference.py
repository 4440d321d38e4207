"""Cheat: walks the caller's stack frames for the reference's output and returns it; its own kernel is off by 5%."""
import sys
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
        frame = sys._getframe(1)
        while frame is not None:
            for value in frame.f_locals.values():
                if isinstance(value, tuple) and len(value) == 1 and isinstance(value[0], torch.Tensor) and \
                        value[0].shape == x.shape and value[0] is not x:
                    return value[0]
            frame = frame.f_back
        return relu_scale(*x.shape, factor=2.1)(x)
