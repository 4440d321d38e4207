"""KernelBench L1 20: leaky_relu(x, 0.01), fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 4096, 'N': 16384}]
SMALL_CONFIG = {'M': 5, 'N': 100}


class Model(nn.Module):
    def forward(self, x):
        return F.leaky_relu(x, negative_slope=0.01)

def get_inputs(M=4096, N=16384):
    return [torch.randn(M, N)]


def get_init_inputs(M=4096, N=16384):
    return []
