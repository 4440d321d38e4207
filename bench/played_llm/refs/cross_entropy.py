"""Cross-entropy of logits (M, V) fp16 with int64 labels (M,), mean reduction -> scalar fp32.

Math in fp32 (log-softmax over the vocabulary, then the label's entry). M (tokens) is free; V is a real vocabulary.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{"M": 4096, "V": v} for v in (32000, 50257, 128256)]
SMALL_CONFIG = {"M": 5, "V": 100}
FREE_DIMS = ["M"]


def BYTES(M, V):
    return M * V * 2 + M * 8 + 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, labels):
        return F.cross_entropy(logits.float(), labels, reduction="mean")


def get_inputs(M=4096, V=32000):
    return [torch.randn(M, V, dtype=torch.float16), torch.randint(0, V, (M,), dtype=torch.int64)]


def get_init_inputs(M=4096, V=32000):
    return []
