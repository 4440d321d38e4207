"""Split a fused QKV projection output into q, k, v heads and apply NeoX-style rotary embedding to q and k
(the attention prologue of Llama-3 style GQA models, as in vLLM's qkv split + rotary):
    x (T, (H + 2*G) * D) fp16: columns [0, H*D) are q, [H*D, (H+G)*D) are k, [(H+G)*D, (H+2G)*D) are v
    cos, sin (T, D/2) float32 (the per-token tables, already gathered by position)
    for q and k, per head, with x1 = first half of the head, x2 = second half (NeoX / rotate_half layout):
        out = cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin)       computed in float32, rounded once to fp16
    v is copied unchanged.
outputs (q (T, H, D), k (T, G, D), v (T, G, D)) fp16, contiguous.
Configs: Llama-3-8B (H=32, G=8, D=128) with T = 1 (decode), 512 and 4096 tokens. T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 1, "H": 32, "G": 8, "D": 128},
    {"T": 512, "H": 32, "G": 8, "D": 128},
    {"T": 4096, "H": 32, "G": 8, "D": 128},
]
SMALL_CONFIG = {"T": 5, "H": 4, "G": 2, "D": 32}
FREE_DIMS = ["T"]


def BYTES(T, H, G, D):
    return 2 * 2 * T * (H + 2 * G) * D + 2 * 4 * T * (D // 2)


def FLOPS(T, H, G, D):
    return 6 * T * (H + G) * D


class Model(nn.Module):
    def __init__(self, H=32, G=8, D=128):
        super().__init__()
        self.H, self.G, self.D = H, G, D

    def forward(self, x, cos, sin):
        T = x.shape[0]
        H, G, D = self.H, self.G, self.D
        q, k, v = x.split([H * D, G * D, G * D], dim=-1)
        q = q.view(T, H, D)
        k = k.view(T, G, D)
        v = v.reshape(T, G, D).contiguous()
        c = cos[:, None, :]
        s = sin[:, None, :]

        def rope(t):
            t = t.float()
            t1, t2 = t[..., : D // 2], t[..., D // 2:]
            return torch.cat([t1 * c - t2 * s, t2 * c + t1 * s], dim=-1).to(x.dtype).contiguous()

        return rope(q), rope(k), v


def get_inputs(T=512, H=32, G=8, D=128):
    x = torch.randn(T, (H + 2 * G) * D, dtype=torch.float16)
    pos = torch.arange(T, dtype=torch.float32)
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.outer(pos, inv_freq)
    return [x, freqs.cos(), freqs.sin()]


def get_init_inputs(T=512, H=32, G=8, D=128):
    return [H, G, D]
