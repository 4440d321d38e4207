"""Masked mean pooling (sentence-transformers' pooling): hidden (B, S, D) fp16, attention_mask (B, S) int64 of
0/1 (right padding) -> the mean of the unmasked tokens, (B, D) fp16. Math in fp32; the token count is clamped at 1e-9.

A padded batch of sentences: row b keeps its first L_b tokens (1 <= L_b <= S). B and S are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 32, "S": 512, "D": 768},
    {"B": 128, "S": 128, "D": 768},
    {"B": 64, "S": 256, "D": 1024},
    {"B": 8, "S": 4096, "D": 1024},
]
SMALL_CONFIG = {"B": 3, "S": 37, "D": 64}
FREE_DIMS = ["B", "S"]


def BYTES(B, S, D):
    return B * S * D * 2 + B * S * 8 + B * D * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, hidden, attention_mask):
        m = attention_mask.unsqueeze(-1).to(torch.float32)
        summed = (hidden.float() * m).sum(dim=1)
        count = torch.clamp(m.sum(dim=1), min=1e-9)
        return (summed / count).to(hidden.dtype)


def get_inputs(B=32, S=512, D=768):
    lengths = torch.randint(1, S + 1, (B,))
    lengths[0] = S                                  # one unpadded sentence in every batch
    mask = (torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    return [torch.randn(B, S, D, dtype=torch.float16), mask]


def get_init_inputs(B=32, S=512, D=768):
    return []
