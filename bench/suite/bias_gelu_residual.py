"""GPT MLP output epilogue: residual + gelu(x + bias) (erf), bf16."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 8192, 'N': 4096}, {'M': 8192, 'N': 8192}]
SMALL_CONFIG = {'M': 5, 'N': 64}


class Model(nn.Module):
    def __init__(self, N):
        super().__init__()
        self.bias = nn.Parameter(0.1 * torch.randn(N, dtype=torch.bfloat16))

    def forward(self, x, residual):
        return residual + F.gelu(x + self.bias)

def get_inputs(M=8192, N=4096):
    return [torch.randn(M, N, dtype=torch.bfloat16), torch.randn(M, N, dtype=torch.bfloat16)]


def get_init_inputs(M=8192, N=4096):
    return [N]
