"""Sliding-window grouped-query attention, decode step (Mistral-7B: 32 query heads sharing 8 KV heads, head dim
128, window 4096). The new token (position S - 1) attends only to the last W cached keys, positions S - W .. S - 1
(all S when S <= W). q (B, Hq, D), k_cache and v_cache (B, S, Hkv, D) fp16; query head h reads KV head
h // (Hq // Hkv). o = softmax(q k^T / sqrt(D) over the window) v, softmax and sums in fp32, output (B, Hq, D) fp16.
B (sequences) and S (cache length) are free; W is the model's window.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 4, "S": 16384, "W": 4096, "Hq": 32, "Hkv": 8, "D": 128},
    {"B": 16, "S": 8192, "W": 4096, "Hq": 32, "Hkv": 8, "D": 128},
    {"B": 8, "S": 2048, "W": 4096, "Hq": 32, "Hkv": 8, "D": 128},
]
SMALL_CONFIG = {"B": 2, "S": 300, "W": 128, "Hq": 8, "Hkv": 2, "D": 64}
FREE_DIMS = ["B", "S"]
TOLERANCES = {"float16": (1e-3, 1e-2)}  # outputs are averages over up to W values, often well below 1e-2


def BYTES(B, S, W, Hq, Hkv, D):
    return 2 * (2 * B * min(S, W) * Hkv * D + 2 * B * Hq * D)


def FLOPS(B, S, W, Hq, Hkv, D):
    return 4 * B * Hq * min(S, W) * D


class Model(nn.Module):
    def __init__(self, W=4096):
        super().__init__()
        self.W = W

    def forward(self, q, k_cache, v_cache):
        B, Hq, D = q.shape
        S, Hkv = k_cache.shape[1], k_cache.shape[2]
        G = Hq // Hkv
        qg = q.float().view(B, Hkv, G, D)
        k = k_cache.float().permute(0, 2, 1, 3)        # (B, Hkv, S, D)
        v = v_cache.float().permute(0, 2, 1, 3)
        s = torch.matmul(qg, k.transpose(-1, -2)) * (D ** -0.5)   # (B, Hkv, G, S)
        pos = torch.arange(S, device=q.device)
        s = s.masked_fill(pos < S - self.W, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p, v)                          # (B, Hkv, G, D)
        return o.reshape(B, Hq, D).to(q.dtype)


def get_inputs(B=4, S=16384, W=4096, Hq=32, Hkv=8, D=128):
    q = torch.randn(B, Hq, D, dtype=torch.float16)
    k = torch.randn(B, S, Hkv, D, dtype=torch.float16)
    v = torch.randn(B, S, Hkv, D, dtype=torch.float16)
    return [q, k, v]


def get_init_inputs(B=4, S=16384, W=4096, Hq=32, Hkv=8, D=128):
    return [W]
