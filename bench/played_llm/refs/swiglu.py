"""SwiGLU on a fused gate/up projection: x (M, 2N) fp16 -> silu(gate) * up, (M, N) fp16, gate, up = x.chunk(2, -1).

M (tokens) is free; N is the MLP intermediate size of real models.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{"M": 8192, "N": n} for n in (11008, 14336, 13824, 4096)]  # Llama-2 7B, Llama-3 8B, Llama-2 13B, small
SMALL_CONFIG = {"M": 5, "N": 64}
FREE_DIMS = ["M"]


def BYTES(M, N):
    return M * 2 * N * 2 + M * N * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs(M=8192, N=11008):
    return [torch.randn(M, 2 * N, dtype=torch.float16)]


def get_init_inputs(M=8192, N=11008):
    return []
