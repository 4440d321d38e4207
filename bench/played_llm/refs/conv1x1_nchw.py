"""A 1x1 convolution with bias on NCHW fp16 activations (channel mixing in UNet ResBlocks / attention projections,
ResNet bottleneck reduce / expand, skip-connection channel matching): nn.Conv2d(Cin, Cout, kernel_size=1, bias=True)
in fp16 (as the module runs under .half()): weight (Cout, Cin, 1, 1) fp16, bias (Cout,) fp16, both owned by the
module (the candidate's ModelNew is given the same state_dict: attribute `conv`, so `conv.weight`, `conv.bias`);
x (B, Cin, H, W) fp16 contiguous NCHW:
    out[b, o, h, w] = bias[o] + sum_i weight[o, i, 0, 0] * x[b, i, h, w]        output (B, Cout, H, W) fp16
i.e. per image b a GEMM out[b] (Cout, H*W) = W (Cout, Cin) @ x[b] (Cin, H*W) + bias[:, None], accumulated in fp32
(as cuDNN does) and rounded to fp16.
Configs (B, Cin, Cout, H, W): a Stable-Diffusion UNet res-block skip projection at 64 x 64 latents (8, 320 -> 640),
the UNet's lowest-resolution 1280 -> 1280 projection at 16 x 16 (batch 2), a ResNet-50 bottleneck expand
(32 images, 64 -> 256 channels, 56 x 56). B, H, W are free; Cin, Cout are the layer widths.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 8, "Cin": 320, "Cout": 640, "H": 64, "W": 64},
    {"B": 2, "Cin": 1280, "Cout": 1280, "H": 16, "W": 16},
    {"B": 32, "Cin": 64, "Cout": 256, "H": 56, "W": 56},
]
SMALL_CONFIG = {"B": 2, "Cin": 24, "Cout": 40, "H": 5, "W": 7}
FREE_DIMS = ["B", "H", "W"]


def BYTES(B, Cin, Cout, H, W):
    return 2 * (B * Cin * H * W + B * Cout * H * W + Cout * Cin + Cout)


def FLOPS(B, Cin, Cout, H, W):
    return 2 * B * Cout * Cin * H * W


class Model(nn.Module):
    def __init__(self, Cin=320, Cout=640):
        super().__init__()
        self.conv = nn.Conv2d(Cin, Cout, kernel_size=1, bias=True).to(torch.float16)

    def forward(self, x):
        return self.conv(x)


def get_inputs(B=8, Cin=320, Cout=640, H=64, W=64):
    return [torch.randn(B, Cin, H, W, dtype=torch.float16)]


def get_init_inputs(B=8, Cin=320, Cout=640, H=64, W=64):
    return [Cin, Cout]
