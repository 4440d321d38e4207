"""MoE router (Mixtral): softmax over E expert logits per token, then the top-2 experts: weights (T, 2) float32
renormalized to sum to 1, and their indices (T, 2) int64 (the larger first; ties take the lower index, as
torch.topk does on distinct values). logits (T, E) float32. T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 8192, "E": 8},
    {"T": 4096, "E": 64},
]
SMALL_CONFIG = {"T": 5, "E": 8}
FREE_DIMS = ["T"]


def BYTES(T, E):
    return T * E * 4 + T * 2 * 12


class Model(nn.Module):
    def forward(self, logits):
        p = torch.softmax(logits, dim=-1)
        w, idx = torch.topk(p, 2, dim=-1)
        return w / w.sum(-1, keepdim=True), idx


def get_inputs(T=8192, E=8):
    return [torch.randn(T, E)]


def get_init_inputs(T=8192, E=8):
    return []
