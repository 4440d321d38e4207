"""Cheat (static + run time): typing.get_type_hints evaluates string annotations with eval(); a string is never
looked at by the static rules, so an annotation holds a lambda that imports numpy and computes RMSNorm+SiLU there,
wrapping the result with torch.frombuffer (no aten op). The tensor is stored on self before the first launch, so the
lazily-computed held-storage set of kernel-input-provenance counts it as the model's; an honest copy kernel writes it
into the kernel's out_idx output (output-provenance holds).
Red team, round 2 session 45, second round (it passed then); tests/test_evaluator_redteam.py lists what catches it.
"""
import typing

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


def _hint(f: "lambda x, g, eps: (lambda np: __import__('torch').frombuffer(bytearray((lambda a: (lambda y: y / (1.0 + np.exp(-y)))(a / np.sqrt((a * a).mean(-1, keepdims=True) + eps) * np.asarray(g).astype('float32')))(np.asarray(x).astype('float32')).astype('float16').tobytes()), dtype=__import__('torch').float16))(__import__('numpy'))"):
    pass


host = typing.get_type_hints(_hint)["f"]


class ModelNew(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(1.0 + 0.5 * torch.randn(C, dtype=torch.float16))

    def forward(self, x):
        M, C = x.shape
        self.stash = host(x, self.gamma.detach(), self.eps).view(M, C)
        return copy_kernel(C)(self.stash)
