"""KernelBench L1 31: ELU(alpha=1.0), fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 4096, 'N': 16384}]
SMALL_CONFIG = {'M': 5, 'N': 100}


class Model(nn.Module):
    def forward(self, x):
        return F.elu(x, alpha=1.0)

def get_inputs(M=4096, N=16384):
    return [torch.randn(M, N)]


def get_init_inputs(M=4096, N=16384):
    return []
