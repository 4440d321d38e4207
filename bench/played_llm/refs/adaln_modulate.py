"""DiT adaLN-Zero modulation (the `modulate(norm(x), shift, scale)` of DiT / SD3 / Flux blocks):
    x (B, T, C) bf16 tokens; shift (B, C) bf16 and scale (B, C) bf16 (one row per sample, from the conditioning MLP)
    mean[b, t] = mean(x[b, t, :]), var[b, t] = mean((x[b, t, :] - mean)^2)   (biased), both in float32
    out[b, t, c] = (x[b, t, c] - mean) * rsqrt(var + 1e-6) * (1 + scale[b, c]) + shift[b, c]
LayerNorm without affine weights (elementwise_affine=False), eps 1e-6; all math in float32, rounded once to bf16.
output (B, T, C) bf16. Configs (B, T, C): DiT-XL/2 at 256x256 (8, 256, 1152), SD3-medium at 1024x1024
(2, 4096, 1536), Flux.1 at 1024x1024 (1, 4096, 3072). B and T are free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 8, "T": 256, "C": 1152},
    {"B": 2, "T": 4096, "C": 1536},
    {"B": 1, "T": 4096, "C": 3072},
]
SMALL_CONFIG = {"B": 2, "T": 5, "C": 64}
FREE_DIMS = ["B", "T"]


def BYTES(B, T, C):
    return 2 * B * T * C * 2 + 2 * B * C * 2


class Model(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, shift, scale):
        xf = x.float()
        y = F.layer_norm(xf, (xf.shape[-1],), eps=self.eps)
        y = y * (1.0 + scale.float()[:, None, :]) + shift.float()[:, None, :]
        return y.to(x.dtype)


def get_inputs(B=8, T=256, C=1152):
    x = torch.randn(B, T, C, dtype=torch.bfloat16)
    shift = (torch.randn(B, C) * 0.5).to(torch.bfloat16)
    scale = (torch.randn(B, C) * 0.5).to(torch.bfloat16)
    return [x, shift, scale]


def get_init_inputs(B=8, T=256, C=1152):
    return []
