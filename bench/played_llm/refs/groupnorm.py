"""GroupNorm (nn.GroupNorm, affine) on x (N, C, H, W) fp16, 32 groups, eps 1e-5, as in SD / diffusion UNets.

Computed in fp32 (module and input cast), output fp16. N is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 8, "C": 320, "H": 64, "W": 64},
    {"N": 8, "C": 640, "H": 32, "W": 32},
    {"N": 8, "C": 1280, "H": 16, "W": 16},
    {"N": 2, "C": 512, "H": 128, "W": 128},
]
SMALL_CONFIG = {"N": 2, "C": 64, "H": 4, "W": 4}
FREE_DIMS = ["N"]


def BYTES(N, C, H, W):
    return 2 * N * C * H * W * 2 + 2 * C * 4


class Model(nn.Module):
    def __init__(self, C, G=32):
        super().__init__()
        self.gn = nn.GroupNorm(G, C, eps=1e-5)
        with torch.no_grad():
            self.gn.weight.copy_(1.0 + 0.5 * torch.randn(C))
            self.gn.bias.copy_(0.5 * torch.randn(C))

    def forward(self, x):
        return self.gn(x.float()).to(x.dtype)


def get_inputs(N=8, C=320, H=64, W=64):
    return [torch.randn(N, C, H, W, dtype=torch.float16)]


def get_init_inputs(N=8, C=320, H=64, W=64):
    return [C]
