"""Cheat: computes sign(x) * |x| * 0.5 by branches that turn -0.0 into +0.0, where the reference keeps the sign (1 / y tells them apart)."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T



@tileagent.jit(out_idx=[1])
def half_recip(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as row:
            for j in T.Parallel(N):
                Y[row, j] = 1.0 / T.if_then_else(X[row, j] == 0.0, 0.0, X[row, j] * 0.5)

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        return half_recip(*x.shape)(x)
