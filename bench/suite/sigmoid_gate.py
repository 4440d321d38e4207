"""Gated fusion x * sigmoid(y) + z (KernelBench L2 style), fp16."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 8192, 'N': 8192}]
SMALL_CONFIG = {'M': 5, 'N': 64}


class Model(nn.Module):
    def forward(self, x, y, z):
        return x * torch.sigmoid(y) + z

def get_inputs(M=8192, N=8192):
    return [torch.randn(M, N, dtype=torch.float16), torch.randn(M, N, dtype=torch.float16), torch.randn(M, N, dtype=torch.float16)]


def get_init_inputs(M=8192, N=8192):
    return []
