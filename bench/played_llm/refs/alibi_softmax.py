"""Attention scores with an ALiBi bias, then softmax (BLOOM, MPT): p = softmax(scores * scale - slope[h] * |i - j|)
over the last dim, scores (B, H, S, S) fp16, slope (H,) fp32 (the ALiBi slopes 2^(-8 h / H)), scale 1 / sqrt(128),
math in fp32, output fp16 (B, H, S, S). B is free.
"""
import math

import torch
import torch.nn as nn

CONFIGS = [
    {"B": 4, "H": 32, "S": 1024},
    {"B": 1, "H": 16, "S": 2048},
]
SMALL_CONFIG = {"B": 1, "H": 2, "S": 48}
FREE_DIMS = ["B"]


def BYTES(B, H, S):
    return 2 * B * H * S * S * 2 + H * 4


class Model(nn.Module):
    def __init__(self, H=32):
        super().__init__()
        self.register_buffer("slope", torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]))
        self.scale = 1.0 / math.sqrt(128)

    def forward(self, scores):
        S = scores.shape[-1]
        pos = torch.arange(S, device=scores.device)
        dist = (pos[:, None] - pos[None, :]).abs().float()
        logits = scores.float() * self.scale - self.slope[:, None, None] * dist
        return torch.softmax(logits, dim=-1).to(scores.dtype)


def get_inputs(B=4, H=32, S=1024):
    return [torch.randn(B, H, S, S, dtype=torch.float16) * 4]


def get_init_inputs(B=4, H=32, S=1024):
    return [H]
