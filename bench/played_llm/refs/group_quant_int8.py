"""Per-token-group int8 quantization of activations (SGLang / vLLM per_token_group_quant_int8, the input side of a
block-quantized W8A8 linear; DeepSeek-V3 uses groups of 128): x (T, K) bf16 is cut into groups of G consecutive
elements of a row; per group, in float32, scale = max(|x| over the group, 1e-10) / 127 and q = round(x / scale)
(half to even) clamped to [-128, 127]. Outputs q (T, K) int8 and scales (T, K / G) float32.
DeepSeek-V3 hidden (7168) and MoE expert intermediate (2048) at T = 4096 tokens, dense intermediate (18432) at
T = 2048, a decode step of 64 tokens at 7168. T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 4096, "K": 7168},
    {"T": 4096, "K": 2048},
    {"T": 2048, "K": 18432},
    {"T": 64, "K": 7168},
]
SMALL_CONFIG = {"T": 5, "K": 512}
FREE_DIMS = ["T"]


def BYTES(T, K):
    return T * K * 2 + T * K + T * (K // 128) * 4


class Model(nn.Module):
    def __init__(self, group_size=128):
        super().__init__()
        self.group_size = group_size

    def forward(self, x):
        T, K = x.shape
        G = self.group_size
        xf = x.float().view(T, K // G, G)
        scale = xf.abs().amax(dim=-1, keepdim=True).clamp(min=1e-10) / 127.0
        q = (xf / scale).round().clamp(-128, 127).to(torch.int8)
        return q.view(T, K), scale.view(T, K // G)


def get_inputs(T=4096, K=7168):
    return [torch.randn(T, K, dtype=torch.bfloat16)]


def get_init_inputs(T=4096, K=7168):
    return [128]
