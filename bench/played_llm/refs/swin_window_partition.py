"""Swin Transformer's shifted-window partition (SwinTransformerBlock with shift_size > 0, before W-MSA):
x (B, H, W, C) bf16 activations; the cyclic shift `torch.roll(x, shifts=(-s, -s), dims=(1, 2))` (s = 3), then
window_partition with window size ws = 7: the (B, H, W, C) map is cut into (H / ws) * (W / ws) windows of ws x ws
tokens, window (b, wh, ww) becoming row b * nW + wh * (W / ws) + ww of the output, its tokens in row-major order:
    out[b * nW + wh * (W / ws) + ww, i * ws + j, c] = x[b, (wh * ws + i + s) % H, (ww * ws + j + s) % W, c]
output (B * nW, ws * ws, C) bf16 (a pure data movement: exact). H and W are multiples of ws.
Configs: Swin-B stage 1 (56 x 56 tokens, C = 128, batch 32), stage 2 (28 x 28, C = 256), stage 3 (14 x 14, C = 512,
batch 64). B is free.
"""
import torch
import torch.nn as nn

WINDOW = 7
SHIFT = 3

CONFIGS = [
    {"B": 32, "H": 56, "W": 56, "C": 128},
    {"B": 32, "H": 28, "W": 28, "C": 256},
    {"B": 64, "H": 14, "W": 14, "C": 512},
]
SMALL_CONFIG = {"C": 32, "B": 2, "H": 14, "W": 14}
FREE_DIMS = ["B"]


def BYTES(B, H, W, C):
    return 2 * B * H * W * C * 2


class Model(nn.Module):
    def __init__(self, window_size=WINDOW, shift_size=SHIFT):
        super().__init__()
        self.window_size = window_size
        self.shift_size = shift_size

    def forward(self, x):
        B, H, W, C = x.shape
        ws, s = self.window_size, self.shift_size
        shifted = torch.roll(x, shifts=(-s, -s), dims=(1, 2))
        windows = shifted.view(B, H // ws, ws, W // ws, ws, C).permute(0, 1, 3, 2, 4, 5).contiguous()
        return windows.view(-1, ws * ws, C)


def get_inputs(B=32, H=56, W=56, C=128):
    return [torch.randn(B, H, W, C, dtype=torch.bfloat16)]


def get_init_inputs(B=32, H=56, W=56, C=128):
    return [WINDOW, SHIFT]
