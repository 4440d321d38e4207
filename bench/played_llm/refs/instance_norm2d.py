"""InstanceNorm2d (nn.InstanceNorm2d(C, affine=True), eps 1e-5) on x (N, C, H, W) fp16, as in style-transfer /
image-to-image generators (CycleGAN / pix2pix ResNet blocks, AdaIN decoders): each (n, c) plane of H * W values is
normalized by its own mean and biased variance, then scaled and shifted per channel. Computed in float32 (module and
input cast, like the groupnorm reference), output fp16. N is free.
Configs: a CycleGAN-style 128x128 stage at 64 channels (batch 8), a 64x64 stage at 320 channels (batch 2), a 32x32
stage at 128 channels (batch 32).
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 8, "C": 64, "H": 128, "W": 128},
    {"N": 2, "C": 320, "H": 64, "W": 64},
    {"N": 32, "C": 128, "H": 32, "W": 32},
]
SMALL_CONFIG = {"N": 2, "C": 8, "H": 8, "W": 8}
FREE_DIMS = ["N"]


def BYTES(N, C, H, W):
    return 2 * N * C * H * W * 2 + 2 * C * 4


def FLOPS(N, C, H, W):
    return 8 * N * C * H * W


class Model(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.norm = nn.InstanceNorm2d(C, eps=1e-5, affine=True)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.5 * torch.randn(C))
            self.norm.bias.copy_(0.5 * torch.randn(C))

    def forward(self, x):
        return self.norm(x.float()).to(x.dtype)


def get_inputs(N=8, C=64, H=128, W=128):
    return [torch.randn(N, C, H, W, dtype=torch.float16)]


def get_init_inputs(N=8, C=64, H=128, W=128):
    return [C]
