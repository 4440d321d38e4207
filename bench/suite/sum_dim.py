"""KernelBench L1 47: sum over dim 1 of (B, D1, D2), keepdim, fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'B': 16, 'D1': 4096, 'D2': 4096}]
SMALL_CONFIG = {'B': 2, 'D1': 9, 'D2': 40}


class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=1, keepdim=True)

def get_inputs(B=16, D1=4096, D2=4096):
    return [torch.randn(B, D1, D2)]


def get_init_inputs(B=16, D1=4096, D2=4096):
    return []
