"""nn.Linear with fp32 master weights cast to bf16 in forward (mixed-precision training), bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 4096, 'K': 4096, 'N': 4096}, {'M': 8192, 'K': 4096, 'N': 11008}]
SMALL_CONFIG = {'M': 33, 'K': 64, 'N': 48}


def FLOPS(M, K, N):
    return 2 * M * K * N


class Model(nn.Module):
    def __init__(self, K, N):
        super().__init__()
        self.lin = nn.Linear(K, N)

    def forward(self, x):
        return F.linear(x, self.lin.weight.to(x.dtype), self.lin.bias.to(x.dtype))

def get_inputs(M=4096, K=4096, N=4096):
    return [torch.randn(M, K, dtype=torch.bfloat16)]


def get_init_inputs(M=4096, K=4096, N=4096):
    return [K, N]
