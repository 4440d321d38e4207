"""GPT-NeoX / Llama rotary embedding with position ids (HF apply_rotary_pos_emb, rotate_half style): the cos / sin
rows of each token are gathered from (P, D) float32 caches by position_ids (B, S) int64 (packed or left-padded
batches: any positions in [0, P)), then q_embed = q * cos + rotate_half(q) * sin with
rotate_half(q) = cat(-q[..., D/2:], q[..., :D/2]); q (B, S, H, D) bf16, math in float32, output bf16.
Llama-2/3 7-8B heads (H = 32, D = 128), cache of P = 8192 positions. B, S and P are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 4, "S": 2048, "H": 32, "D": 128, "P": 8192},
    {"B": 1, "S": 8192, "H": 32, "D": 128, "P": 8192},
    {"B": 64, "S": 1, "H": 32, "D": 128, "P": 8192},
]
SMALL_CONFIG = {"B": 2, "S": 27, "H": 4, "D": 128, "P": 96}
FREE_DIMS = ["B", "S", "P"]


def BYTES(B, S, H, D, P):
    return 2 * B * S * H * D * 2 + B * S * 8 + 2 * B * S * D * 4


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Model(nn.Module):
    def forward(self, q, position_ids, cos_cache, sin_cache):
        cos = cos_cache[position_ids].unsqueeze(2)      # (B, S, 1, D)
        sin = sin_cache[position_ids].unsqueeze(2)
        qf = q.float()
        return (qf * cos + _rotate_half(qf) * sin).to(q.dtype)


def get_inputs(B=4, S=2048, H=32, D=128, P=8192):
    inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.arange(P, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    position_ids = torch.randint(0, P, (B, S), dtype=torch.int64)
    return [torch.randn(B, S, H, D, dtype=torch.bfloat16), position_ids, emb.cos(), emb.sin()]


def get_init_inputs(B=4, S=2048, H=32, D=128, P=8192):
    return []
