"""Reference: Y = softmax(X) over rows, fp16 in and out, math in fp32."""
import torch
import torch.nn as nn

CONFIGS = [{"M": 8, "N": 64}]
FREE_DIMS = ["M"]


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x.float(), dim=-1).to(x.dtype)


def get_inputs(M=8, N=64):
    return [torch.randn(M, N, dtype=torch.float16)]


def get_init_inputs(M=8, N=64):
    return []
