"""Gradient of the mean token cross-entropy w.r.t. the logits (the backward half of a fused / chunked CE, as Liger's
or Unsloth's cross-entropy kernels compute it): logits (M, V) bf16, labels (M,) int64 where -100 (ignore_index)
marks a token that is not trained on. With n_valid = the number of labels != -100 and p = softmax(logits) in float32,
    dlogits[i, :] = (p[i, :] - onehot(labels[i])) / n_valid      for a trained token,
    dlogits[i, :] = 0                                             for an ignored one,
i.e. d/dlogits of F.cross_entropy(logits.float(), labels, ignore_index=-100) (mean reduction, upstream grad 1),
cast back to bf16 (a model that upcasts its logits before the loss gets the gradient in the logits' dtype).
A quarter of the tokens are ignored (every 4th, from the second: padding / prompt tokens), the same at every M.
Llama-2 / Mistral (32000) and Llama-3 (128256) vocabularies at M = 4096 and 16384 tokens; M is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 4096, "V": 32000},
    {"M": 16384, "V": 32000},
    {"M": 4096, "V": 128256},
    {"M": 16384, "V": 128256},
]
SMALL_CONFIG = {"M": 9, "V": 1000}
FREE_DIMS = ["M"]
FIXED_INPUTS = [1]   # the labels (with their ignored quarter) stay as get_inputs draws them
# The gradient's entries are about 1 / (V * n_valid) (1e-9 at full size), far below the default bf16 atol of 1e-2, and
# the -1/n_valid entries at the labels dominate its L2 norm: with the default tolerance a kernel that drops the softmax
# term passes normal inputs (relative L2 0.005-0.009). Compare relatively (rtol 1e-2 is about two bf16 ulps); ignored
# rows must be exactly 0.
TOLERANCES = {"bfloat16": (1e-30, 1e-2, 1e-2)}
IGNORE_INDEX = -100


def BYTES(M, V):
    return 2 * M * V * 2 + M * 8


def FLOPS(M, V):
    return 5 * M * V


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, labels):
        x = logits.float()
        p = torch.softmax(x, dim=-1)
        valid = labels != IGNORE_INDEX
        n_valid = valid.sum().float()
        onehot = torch.zeros_like(p).scatter_(1, labels.clamp(min=0).unsqueeze(1), 1.0)
        g = (p - onehot) * valid.unsqueeze(1).float() / n_valid
        return g.to(logits.dtype)


def get_inputs(M=4096, V=32000):
    labels = torch.randint(0, V, (M,), dtype=torch.int64)
    labels[1::4] = IGNORE_INDEX                           # padding / prompt tokens: not trained on
    return [torch.randn(M, V, dtype=torch.bfloat16) * 2.0, labels]


def get_init_inputs(M=4096, V=32000):
    return []
