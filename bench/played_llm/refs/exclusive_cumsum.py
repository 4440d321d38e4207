"""Exclusive prefix sum along the last dim (token offsets, sampling): y[m, n] = sum(x[m, :n]), x (M, N) float32,
output float32 (M, N). M is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 4096, "N": 2048},
    {"M": 64, "N": 32768},
]
SMALL_CONFIG = {"M": 3, "N": 256}
FREE_DIMS = ["M"]


def BYTES(M, N):
    return 2 * M * N * 4


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=-1) - x


def get_inputs(M=4096, N=2048):
    return [torch.randn(M, N)]


def get_init_inputs(M=4096, N=2048):
    return []
