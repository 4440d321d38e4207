"""LayerNorm backward, the parameter gradients only (the reduction half of a fused LayerNorm backward, as Apex's
cuComputeGradGammaBeta / Triton's `_layer_norm_bwd_dwdb`): given x (M, D) bf16, grad_out dy (M, D) bf16 and the
statistics the forward saved, mean (M,) and rstd (M,) float32, return
    dgamma = sum over rows of dy * (x - mean) * rstd      (D,) float32
    dbeta  = sum over rows of dy                           (D,) float32
(float32 math; two outputs; column reductions over M).
M (tokens of a micro-batch) is free; D is a real hidden size (Llama-2 7B / Llama-3 8B 4096, Llama-3 70B 8192).
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 4096, "D": 4096},
    {"M": 16384, "D": 4096},
    {"M": 4096, "D": 8192},
    {"M": 16384, "D": 8192},
]
SMALL_CONFIG = {"M": 7, "D": 256}
FREE_DIMS = ["M"]


def BYTES(M, D):
    return 2 * M * D * 2 + 2 * M * 4 + 2 * D * 4


def FLOPS(M, D):
    return 4 * M * D


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, dy, mean, rstd):
        xhat = (x.float() - mean.unsqueeze(1)) * rstd.unsqueeze(1)
        g = dy.float()
        dgamma = (g * xhat).sum(dim=0)
        dbeta = g.sum(dim=0)
        return dgamma, dbeta


def get_inputs(M=4096, D=4096):
    x = torch.randn(M, D, dtype=torch.bfloat16)
    dy = torch.randn(M, D, dtype=torch.bfloat16)
    xf = x.float()
    mean = xf.mean(dim=1)                                   # what the forward saved
    rstd = torch.rsqrt(xf.var(dim=1, unbiased=False) + 1e-5)
    return [x, dy, mean, rstd]


def get_init_inputs(M=4096, D=4096):
    return []
