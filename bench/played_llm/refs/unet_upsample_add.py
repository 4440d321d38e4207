"""U-Net decoder step (Stable Diffusion 1.5 up blocks): nearest upsampling by 2 of x (B, C, H, W) fp16, plus a skip
tensor of the upsampled shape (B, C, 2H, 2W) fp16, then SiLU; math in float32, output fp16. B and C are free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 2, "C": 1280, "H": 16, "W": 16},
    {"B": 2, "C": 640, "H": 32, "W": 32},
    {"B": 2, "C": 320, "H": 64, "W": 64},
]
SMALL_CONFIG = {"B": 1, "C": 13, "H": 6, "W": 10}
FREE_DIMS = ["B", "C"]


def BYTES(B, C, H, W):
    return B * C * H * W * 2 + 2 * B * C * 4 * H * W * 2


class Model(nn.Module):
    def forward(self, x, skip):
        up = F.interpolate(x.float(), scale_factor=2.0, mode="nearest")
        return F.silu(up + skip.float()).to(x.dtype)


def get_inputs(B=2, C=1280, H=16, W=16):
    return [torch.randn(B, C, H, W, dtype=torch.float16), torch.randn(B, C, 2 * H, 2 * W, dtype=torch.float16)]


def get_init_inputs(B=2, C=1280, H=16, W=16):
    return []
