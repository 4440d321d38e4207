"""Honest: Y = X * 0.001 in fp16 (reference: ref_tiny_scale.py, whose outputs are all below atol)."""
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def scale(M, N, threads=32):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(M, threads=threads) as row:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                x[j] = x[j] * 0.001
            T.copy(x, Y[row, 0])

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        return scale(*x.shape)(x)
