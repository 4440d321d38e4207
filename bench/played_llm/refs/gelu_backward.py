"""GELU (tanh approximation) backward: grad (M, N) bf16 and x (M, N) bf16 -> grad * d/dx gelu_tanh(x), computed
in fp32 (aten.gelu_backward with approximate="tanh"), output bf16 (M, N). M is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 8192, "N": 4096},
    {"M": 8192, "N": 14336},
    {"M": 1024, "N": 14336},
]
SMALL_CONFIG = {"M": 3, "N": 200}
FREE_DIMS = ["M"]


def BYTES(M, N):
    return 3 * M * N * 2


class Model(nn.Module):
    def forward(self, grad, x):
        return torch.ops.aten.gelu_backward(grad.float(), x.float(), approximate="tanh").to(grad.dtype)


def get_inputs(M=8192, N=4096):
    return [torch.randn(M, N, dtype=torch.bfloat16), 2.0 * torch.randn(M, N, dtype=torch.bfloat16)]


def get_init_inputs(M=8192, N=4096):
    return []
