"""GPT-J / GPT-NeoX-interleaved rotary embedding: pairs (2i, 2i + 1) of each head's D values rotate by the angle of
position s and pair i: y[2i] = x[2i] cos - x[2i + 1] sin, y[2i + 1] = x[2i + 1] cos + x[2i] sin, with cos / sin
(S, D / 2) float32 tables; x (B, S, H, D) bf16, math in fp32, output bf16. B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "S": 4096, "H": 32, "D": 128},
    {"B": 8, "S": 512, "H": 16, "D": 64},
]
SMALL_CONFIG = {"B": 2, "S": 6, "H": 2, "D": 64}
FREE_DIMS = ["B"]


def BYTES(B, S, H, D):
    return 2 * B * S * H * D * 2 + 2 * S * (D // 2) * 4


class Model(nn.Module):
    def forward(self, x, cos, sin):
        xf = x.float()
        even, odd = xf[..., 0::2], xf[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        y = torch.stack((even * c - odd * s, odd * c + even * s), dim=-1).flatten(-2)
        return y.to(x.dtype)


def get_inputs(B=1, S=4096, H=32, D=128):
    pos = torch.arange(S, dtype=torch.float32)[:, None]
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    angle = pos * inv[None, :]
    return [torch.randn(B, S, H, D, dtype=torch.bfloat16), torch.cos(angle), torch.sin(angle)]


def get_init_inputs(B=1, S=4096, H=32, D=128):
    return []
