"""nn.RMSNorm (LLaMA hidden 4096 / 8192), bf16."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 8192, 'D': 4096}, {'M': 8192, 'D': 8192}]
SMALL_CONFIG = {'M': 5, 'D': 64}


class Model(nn.Module):
    def __init__(self, D):
        super().__init__()
        self.norm = nn.RMSNorm(D, eps=1e-5).to(torch.bfloat16)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(D))

    def forward(self, x):
        return self.norm(x)

def get_inputs(M=8192, D=4096):
    return [torch.randn(M, D, dtype=torch.bfloat16)]


def get_init_inputs(M=8192, D=4096):
    return [D]
