"""Softmax over the channel dimension of an NCHW fp16 tensor (semantic-segmentation heads turning per-class logits
into per-pixel class probabilities; spatial / channel attention maps): x (B, C, H, W) float16, contiguous NCHW, so
the C values of one pixel (b, h, w) are strided by H * W elements in memory:
    m[b, h, w]   = max_c x[b, c, h, w]
    out[b, c, h, w] = exp(x[b, c, h, w] - m) / sum_c exp(x[b, c', h, w] - m)
computed in float32 and rounded to float16: out = torch.softmax(x.float(), dim=1).to(x.dtype), output (B, C, H, W)
float16 (for every pixel the C outputs sum to ~1).
Configs (B, C, H, W): Cityscapes logits (8 images, 19 classes, 512 x 1024), ADE20K logits at 1/4 resolution
(16 images, 150 classes, 128 x 128), a ResNet-stage spatial attention map (32, 64 channels, 56 x 56).
B, H, W are free; C is the class / channel count.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 8, "C": 19, "H": 512, "W": 1024},
    {"B": 16, "C": 150, "H": 128, "W": 128},
    {"B": 32, "C": 64, "H": 56, "W": 56},
]
SMALL_CONFIG = {"B": 2, "C": 19, "H": 6, "W": 11}
FREE_DIMS = ["B", "H", "W"]


def BYTES(B, C, H, W):
    return 2 * B * C * H * W * 2


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x.float(), dim=1).to(x.dtype)


def get_inputs(B=8, C=19, H=512, W=1024):
    return [(torch.randn(B, C, H, W) * 3.0).to(torch.float16)]


def get_init_inputs(B=8, C=19, H=512, W=1024):
    return []
