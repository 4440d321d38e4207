"""Pointwise chain: softplus then hardtanh(-1, 1) (KernelBench L1 29/32 style), fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 4096, 'N': 16384}]
SMALL_CONFIG = {'M': 5, 'N': 100}


class Model(nn.Module):
    def forward(self, x):
        return F.hardtanh(F.softplus(x), -1.0, 1.0)

def get_inputs(M=4096, N=16384):
    return [torch.randn(M, N)]


def get_init_inputs(M=4096, N=16384):
    return []
