"""KernelBench L1 34: nn.InstanceNorm2d (statistics per sample and channel over H, W), fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'B': 16, 'C': 64, 'HW': 256}]
SMALL_CONFIG = {'B': 2, 'C': 4, 'HW': 8}


class Model(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.norm = nn.InstanceNorm2d(C)

    def forward(self, x):
        return self.norm(x)

def get_inputs(B=16, C=64, HW=256):
    return [torch.randn(B, C, HW, HW)]


def get_init_inputs(B=16, C=64, HW=256):
    return [C]
