"""Reference: Y = relu(X) * 2, fp32, KernelBench style: inputs from torch.rand (non-negative)."""
import torch
import torch.nn as nn

CONFIGS = [{"M": 8, "N": 32}]
FREE_DIMS = ["M"]


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs(M=8, N=32):
    return [torch.rand(M, N)]


def get_init_inputs(M=8, N=32):
    return []
