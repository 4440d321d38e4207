"""Mamba-2's gated RMSNorm with groups (RMSNormGated, norm_before_gate=False, group_size = D / ngroups):
    x, z (T, D) bf16 (T = batch * seqlen tokens), weight (D,) bf16 (a parameter)
    y = x * silu(z)                                                     in float32
    within each group g of G = D / ngroups consecutive channels (g*G .. g*G + G - 1):
        rstd[t, g] = rsqrt(mean(y[t, g*G : (g+1)*G]^2) + 1e-5)
    out[t, c] = y[t, c] * rstd[t, c // G] * weight[c]                  rounded once to bf16
output (T, D) bf16. ngroups = 1 is a plain gated RMSNorm over D. Configs (T, D, ngroups): Mamba2-2.7B
(4096, 5120, 1), Mamba2-8B of the NVIDIA hybrid (2048, 8192, 8), Codestral-Mamba-7B at a decode batch (64, 8192, 8).
T is free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"T": 4096, "D": 5120, "ngroups": 1},
    {"T": 2048, "D": 8192, "ngroups": 8},
    {"T": 64, "D": 8192, "ngroups": 8},
]
SMALL_CONFIG = {"T": 5, "D": 256, "ngroups": 4}
FREE_DIMS = ["T"]


def BYTES(T, D, ngroups):
    return 3 * T * D * 2 + D * 2


class Model(nn.Module):
    def __init__(self, D=5120, ngroups=1, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(D)).to(torch.bfloat16))
        self.ngroups = ngroups
        self.eps = eps

    def forward(self, x, z):
        T, D = x.shape
        y = x.float() * F.silu(z.float())
        yg = y.view(T, self.ngroups, D // self.ngroups)
        yg = yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + self.eps)
        return (yg.view(T, D) * self.weight.float()).to(x.dtype)


def get_inputs(T=4096, D=5120, ngroups=1):
    return [torch.randn(T, D, dtype=torch.bfloat16), torch.randn(T, D, dtype=torch.bfloat16)]


def get_init_inputs(T=4096, D=5120, ngroups=1):
    return [D, ngroups]
