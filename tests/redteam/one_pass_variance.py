"""Cheat: LayerNorm with a one-pass variance E[x^2] - E[x]^2 in fp32, which cancels for inputs with a large mean."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T



@tileagent.jit(out_idx=[3])
def layernorm(M, N, eps=1e-5):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), W: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as row:
            x = T.alloc_fragment((N,), "float32")
            sq = T.alloc_fragment((N,), "float32")
            s = T.alloc_fragment((1,), "float32")
            s2 = T.alloc_fragment((1,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                sq[j] = x[j] * x[j]
            T.reduce_sum(x, s, dim=0)
            T.reduce_sum(sq, s2, dim=0)
            for j in T.Parallel(N):
                Y[row, j] = (x[j] - s[0] / N) * T.rsqrt(s2[0] / N - (s[0] / N) * (s[0] / N) + eps) * W[j] + B[j]

    return main


class ModelNew(nn.Module):
    def __init__(self, N, eps=1e-5):
        super().__init__()
        self.ln = nn.LayerNorm(N, eps=eps)

    def forward(self, x):
        return layernorm(*x.shape)(x, self.ln.weight.detach(), self.ln.bias.detach())
