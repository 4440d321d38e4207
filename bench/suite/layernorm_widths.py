"""nn.LayerNorm over odd widths 100/200/333 and 768, fp16."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 16384, 'N': 100}, {'M': 16384, 'N': 200}, {'M': 16384, 'N': 333}, {'M': 16384, 'N': 768}]
SMALL_CONFIG = {'M': 7, 'N': 100}


class Model(nn.Module):
    def __init__(self, N):
        super().__init__()
        self.norm = nn.LayerNorm(N).half()
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(N))
            self.norm.bias.copy_(0.1 * torch.randn(N))

    def forward(self, x):
        return self.norm(x)

def get_inputs(M=16384, N=100):
    return [torch.randn(M, N, dtype=torch.float16)]


def get_init_inputs(M=16384, N=100):
    return [N]
