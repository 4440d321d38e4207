"""Bilinear upsampling by 2 (F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)) of NCHW fp16
feature maps, as the Stable Diffusion VAE decoder's Upsample blocks and many U-Net decoders use it: output pixel
(oy, ox) samples the input at y = (oy + 0.5) / 2 - 0.5 (clamped below at 0), x likewise, and interpolates the four
neighbours (the upper neighbour index clamped at H - 1 / W - 1); x (B, C, H, W) fp16 -> (B, C, 2H, 2W) fp16.
SD VAE decoder (512 channels at a 64 x 64 latent, batch 1), a U-Net / VAE decoder level at 256 channels 128 x 128
(batch 4) and at 128 channels 256 x 256 (batch 2). B is free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 1, "C": 512, "H": 64, "W": 64},
    {"B": 4, "C": 256, "H": 128, "W": 128},
    {"B": 2, "C": 128, "H": 256, "W": 256},
]
SMALL_CONFIG = {"B": 1, "C": 5, "H": 7, "W": 9}
FREE_DIMS = ["B"]


def BYTES(B, C, H, W):
    return B * C * H * W * 2 + B * C * 4 * H * W * 2


class Model(nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)


def get_inputs(B=1, C=512, H=64, W=64):
    return [torch.randn(B, C, H, W, dtype=torch.float16)]


def get_init_inputs(B=1, C=512, H=64, W=64):
    return []
