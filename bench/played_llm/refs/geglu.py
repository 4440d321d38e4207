"""GeGLU on a fused gate/up projection (T5 v1.1 / Gemma MLP): h (M, 2I) bf16, gate, up = h.chunk(2, dim=-1),
output gelu_tanh(gate) * up, (M, I) bf16, computed the way the model does it in bf16 (HF Gemma:
`act_fn(gate_proj(x)) * up_proj(x)` with act_fn = gelu_pytorch_tanh): the GELU rounds to bf16, then the product does.
M (tokens) is free: a 16-token decode step, 2048- and 8192-token prefill; I is Gemma-2B's 16384 and Gemma-7B's 24576.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"M": 16, "I": 16384},
    {"M": 2048, "I": 16384},
    {"M": 8192, "I": 16384},
    {"M": 2048, "I": 24576},
]
SMALL_CONFIG = {"M": 5, "I": 256}
FREE_DIMS = ["M"]


def BYTES(M, I):
    return M * 2 * I * 2 + M * I * 2


def FLOPS(M, I):
    return 10 * M * I


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, h):
        gate, up = h.chunk(2, dim=-1)
        return F.gelu(gate, approximate="tanh") * up


def get_inputs(M=2048, I=16384):
    return [torch.randn(M, 2 * I, dtype=torch.bfloat16)]


def get_init_inputs(M=2048, I=16384):
    return []
