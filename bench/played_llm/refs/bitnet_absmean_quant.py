"""BitNet b1.58 ternary weight quantization (absmean, per tensor; the weight_quant of BitLinear in BitNet b1.58 /
bitnet.cpp's converter):
    w (N, K) bf16
    scale = max(mean(|w|), 1e-5)          ONE scalar over the whole tensor (all N * K elements), in float32
    q = clamp(round(w / scale), -1, 1)    round half to even (torch.round), as int8, values in {-1, 0, 1}
outputs (q (N, K) int8, scale float32 of shape () (a 0-d tensor)); w ~= q * scale. A grid-wide reduction, then a
pointwise pass that needs its result. The original BitLinear multiplies by 1 / scale in the weight's dtype; this
ref divides in float32 (the documented formula).
Configs (N, K): BitNet-b1.58-2B-4T's MLP up / gate (6912, 2560) and down (2560, 6912) projections, a 4096^2
projection of a 7B-class model. N is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 2560, "K": 6912},
    {"N": 6912, "K": 2560},
    {"N": 4096, "K": 4096},
]
SMALL_CONFIG = {"N": 37, "K": 256}
FREE_DIMS = ["N"]


def BYTES(N, K):
    return N * K * 2 + N * K + 4


class Model(nn.Module):
    def forward(self, w):
        wf = w.float()
        scale = wf.abs().mean().clamp(min=1e-5)
        q = torch.round(wf / scale).clamp(-1, 1).to(torch.int8)
        return q, scale


def get_inputs(N=2560, K=6912):
    return [(torch.randn(N, K) * 0.02).to(torch.bfloat16)]


def get_init_inputs(N=2560, K=6912):
    return []
