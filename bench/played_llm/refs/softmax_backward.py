"""Backward of a softmax over the last dim (attention probabilities in an eager / non-fused attention backward,
softmax-with-temperature distillation losses over an LLM vocabulary): given y = softmax(z, dim=-1) (the forward's
saved output) and the upstream gradient dy, both (M, V) bfloat16,
    s[i]        = sum_j dy[i, j] * y[i, j]
    dx[i, j]    = y[i, j] * (dy[i, j] - s[i])
computed in float32 and rounded to bfloat16: out = (y * (dy - (dy * y).sum(-1, keepdim=True))) in float32 .to(bf16)
(torch._softmax_backward_data(dy, y, -1, torch.bfloat16) up to its rounding), output (M, V) bfloat16.
y is a real softmax output (rows of positive values summing to ~1, from logits ~ N(0, 2^2)), kept as get_inputs
draws it (FIXED_INPUTS); dy is the drawn upstream gradient. The gradient's entries are about y * O(1), i.e. ~1/V
(3e-5 at V = 32000, 8e-6 at V = 128256), far below the default bf16 atol of 1e-2, where a kernel returning zeros or
dropping s would pass: the comparison is relative (rtol 1e-2 is about two bf16 ulps).
Configs (M, V): 4096 tokens over a Llama-2 / Mistral vocabulary (32000), 2048 tokens over the Llama-3 vocabulary
(128256), GPT-2-small attention probabilities (8 sequences x 12 heads x 1024 queries = 98304 rows of 1024 keys).
M is free; V is the row width.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 4096, "V": 32000},
    {"M": 2048, "V": 128256},
    {"M": 98304, "V": 1024},
]
SMALL_CONFIG = {"M": 5, "V": 1000}
FREE_DIMS = ["M"]
FIXED_INPUTS = [0]   # y stays a softmax output (positive rows summing to 1)
TOLERANCES = {"bfloat16": (1e-30, 1e-2, 1e-2)}


def BYTES(M, V):
    return 3 * M * V * 2


class Model(nn.Module):
    def forward(self, y, dy):
        yf = y.float()
        dyf = dy.float()
        s = (dyf * yf).sum(dim=-1, keepdim=True)
        return (yf * (dyf - s)).to(y.dtype)


def get_inputs(M=4096, V=32000):
    y = torch.softmax(torch.randn(M, V) * 2.0, dim=-1).to(torch.bfloat16)
    dy = torch.randn(M, V).to(torch.bfloat16)
    return [y, dy]


def get_init_inputs(M=4096, V=32000):
    return []
