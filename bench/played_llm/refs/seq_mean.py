"""Mean over the sequence dim (mean pooling): x (B, S, D) fp16 -> (B, D) fp16, accumulated in fp32.

Long-sequence pooling with B = 1, S = 8192: the reduction runs down the columns. S is free.
"""
import torch
import torch.nn as nn

CONFIGS = [{"B": 1, "S": 8192, "D": d} for d in (768, 1024, 4096, 8192)]
SMALL_CONFIG = {"B": 1, "S": 37, "D": 64}
FREE_DIMS = ["S"]


def BYTES(B, S, D):
    return B * S * D * 2 + B * D * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.float().mean(dim=1).to(x.dtype)


def get_inputs(B=1, S=8192, D=4096):
    return [torch.randn(B, S, D, dtype=torch.float16)]


def get_init_inputs(B=1, S=8192, D=4096):
    return []
