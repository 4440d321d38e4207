"""Residual add fused with a gated RMSNorm (the pre-norm of a Mamba-2 / gated-delta-net block, the output gate of
Qwen3-Next-style gated attention: the normalised stream scaled by a sigmoid gate computed from the same token), bf16:
x, residual, gate (T, D) bfloat16, weight (D,) bfloat16 (a parameter), eps = 1e-6,
    h = x + residual                          (rounded to bf16, as torch adds two bf16 tensors)
    y = h * rsqrt(mean_d h^2 + eps) * weight * sigmoid(gate)   (in float32 from the bf16 h, rounded to bf16)
i.e. h = x + residual; y = (F.rms_norm(h.float(), (D,), eps=1e-6) * weight.float() * torch.sigmoid(gate.float()))
.to(bfloat16), returned as (y, h): two outputs, h the residual stream the next block adds to. One row of D (2048 to
8192) is one token; the mean of squares is over the whole row.
Configs (T, D): Qwen3-Next-80B-A3B (hidden 2048) on 4 sequences of 4096 tokens; Mamba-2 / Codestral-Mamba 7B (hidden
4096) on 2 x 4096 tokens; a 70B-class hidden of 8192 on 4096 tokens. T is free; D is the hidden size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"T": 16384, "D": 2048},
    {"T": 8192, "D": 4096},
    {"T": 4096, "D": 8192},
]
SMALL_CONFIG = {"T": 5, "D": 2048}
FREE_DIMS = ["T"]


def BYTES(T, D):
    return 3 * T * D * 2 + D * 2 + 2 * T * D * 2


class Model(nn.Module):
    def __init__(self, D, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(D, dtype=torch.bfloat16))

    def forward(self, x, residual, gate):
        h = x + residual
        hf = h.float()
        y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + self.eps)
        y = y * self.weight.float() * torch.sigmoid(gate.float())
        return y.to(x.dtype), h


def get_inputs(T=16384, D=2048):
    return [torch.randn(T, D).to(torch.bfloat16), torch.randn(T, D).to(torch.bfloat16),
            torch.randn(T, D).to(torch.bfloat16)]


def get_init_inputs(T=16384, D=2048):
    return [D, 1e-6]
