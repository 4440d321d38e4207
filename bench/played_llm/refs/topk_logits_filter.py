"""Sampling's top-k filter with temperature (transformers' TemperatureLogitsWarper then TopKLogitsWarper):
logits (B, V) fp32 -> scores = logits / T (T = 0.7); per row keep the scores >= the k-th largest score (k = 50; ties
with the k-th value are kept, as `scores < topk(scores, k).values[..., -1:]` removes only smaller ones), the others
become -inf. Output (B, V) fp32. B is free (a decoding batch); V is the vocabulary (Llama-2, GPT-2, Llama-3).
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 64, "V": 32000},
    {"B": 64, "V": 50257},
    {"B": 16, "V": 128256},
]
SMALL_CONFIG = {"B": 3, "V": 5003}
FREE_DIMS = ["B"]


def BYTES(B, V):
    return B * V * 4 * 2


class Model(nn.Module):
    def __init__(self, top_k=50, temperature=0.7):
        super().__init__()
        self.top_k = top_k
        self.temperature = temperature

    def forward(self, logits):
        scores = logits / self.temperature
        kth = torch.topk(scores, self.top_k, dim=-1).values[..., -1:]
        return scores.masked_fill(scores < kth, float("-inf"))


def get_inputs(B=64, V=32000):
    return [torch.randn(B, V, dtype=torch.float32) * 3.0]


def get_init_inputs(B=64, V=32000):
    return []
