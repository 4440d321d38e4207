"""Mamba's short causal depthwise conv1d (causal_conv1d_fn with SiLU): x (B, D, L) bf16, weight (D, 4) bf16,
bias (D,) bf16; out[b, d, t] = silu(bias[d] + sum_k weight[d, k] * x[b, d, t - 3 + k]) with x = 0 for t - 3 + k < 0;
output bf16 (B, D, L). B and L are free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 2, "D": 4096, "L": 2048},
    {"B": 8, "D": 5120, "L": 4096},
    {"B": 1, "D": 5120, "L": 4096},
]
SMALL_CONFIG = {"B": 2, "D": 64, "L": 37}
FREE_DIMS = ["B", "L"]


def BYTES(B, D, L):
    return 2 * B * D * L * 2 + D * 4 * 2 + D * 2


class Model(nn.Module):
    def __init__(self, D=4096):
        super().__init__()
        self.weight = nn.Parameter((0.5 * torch.randn(D, 4)).to(torch.bfloat16))
        self.bias = nn.Parameter((0.1 * torch.randn(D)).to(torch.bfloat16))

    def forward(self, x):
        D, L = x.shape[1], x.shape[2]
        y = F.conv1d(x, self.weight.unsqueeze(1), self.bias, padding=3, groups=D)[..., :L]
        return F.silu(y)


def get_inputs(B=2, D=4096, L=2048):
    return [torch.randn(B, D, L, dtype=torch.bfloat16)]


def get_init_inputs(B=2, D=4096, L=2048):
    return [D]
