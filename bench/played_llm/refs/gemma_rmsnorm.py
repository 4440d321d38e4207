"""Gemma-style RMSNorm: y = x * rsqrt(mean(x^2) + eps) * (1 + w), computed in fp32, cast back to fp16.
x (T, D) fp16 tokens, w (D,) fp16 (stored as the offset from 1, Gemma's convention), eps = 1e-6. Gemma-2-9B
(D = 3584) at a decode batch of 32 tokens and an 8192-token prefill, Gemma-2-27B (D = 4608) at a 32768-token
prefill, and D = 8192 at 8192 tokens. T (tokens) is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 32, "D": 3584},
    {"T": 8192, "D": 3584},
    {"T": 32768, "D": 4608},
    {"T": 8192, "D": 8192},
]
SMALL_CONFIG = {"T": 5, "D": 320}
FREE_DIMS = ["T"]


def BYTES(T, D):
    return 2 * (2 * T * D + D)


class Model(nn.Module):
    def __init__(self, D, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((0.1 * torch.randn(D)).to(torch.float16))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).to(x.dtype)


def get_inputs(T=32, D=3584):
    return [torch.randn(T, D, dtype=torch.float16)]


def get_init_inputs(T=32, D=3584):
    return [D]
