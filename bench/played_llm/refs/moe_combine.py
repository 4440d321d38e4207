"""Fused MoE combine (unpermute + weighted reduce): the grouped expert GEMM leaves its outputs expert_out
(T * K, Hd) bf16 in expert-sorted order; token t's k-th expert output is row src_rows[t, k] (src_rows (T, K) int64,
a permutation of 0 .. T*K-1) and its router weight is weights[t, k] (fp32). out[t] = sum_k weights[t, k] *
expert_out[src_rows[t, k]], math in float32, output bf16 (T, Hd). Mixtral-8x7B (top-2, hidden 4096), Qwen1.5-MoE
(top-4, 2048), DeepSeek-V3 (top-8, 7168). T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 4096, "K": 2, "Hd": 4096},
    {"T": 8192, "K": 4, "Hd": 2048},
    {"T": 2048, "K": 8, "Hd": 7168},
]
SMALL_CONFIG = {"T": 5, "K": 3, "Hd": 1000}
FREE_DIMS = ["T"]


def BYTES(T, K, Hd):
    return T * K * Hd * 2 + T * K * 12 + T * Hd * 2


class Model(nn.Module):
    def forward(self, expert_out, weights, src_rows):
        g = expert_out[src_rows].float()                # (T, K, Hd)
        return (g * weights[..., None]).sum(dim=1).to(expert_out.dtype)


def get_inputs(T=4096, K=2, Hd=4096):
    src_rows = torch.randperm(T * K).to(torch.int64).view(T, K)
    weights = torch.rand(T, K, dtype=torch.float32)
    return [torch.randn(T * K, Hd, dtype=torch.bfloat16), weights, src_rows]


def get_init_inputs(T=4096, K=2, Hd=4096):
    return []
