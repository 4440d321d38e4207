"""Entropy of the next-token distribution per row (speculative decoding / sampling diagnostics,
torch.distributions.Categorical(logits=x).entropy()): H = -sum softmax(x) * log_softmax(x) over a vocabulary row.
x (B, V) fp32 logits, output (B,) fp32. Few rows, long rows: Gemma's V = 256000 at B = 1 and 8, Llama-3's
V = 128256, a batch of 64 rows of a 32000 vocabulary. B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "V": 256000},
    {"B": 8, "V": 256000},
    {"B": 4, "V": 128256},
    {"B": 64, "V": 32000},
]
SMALL_CONFIG = {"B": 3, "V": 5000}
FREE_DIMS = ["B"]


def BYTES(B, V):
    return 4 * (B * V + B)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits):
        logp = torch.log_softmax(logits.float(), dim=-1)
        return -(logp.exp() * logp).sum(dim=-1)


def get_inputs(B=1, V=256000):
    return [torch.randn(B, V) * 3.0]


def get_init_inputs(B=1, V=256000):
    return []
