"""Mamba's depthwise causal conv1d over the sequence with SiLU (causal_conv1d_fn, activation="silu", prefill):
    x (B, D, L) bf16 (channels-first, as Mamba's in_proj output transposed); weight (D, W) bf16 and bias (D,) bf16
    are parameters; W = 4 (Mamba / Mamba-2's d_conv)
    out[b, d, l] = silu(bias[d] + sum_{k < W} weight[d, k] * x[b, d, l - (W - 1) + k])
with x[b, d, j] = 0 for j < 0 (causal: zeros before the sequence start, nothing from the previous sample);
math in float32, rounded once to bf16. output (B, D, L) bf16.
Configs (B, D, L): Mamba-2.8B (d_inner 5120) on one 8192-token prompt (1, 5120, 8192); Mamba2-1.3B (conv over
x, B and C: d_inner 4096 + 2 * 128 = 4352 channels) at (4, 4352, 2048); Jamba (d_inner 8192) at (16, 8192, 512).
B and L are free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 1, "D": 5120, "L": 8192},
    {"B": 4, "D": 4352, "L": 2048},
    {"B": 16, "D": 8192, "L": 512},
]
SMALL_CONFIG = {"B": 2, "D": 48, "L": 37}
FREE_DIMS = ["B", "L"]


def BYTES(B, D, L):
    return 2 * B * D * L * 2 + D * 4 * 2 + D * 2


def FLOPS(B, D, L):
    return 2 * B * D * L * 4


class Model(nn.Module):
    def __init__(self, D=5120, W=4):
        super().__init__()
        self.weight = nn.Parameter((torch.randn(D, W) * 0.5).to(torch.bfloat16))
        self.bias = nn.Parameter((torch.randn(D) * 0.1).to(torch.bfloat16))

    def forward(self, x):
        D, W = self.weight.shape
        L = x.shape[-1]
        acc = F.conv1d(x.float(), self.weight.float()[:, None, :], self.bias.float(), padding=W - 1, groups=D)
        return F.silu(acc[..., :L]).to(x.dtype)


def get_inputs(B=1, D=5120, L=8192):
    return [torch.randn(B, D, L, dtype=torch.bfloat16)]


def get_init_inputs(B=1, D=5120, L=8192):
    return [D]
