"""LayerNorm backward, the input gradient only: given x (N, D) bf16, weight (D,) bf16 and grad_out (N, D) bf16 of
y = layer_norm(x, (D,), weight, bias, eps=1e-5), return dx (N, D) bf16 (fp32 math; the statistics are recomputed
from x, as a fused backward that does not save mean / rstd would). Closed form, with xhat = (x - mean) * rstd and
g = grad_out * weight:  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))  (means over D).
N (tokens) is free; D is a real hidden size (Llama-7B / 70B-class widths).
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 8192, "D": 4096},
    {"N": 4096, "D": 8192},
    {"N": 16384, "D": 4096},
]
SMALL_CONFIG = {"N": 3, "D": 256}
FREE_DIMS = ["N"]
EPS = 1e-5


def BYTES(N, D):
    return 3 * N * D * 2 + D * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight, grad_out):
        xf = x.float()
        mean = xf.mean(dim=-1, keepdim=True)
        var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
        rstd = torch.rsqrt(var + EPS)
        xhat = (xf - mean) * rstd
        g = grad_out.float() * weight.float()
        dx = rstd * (g - g.mean(dim=-1, keepdim=True) - xhat * (g * xhat).mean(dim=-1, keepdim=True))
        return dx.to(x.dtype)


def get_inputs(N=8192, D=4096):
    x = torch.randn(N, D, dtype=torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(D)).to(torch.bfloat16)
    grad_out = torch.randn(N, D, dtype=torch.bfloat16)
    return [x, weight, grad_out]


def get_init_inputs(N=8192, D=4096):
    return []
