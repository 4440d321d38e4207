"""Causal grouped-query attention, prefill forward (Llama-3 8B: H = 32 query heads sharing H_kv = 8 KV heads, head
dim D = 128): q (B, H, S, D), k and v (B, H_kv, S, D), fp16; query head h reads KV head h // (H // H_kv). The
reference repeats each KV head over its group (repeat_interleave on dim 1) and runs
F.scaled_dot_product_attention(is_causal=True) (scale 1 / sqrt(D); query i sees keys 0..i) in float32, output
(B, H, S, D) cast to fp16. Prompts of 1024 and 4096 tokens, batch 1 and 4. B and S are free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 1, "S": 1024, "H": 32, "H_kv": 8, "D": 128},
    {"B": 4, "S": 1024, "H": 32, "H_kv": 8, "D": 128},
    {"B": 1, "S": 4096, "H": 32, "H_kv": 8, "D": 128},
    {"B": 4, "S": 4096, "H": 32, "H_kv": 8, "D": 128},
]
SMALL_CONFIG = {"B": 1, "S": 100, "H": 8, "H_kv": 2, "D": 64}
FREE_DIMS = ["B", "S"]
TOLERANCES = {"float16": (2e-3, 1e-2)}  # outputs are averages over up to S values, often well below 1e-2


def BYTES(B, S, H, H_kv, D):
    return 2 * (2 * B * H * S * D + 2 * B * H_kv * S * D)


def FLOPS(B, S, H, H_kv, D):
    return 2 * B * H * S * S * D   # causal: half of 4 * B * H * S * S * D


class Model(nn.Module):
    def forward(self, q, k, v):
        G = q.shape[1] // k.shape[1]
        kf = k.float().repeat_interleave(G, dim=1)
        vf = v.float().repeat_interleave(G, dim=1)
        o = F.scaled_dot_product_attention(q.float(), kf, vf, is_causal=True)
        return o.to(q.dtype)


def get_inputs(B=1, S=1024, H=32, H_kv=8, D=128):
    q = torch.randn(B, H, S, D, dtype=torch.float16)
    k = torch.randn(B, H_kv, S, D, dtype=torch.float16)
    v = torch.randn(B, H_kv, S, D, dtype=torch.float16)
    return [q, k, v]


def get_init_inputs(B=1, S=1024, H=32, H_kv=8, D=128):
    return []
