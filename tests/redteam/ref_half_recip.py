"""Reference: Y = 1 / (X * 0.5), fp32: a signed zero in gives an infinity of the same sign."""
import torch
import torch.nn as nn

CONFIGS = [{"M": 8, "N": 32}]


class Model(nn.Module):
    def forward(self, x):
        return 1.0 / (x * 0.5)


def get_inputs(M=8, N=32):
    return [torch.randn(M, N)]


def get_init_inputs(M=8, N=32):
    return []
