"""SwiGLU on a fused gate/up projection output: silu(gate) * up via chunk (LLaMA MLP), bf16."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 8192, 'I': 11008}, {'M': 8192, 'I': 14336}]
SMALL_CONFIG = {'M': 5, 'I': 96}


class Model(nn.Module):
    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

def get_inputs(M=8192, I=11008):
    return [torch.randn(M, 2 * I, dtype=torch.bfloat16)]


def get_init_inputs(M=8192, I=11008):
    return []
