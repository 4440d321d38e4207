"""Rotary position embedding (GPT-NeoX style, rotate_half with torch.cat), x (B, S, H, D) fp16, cos/sin (S, D) fp16.

out = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]). S is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "S": 4096, "H": 32, "D": 128},   # Llama-2 7B
    {"B": 4, "S": 2048, "H": 32, "D": 128},
    {"B": 1, "S": 8192, "H": 8, "D": 128},    # Llama-3 8B KV heads
    {"B": 8, "S": 1024, "H": 16, "D": 64},
]
SMALL_CONFIG = {"B": 1, "S": 7, "H": 2, "D": 64}
FREE_DIMS = ["S"]


def BYTES(B, S, H, D):
    return 2 * B * S * H * D * 2 + 2 * S * D * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, cos, sin):
        d = x.shape[-1] // 2
        rot = torch.cat((-x[..., d:], x[..., :d]), dim=-1)
        return x * cos[None, :, None, :] + rot * sin[None, :, None, :]


def get_inputs(B=1, S=4096, H=32, D=128):
    pos = torch.arange(S, dtype=torch.float32)[:, None]
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    ang = torch.cat((pos * inv, pos * inv), dim=-1)
    return [torch.randn(B, S, H, D, dtype=torch.float16), ang.cos().half(), ang.sin().half()]


def get_init_inputs(B=1, S=4096, H=32, D=128):
    return []
