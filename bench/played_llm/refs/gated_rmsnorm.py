"""Gated RMSNorm (Mamba-2's RMSNormGated, norm_before_gate=False): y = RMSNorm(x * silu(z)) * weight over the last
dim D, x and z (B, S, D) bf16, weight (D,), eps 1e-5, math in fp32, output bf16 (B, S, D). B and S are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "S": 8192, "D": 4096},
    {"B": 16, "S": 512, "D": 2560},
    {"B": 64, "S": 1, "D": 8192},
]
SMALL_CONFIG = {"B": 2, "S": 5, "D": 256}
FREE_DIMS = ["B", "S"]


def BYTES(B, S, D):
    return 3 * B * S * D * 2 + D * 2


class Model(nn.Module):
    def __init__(self, D=4096, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(D))
        self.eps = eps

    def forward(self, x, z):
        h = x.float() * torch.nn.functional.silu(z.float())
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * self.weight.float()).to(x.dtype)


def get_inputs(B=1, S=8192, D=4096):
    return [torch.randn(B, S, D, dtype=torch.bfloat16), torch.randn(B, S, D, dtype=torch.bfloat16)]


def get_init_inputs(B=1, S=8192, D=4096):
    return [D]
