"""Nucleus (top-p) filtering of logits, as transformers' TopPLogitsWarper (top_p = 0.9, min_tokens_to_keep = 1):
sort the probabilities ascending, remove every token whose cumulative probability (itself and all below it) is
<= 1 - top_p, always keep the most likely token; removed logits become -inf, kept ones pass unchanged.
x (B, V) fp32 logits, output (B, V) fp32. The probabilities and their cumulative sums are taken in float64 here so
the kept set is well defined: in float32 the summation order flips the boundary token in about 2% of rows; the sort
is stable, so a group of equal logits at the cut is removed lowest index first.
Llama-2 / Mistral vocabularies (32000) at B = 1, 32 and 256, Llama-3 (128256) at B = 8. B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "V": 32000},
    {"B": 32, "V": 32000},
    {"B": 256, "V": 32000},
    {"B": 8, "V": 128256},
]
SMALL_CONFIG = {"B": 3, "V": 1000}
FREE_DIMS = ["B"]


def BYTES(B, V):
    return 4 * 2 * B * V


class Model(nn.Module):
    def __init__(self, top_p=0.9):
        super().__init__()
        self.top_p = top_p

    def forward(self, logits):
        p = torch.softmax(logits.double(), dim=-1)
        sp, idx = torch.sort(p, dim=-1, descending=False, stable=True)
        cum = sp.cumsum(dim=-1)
        remove_sorted = cum <= (1 - self.top_p)
        remove_sorted[..., -1:] = False
        remove = remove_sorted.scatter(1, idx, remove_sorted)
        return logits.masked_fill(remove, float("-inf"))


def get_inputs(B=1, V=32000):
    return [torch.randn(B, V) * 2.0]


def get_init_inputs(B=1, V=32000):
    return [0.9]
