"""KernelBench L1 94: mean squared error (a global reduction to a scalar), fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'B': 128, 'N': 131072}]
SMALL_CONFIG = {'B': 4, 'N': 100}


class Model(nn.Module):
    def forward(self, a, b):
        return torch.mean((a - b) ** 2)

def get_inputs(B=128, N=131072):
    return [torch.randn(B, N), torch.randn(B, N)]


def get_init_inputs(B=128, N=131072):
    return []
