"""Reference: Y = X * 0.001, fp16: every output is below the fp16 atol (1e-2), so zeros pass allclose."""
import torch
import torch.nn as nn

CONFIGS = [{"M": 8, "N": 32}]
FREE_DIMS = ["M"]


class Model(nn.Module):
    def forward(self, x):
        return x * 0.001


def get_inputs(M=8, N=32):
    return [torch.randn(M, N, dtype=torch.float16)]


def get_init_inputs(M=8, N=32):
    return []
