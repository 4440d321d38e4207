"""Reverse cumulative sum along dim 1 (KernelBench level 1, 91_cumsum_reverse): a suffix sum,
    y[m, n] = x[m, n] + x[m, n + 1] + ... + x[m, N - 1],   i.e. torch.cumsum(x.flip(1), 1).flip(1)
x (M, N) float32, output (M, N) float32; the dim (1) is the constructor argument, as in KernelBench.
Configs (M, N): KernelBench's own 128 rows x 4000 (a row length that is no power of two), 4096 rows of 8192 (long
rows: several tiles per row, a carry between them), 32768 rows of 1024 (many short rows). M is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 128, "N": 4000},
    {"M": 4096, "N": 8192},
    {"M": 32768, "N": 1024},
]
SMALL_CONFIG = {"M": 5, "N": 300}
FREE_DIMS = ["M"]


def BYTES(M, N):
    return 2 * M * N * 4


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x.flip(self.dim), self.dim).flip(self.dim)


def get_inputs(M=128, N=4000):
    return [torch.randn(M, N, dtype=torch.float32)]


def get_init_inputs(M=128, N=4000):
    return [1]
