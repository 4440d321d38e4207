"""Gemma-2 attention, decode step, with attention-logit soft-capping and grouped-query heads (Gemma-2 9B: 16 query
heads sharing 8 KV heads, head dim 256): one query token per sequence attends over its whole KV cache.
q (B, Hq, D) bf16, k_cache and v_cache (B, S, Hkv, D) bf16; query head h reads KV head h // (Hq // Hkv).
    s = (q . k) * D^-0.5                     (Gemma-2 9B: query_pre_attn_scalar = 256 = D)
    s = softcap * tanh(s / softcap),  softcap = 50.0     (attn_logit_softcapping, applied after the scale)
    o = softmax(s over S) v                  all math in float32, output (B, Hq, D) bf16.
q comes from get_inputs (FIXED_INPUTS) with std 5, so the scaled scores have std about 5 and reach 15-20 at
S = 4096: there tanh bends them by 0.5-1.5 and a kernel without (or with a misplaced) cap fails. With N(0, 1)
queries the scores stay below 4, where the cap changes a score by < 0.01 and goes unchecked.
Configs (B, S): 1 and 16 sequences, caches of 1024 and 4096 tokens. B and S are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "S": 1024, "Hq": 16, "Hkv": 8, "D": 256},
    {"B": 1, "S": 4096, "Hq": 16, "Hkv": 8, "D": 256},
    {"B": 16, "S": 1024, "Hq": 16, "Hkv": 8, "D": 256},
    {"B": 16, "S": 4096, "Hq": 16, "Hkv": 8, "D": 256},
]
SMALL_CONFIG = {"B": 2, "S": 29, "Hq": 16, "Hkv": 8, "D": 256}
FREE_DIMS = ["B", "S"]
FIXED_INPUTS = [0]
SOFTCAP = 50.0
TOLERANCES = {"bfloat16": (5e-3, 2e-2)}  # outputs are averages over S values, often well below 1e-2; P in bf16 (as flash-decoding kernels keep it) stays inside


def BYTES(B, S, Hq, Hkv, D):
    return 2 * (2 * B * S * Hkv * D + 2 * B * Hq * D)


def FLOPS(B, S, Hq, Hkv, D):
    return 4 * B * Hq * S * D


class Model(nn.Module):
    def forward(self, q, k_cache, v_cache):
        B, Hq, D = q.shape
        Hkv = k_cache.shape[2]
        G = Hq // Hkv
        qg = q.float().view(B, Hkv, G, D)
        k = k_cache.float().permute(0, 2, 1, 3)        # (B, Hkv, S, D)
        v = v_cache.float().permute(0, 2, 1, 3)
        s = torch.matmul(qg, k.transpose(-1, -2)) * (D ** -0.5)   # (B, Hkv, G, S)
        s = SOFTCAP * torch.tanh(s / SOFTCAP)
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p, v)                          # (B, Hkv, G, D)
        return o.reshape(B, Hq, D).to(q.dtype)


def get_inputs(B=1, S=1024, Hq=16, Hkv=8, D=256):
    q = (torch.randn(B, Hq, D) * 5.0).to(torch.bfloat16)
    k = torch.randn(B, S, Hkv, D, dtype=torch.bfloat16)
    v = torch.randn(B, S, Hkv, D, dtype=torch.bfloat16)
    return [q, k, v]


def get_init_inputs(B=1, S=1024, Hq=16, Hkv=8, D=256):
    return []
