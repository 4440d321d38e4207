"""The backward of RMSNorm (Llama / Mistral: y = x * rsqrt(mean(x^2, -1) + eps) * weight, eps 1e-5), both
gradients: x (M, D) bf16, weight (D,) bf16, grad_out (M, D) bf16; math in float32 with r = rsqrt(mean(x^2) + eps),
xhat = x * r:
    dweight = sum over the M rows of grad_out * xhat                     (D,) float32, a column reduction
    dx = r * (g - xhat * mean(g * xhat, -1)),  g = grad_out * weight     (M, D) bf16
Returns (dx, dweight).
Llama-2/3 7-8B (D = 4096) at 8192 and 16384 tokens, Llama-2 70B / Llama-3 70B (D = 8192) at 8192 tokens. M is
free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 8192, "D": 4096},
    {"M": 16384, "D": 4096},
    {"M": 8192, "D": 8192},
]
SMALL_CONFIG = {"M": 37, "D": 256}
FREE_DIMS = ["M"]


def BYTES(M, D):
    return 3 * M * D * 2 + D * 2 + D * 4


def FLOPS(M, D):
    return 10 * M * D


class Model(nn.Module):
    def __init__(self, eps=1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, grad_out):
        xf = x.float()
        g_out = grad_out.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        xhat = xf * r
        dweight = (g_out * xhat).sum(0)
        g = g_out * weight.float()
        dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx.to(x.dtype), dweight


def get_inputs(M=8192, D=4096):
    x = torch.randn(M, D, dtype=torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(D)).to(torch.bfloat16)
    grad_out = torch.randn(M, D, dtype=torch.bfloat16)
    return [x, weight, grad_out]


def get_init_inputs(M=8192, D=4096):
    return []
