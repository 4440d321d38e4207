"""Batched GEMM plus a per-batch bias row (torch.baddbmm), as in a multi-head projection with a per-head bias:
    out[b] = bias[b] + a[b] @ b_[b]        a (B, M, K), b_ (B, K, N), bias (B, 1, N), all fp16
output (B, M, N) fp16 (torch accumulates the product in float32, adds the bias, rounds once to fp16).
Configs: (B, M, K, N) = (32, 512, 128, 512) (32 heads of a 512-token projection with head dim 128),
(64, 256, 64, 256), (16, 1024, 128, 128). B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 32, "M": 512, "K": 128, "N": 512},
    {"B": 64, "M": 256, "K": 64, "N": 256},
    {"B": 16, "M": 1024, "K": 128, "N": 128},
]
SMALL_CONFIG = {"B": 3, "M": 40, "K": 32, "N": 48}
FREE_DIMS = ["B"]


def BYTES(B, M, K, N):
    return 2 * B * (M * K + K * N + N + M * N)


def FLOPS(B, M, K, N):
    return 2 * B * M * K * N


class Model(nn.Module):
    def forward(self, bias, a, b):
        return torch.baddbmm(bias, a, b)


def get_inputs(B=32, M=512, K=128, N=512):
    return [
        torch.randn(B, 1, N, dtype=torch.float16),
        torch.randn(B, M, K, dtype=torch.float16),
        torch.randn(B, K, N, dtype=torch.float16),
    ]


def get_init_inputs(B=32, M=512, K=128, N=512):
    return []
