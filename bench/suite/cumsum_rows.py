"""KernelBench L1 89-like: an inclusive prefix sum along the last dim, fp32."""
import torch
import torch.nn as nn

CONFIGS = [{'M': 128, 'D': 4000}, {'M': 4096, 'D': 4096}]
SMALL_CONFIG = {'M': 5, 'D': 300}


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=1)


def get_inputs(M=128, D=4000):
    return [torch.randn(M, D)]


def get_init_inputs(M=128, D=4000):
    return []
