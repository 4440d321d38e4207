"""QK-norm (Qwen3, OLMo 2): RMSNorm over each head's D values of q (B, S, H, D) bf16, weight (D,), eps 1e-6, math
in fp32, output bf16 (B, S, H, D). B and S are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "S": 4096, "H": 32, "D": 128},
    {"B": 8, "S": 1024, "H": 64, "D": 128},
    {"B": 16, "S": 512, "H": 8, "D": 64},
]
SMALL_CONFIG = {"B": 2, "S": 5, "H": 3, "D": 64}
FREE_DIMS = ["B", "S"]


def BYTES(B, S, H, D):
    return 2 * B * S * H * D * 2 + D * 2


class Model(nn.Module):
    def __init__(self, D=128, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(D))
        self.eps = eps

    def forward(self, q):
        qf = q.float()
        qf = qf * torch.rsqrt(qf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * qf).to(q.dtype)


def get_inputs(B=1, S=4096, H=32, D=128):
    return [torch.randn(B, S, H, D, dtype=torch.bfloat16)]


def get_init_inputs(B=1, S=4096, H=32, D=128):
    return [D]
