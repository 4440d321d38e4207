"""A linear layer with a LoRA adapter (PEFT's lora.Linear forward, dropout off, unmerged):
    x (T, K) fp16 tokens, W (N, K) fp16 the frozen weight, A (r, K) fp16 lora_A, B (N, r) fp16 lora_B, r = 16
    y = x @ W^T + scale * ((x @ A^T) @ B^T),   scale = lora_alpha / r = 2.0
computed in float32 (the rank-16 intermediate x @ A^T kept in float32), rounded to fp16; output y (T, N) fp16.
Configs (T, K, N): a 16-token decode batch and a 512-token prefill through a Llama-2-7B q_proj (4096 -> 4096), and
2048 tokens through its gate_proj (4096 -> 11008). T is free.
"""
import torch
import torch.nn as nn

R = 16
SCALE = 2.0

CONFIGS = [
    {"T": 16, "K": 4096, "N": 4096},
    {"T": 512, "K": 4096, "N": 4096},
    {"T": 2048, "K": 4096, "N": 11008},
]
SMALL_CONFIG = {"T": 5, "K": 128, "N": 96}
FREE_DIMS = ["T"]


def BYTES(T, K, N):
    return 2 * (T * K + N * K + R * K + N * R + T * N)


def FLOPS(T, K, N):
    return 2 * T * K * N + 2 * T * K * R + 2 * T * R * N


class Model(nn.Module):
    def forward(self, x, W, A, B):
        xf = x.float()
        base = xf @ W.float().t()
        xa = xf @ A.float().t()                       # (T, r) float32
        y = base + SCALE * (xa @ B.float().t())
        return y.to(torch.float16)


def get_inputs(T=512, K=4096, N=4096):
    return [
        torch.randn(T, K, dtype=torch.float16),
        (torch.randn(N, K) * K ** -0.5).to(torch.float16),
        (torch.randn(R, K) * K ** -0.5).to(torch.float16),
        (torch.randn(N, R) * 0.1).to(torch.float16),
    ]


def get_init_inputs(T=512, K=4096, N=4096):
    return []
