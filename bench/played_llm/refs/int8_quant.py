"""Symmetric int8 per-row quantization: x (M, K) fp16 -> (q int8 (M, K), scales fp32 (M, 1)).

scale = max|x| / 127 (clamped to 1e-8), q = clamp(round(x / scale), -127, 127) (round half to even, torch.round).
"""
import torch
import torch.nn as nn

CONFIGS = [{"M": 8192, "K": k} for k in (4096, 5120, 8192, 14336)]
SMALL_CONFIG = {"M": 5, "K": 128}
FREE_DIMS = ["M"]


def BYTES(M, K):
    return M * K * 2 + M * K + M * 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float()
        scale = (xf.abs().amax(dim=-1, keepdim=True) / 127.0).clamp(min=1e-8)
        q = torch.round(xf / scale).clamp(-127, 127).to(torch.int8)
        return q, scale


def get_inputs(M=8192, K=4096):
    return [torch.randn(M, K, dtype=torch.float16)]


def get_init_inputs(M=8192, K=4096):
    return []
