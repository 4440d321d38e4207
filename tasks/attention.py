"""O = softmax(Q K^T / sqrt(D)) V, forward, causal or not, with Q, K, V and O in BSHD layout (batch, seq, heads,
head dim), fp16. The reference is PyTorch's scaled_dot_product_attention on BHSD views computed in float32 (fp16 SDPA on the CPU
is itself off by up to ~7e-3, more than the tolerance), rounded to fp16 and returned in BSHD.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = ((8, 1024, 16, 64), (4, 2048, 16, 128), (2, 4096, 32, 128), (1, 8192, 16, 128))
CONFIGS = [{"B": b, "S": s, "H": h, "D": d, "causal": c} for b, s, h, d in SHAPES for c in (False, True)]
SMALL_CONFIG = {"B": 1, "S": 40, "H": 2, "D": 64, "causal": True}
FREE_DIMS = ["B", "S"]
TOLERANCES = {"float16": (1e-3, 1e-2)}  # outputs are averages, often well below 1e-2


def BYTES(B, S, H, D, causal):
    return 4 * B * S * H * D * 2


def FLOPS(B, S, H, D, causal):
    return 4 * B * H * S * S * D // (2 if causal else 1)


class Model(nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        o = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                           v.transpose(1, 2).float(), is_causal=self.causal)
        return o.transpose(1, 2).to(q.dtype)


def get_inputs(B=4, S=2048, H=16, D=128, causal=False):
    return [torch.randn(B, S, H, D, dtype=torch.float16) for _ in range(3)]


def get_init_inputs(B=4, S=2048, H=16, D=128, causal=False):
    return [causal]
