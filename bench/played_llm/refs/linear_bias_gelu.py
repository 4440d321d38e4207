"""A transformer MLP's first projection with its epilogue (GPT-2 / Gemma style): y = gelu_tanh(x @ W^T + b), x (M, K)
bf16, W (N, K) bf16, b (N,) bf16, fp32 accumulation, output bf16. M (tokens) is free."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"M": 4096, "K": 2048, "N": 8192},
    {"M": 256, "K": 4096, "N": 16384},
]
SMALL_CONFIG = {"M": 40, "K": 64, "N": 96}
FREE_DIMS = ["M"]


def FLOPS(M, K, N):
    return 2 * M * K * N


class Model(nn.Module):
    def __init__(self, K=2048, N=8192):
        super().__init__()
        self.proj = nn.Linear(K, N).to(torch.bfloat16)

    def forward(self, x):
        return F.gelu(self.proj(x), approximate="tanh")


def get_inputs(M=4096, K=2048, N=8192):
    return [torch.randn(M, K, dtype=torch.bfloat16)]


def get_init_inputs(M=4096, K=2048, N=8192):
    return [K, N]
