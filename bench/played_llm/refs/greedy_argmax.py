"""Greedy sampling: the index of each row's largest logit, logits (M, V) bf16, output int64 (M,); ties take the
first index, as torch.argmax does. M is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 64, "V": 128256},
    {"M": 512, "V": 32000},
]
SMALL_CONFIG = {"M": 3, "V": 1000}
FREE_DIMS = ["M"]


def BYTES(M, V):
    return M * V * 2 + M * 8


class Model(nn.Module):
    def forward(self, logits):
        return torch.argmax(logits, dim=-1)


def get_inputs(M=64, V=128256):
    return [torch.randn(M, V, dtype=torch.bfloat16)]


def get_init_inputs(M=64, V=128256):
    return []
