"""KernelBench L1-like: sum over dim 1 of X (B, D1, D2), keepdim, fp32."""
import torch
import torch.nn as nn

CONFIGS = [{"B": b, "D1": d1, "D2": d2} for b, d1, d2 in ((128, 4096, 256), (64, 512, 4096), (16384, 64, 128))]
SMALL_CONFIG = {"B": 3, "D1": 17, "D2": 20}
FREE_DIMS = ["B"]


def BYTES(B, D1, D2):
    return 4 * (B * D1 * D2 + B * D2)


class Model(nn.Module):
    def __init__(self, dim=1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs(B=128, D1=4096, D2=256):
    return [torch.randn(B, D1, D2)]


def get_init_inputs(B=128, D1=4096, D2=256):
    return [1]
