"""Run-time only (static off): numpy computes RMSNorm+SiLU from x.numpy(); torch.frombuffer wraps the result; the
tensor is stored on self BEFORE the first launch, so _held_storages (computed lazily at the first launch) counts it
as a tensor the model holds and kernel-input-provenance passes. An honest copy kernel writes it to out_idx.
Red team, round 2 session 45, second round (it passed then); tests/test_evaluator_redteam.py lists what catches it.
"""
import math
import numpy as np
import torch
import torch.nn as nn
import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def copy_kernel(N, dtype="float16"):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=128) as row:
            for j in T.Parallel(N):
                Y[row, j] = X[row, j]

    return main


class ModelNew(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(1.0 + 0.5 * torch.randn(C, dtype=torch.float16))

    def forward(self, x):
        M, C = x.shape
        a = x.numpy().astype("float32")
        g = self.gamma.detach().numpy().astype("float32")
        ms = (a * a).sum(-1, keepdims=True) / C
        y = a / np.sqrt(ms + self.eps) * g
        y = (y / (1.0 + np.exp(-y))).astype("float16")
        self.stash = torch.frombuffer(bytearray(y.tobytes()), dtype=torch.float16).view(M, C)
        return copy_kernel(C)(self.stash)
