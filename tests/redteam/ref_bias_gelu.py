"""Reference: Y = GELU(X + bias) (erf form), fp16 in and out, math in fp32; the bias starts at zeros."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{"M": 6, "N": 48}]
FREE_DIMS = ["M"]


class Model(nn.Module):
    def __init__(self, N):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(N, dtype=torch.float16))

    def forward(self, x):
        return F.gelu(x.float() + self.bias.float()).to(x.dtype)


def get_inputs(M=6, N=48):
    return [torch.randn(M, N, dtype=torch.float16)]


def get_init_inputs(M=6, N=48):
    return [N]
