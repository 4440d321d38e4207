"""Final-logit soft-capping then log-softmax (Gemma 2's sampling head): y = log_softmax(cap * tanh(x / cap), -1),
x (M, V) bf16 logits, cap 30.0, math in fp32, y float32 log-probabilities. M (tokens) is free.
"""
import torch
import torch.nn as nn

CONFIGS = [{"M": 8, "V": 256000}, {"M": 64, "V": 256000}, {"M": 512, "V": 32000}]
SMALL_CONFIG = {"M": 3, "V": 1000}
FREE_DIMS = ["M"]


def BYTES(M, V):
    return M * V * 2 + M * V * 4


class Model(nn.Module):
    def __init__(self, cap=30.0):
        super().__init__()
        self.cap = cap

    def forward(self, x):
        z = self.cap * torch.tanh(x.float() / self.cap)
        return torch.log_softmax(z, dim=-1)


def get_inputs(M=64, V=256000):
    return [(torch.randn(M, V) * 8.0).to(torch.bfloat16)]


def get_init_inputs(M=64, V=256000):
    return []
