"""Residual add + LayerNorm (pre-norm transformer block): r = x + residual; return (layer_norm(r) * w + b, r).

x, residual (M, N) fp16; stats in fp32; both outputs fp16. M (tokens) is free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{"M": 16384, "N": n} for n in (768, 1024, 2048, 4096, 8192)]
SMALL_CONFIG = {"M": 5, "N": 64}
FREE_DIMS = ["M"]


def BYTES(M, N):
    return 4 * M * N * 2 + 2 * N * 2


class Model(nn.Module):
    def __init__(self, N, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(N, dtype=torch.float16))
        self.bias = nn.Parameter(0.5 * torch.randn(N, dtype=torch.float16))

    def forward(self, x, residual):
        r = x + residual
        y = F.layer_norm(r.float(), (r.shape[-1],), self.weight.float(), self.bias.float(), self.eps)
        return y.to(x.dtype), r


def get_inputs(M=16384, N=4096):
    return [torch.randn(M, N, dtype=torch.float16), torch.randn(M, N, dtype=torch.float16)]


def get_init_inputs(M=16384, N=4096):
    return [N]
