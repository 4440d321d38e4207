"""Global average pooling: x.mean(dim=(2, 3)) of x (B, C, H, W) fp16 -> (B, C) fp16 (a ResNet / EfficientNet
classifier head or a squeeze-and-excitation block's squeeze; torch accumulates in fp32). B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 64, "C": 2048, "H": 7, "W": 7},
    {"B": 8, "C": 512, "H": 64, "W": 64},
    {"B": 32, "C": 1280, "H": 7, "W": 7},
]
SMALL_CONFIG = {"B": 2, "C": 48, "H": 5, "W": 7}
FREE_DIMS = ["B"]


def BYTES(B, C, H, W):
    return B * C * H * W * 2 + B * C * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=(2, 3))


def get_inputs(B=64, C=2048, H=7, W=7):
    return [torch.randn(B, C, H, W, dtype=torch.float16)]


def get_init_inputs(B=64, C=2048, H=7, W=7):
    return []
