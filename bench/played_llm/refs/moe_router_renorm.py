"""MoE router with renormalized top-2 (OLMoE / Qwen-MoE-style 64 experts, 2 of them per token here): router logits
(T, E) fp32 -> softmax over the E experts, the top-2 experts per token, their weights renormalized to sum to 1.
Outputs: weights (T, 2) fp32 (the larger first) and indices (T, 2) int64. T (tokens) is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 8192, "E": 64},
    {"T": 2048, "E": 64},
    {"T": 16384, "E": 64},
]
SMALL_CONFIG = {"T": 5, "E": 64}
FREE_DIMS = ["T"]


def BYTES(T, E):
    return T * E * 4 + T * 2 * (4 + 8)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits):
        p = torch.softmax(logits, dim=-1)
        w, idx = torch.topk(p, 2, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        return w, idx


def get_inputs(T=8192, E=64):
    return [torch.randn(T, E)]


def get_init_inputs(T=8192, E=64):
    return []
