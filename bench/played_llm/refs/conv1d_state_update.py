"""Mamba-style causal depthwise conv1d, one decode step (causal_conv1d_update with SiLU):
    x (B, C) the new token, conv_state (B, C, W) the last W inputs per channel, weight (C, W), bias (C,), all fp16
    new_state = cat(conv_state[:, :, 1:], x[:, :, None], dim=-1)                 (B, C, W) fp16 (a shift, exact)
    out = silu(sum_w(new_state * weight, -1) + bias)                             computed in float32, rounded to fp16
outputs (out (B, C) fp16, new_state (B, C, W) fp16). W = 4 (the kernel width of Mamba / Mamba-2).
Configs: (B, C) = (1, 4096), (64, 8192), (256, 4096)  (Mamba-2.7B's d_inner 5120 is close; 8192 = Mamba-2 with
the x/B/C channels). B is the decode batch (free).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 1, "C": 4096, "W": 4},
    {"B": 64, "C": 8192, "W": 4},
    {"B": 256, "C": 4096, "W": 4},
]
SMALL_CONFIG = {"B": 3, "C": 48, "W": 4}
FREE_DIMS = ["B"]


def BYTES(B, C, W):
    return 2 * (B * C + 2 * B * C * W + C * W + C + B * C)


def FLOPS(B, C, W):
    return 2 * B * C * W


class Model(nn.Module):
    def forward(self, x, conv_state, weight, bias):
        new_state = torch.cat([conv_state[:, :, 1:], x[:, :, None]], dim=-1)
        acc = (new_state.float() * weight.float()).sum(-1) + bias.float()
        out = F.silu(acc).to(x.dtype)
        return out, new_state


def get_inputs(B=64, C=8192, W=4):
    return [
        torch.randn(B, C, dtype=torch.float16),
        torch.randn(B, C, W, dtype=torch.float16),
        (torch.randn(C, W) * 0.5).to(torch.float16),
        (torch.randn(C) * 0.1).to(torch.float16),
    ]


def get_init_inputs(B=64, C=8192, W=4):
    return []
