"""ConvNeXt's depthwise 7x7 convolution (the first layer of every ConvNeXt block): nn.Conv2d(C, C, 7, padding=3,
groups=C) with bias, NCHW, fp16 weights and activations (as nn.Conv2d runs under .half()): each output channel c is
the 7x7 cross-correlation of input channel c with its own 7x7 filter, zero padding 3, stride 1, plus bias[c];
x (B, C, H, W) fp16 -> (B, C, H, W) fp16.
ConvNeXt-T stages at 224 x 224 input, batch 32: stage 1 (C = 96, 56 x 56), stage 2 (C = 192, 28 x 28), stage 3
(C = 384, 14 x 14). B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 32, "C": 96, "H": 56, "W": 56},
    {"B": 32, "C": 192, "H": 28, "W": 28},
    {"B": 32, "C": 384, "H": 14, "W": 14},
]
SMALL_CONFIG = {"B": 2, "C": 8, "H": 10, "W": 13}
FREE_DIMS = ["B"]


def BYTES(B, C, H, W):
    return 2 * B * C * H * W * 2 + C * 49 * 2 + C * 2


def FLOPS(B, C, H, W):
    return 2 * 49 * B * C * H * W


class Model(nn.Module):
    def __init__(self, C=96):
        super().__init__()
        self.dwconv = nn.Conv2d(C, C, kernel_size=7, padding=3, groups=C).to(torch.float16)

    def forward(self, x):
        return self.dwconv(x)


def get_inputs(B=32, C=96, H=56, W=56):
    return [torch.randn(B, C, H, W, dtype=torch.float16)]


def get_init_inputs(B=32, C=96, H=56, W=56):
    return [C]
