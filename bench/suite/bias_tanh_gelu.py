"""GPT-2 MLP epilogue: gelu(x + bias, approximate='tanh'), fp16."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 8192, 'N': 3072}, {'M': 8192, 'N': 12288}]
SMALL_CONFIG = {'M': 5, 'N': 64}


class Model(nn.Module):
    def __init__(self, N):
        super().__init__()
        self.bias = nn.Parameter(0.1 * torch.randn(N, dtype=torch.float16))

    def forward(self, x):
        return F.gelu(x + self.bias, approximate="tanh")

def get_inputs(M=8192, N=3072):
    return [torch.randn(M, N, dtype=torch.float16)]


def get_init_inputs(M=8192, N=3072):
    return [N]
