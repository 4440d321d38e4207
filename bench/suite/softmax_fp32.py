"""KernelBench L1 23: softmax over dim 1, fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 4096, 'N': 4096}, {'M': 4096, 'N': 16384}]
SMALL_CONFIG = {'M': 5, 'N': 100}


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

def get_inputs(M=4096, N=4096):
    return [torch.randn(M, N)]


def get_init_inputs(M=4096, N=4096):
    return []
