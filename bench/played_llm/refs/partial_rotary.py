"""Partial rotary position embedding (GPT-NeoX / Pythia / Phi-2 / StableLM: HF's `rotary_pct` or
`partial_rotary_factor`): only the first R of each head's D dims are rotated, rotate_half style within those R
dims (x_rot * cos + cat(-x_rot[..., R/2:], x_rot[..., :R/2]) * sin), the other D - R dims pass through unchanged.
q (B, S, H, D) bf16, cos and sin (S, R) float32 for positions 0..S-1 (base 10000 over the R rotary dims), math in
float32, output (B, S, H, D) bf16.
Phi-2 (H = 32, D = 80, R = 32: factor 0.4) at 2048 tokens, GPT-NeoX-20B (H = 64, D = 96, R = 24: rotary_pct 0.25)
at 4 x 2048, StableLM-3B-4E1T (H = 32, D = 80, R = 20: factor 0.25) at 8 x 4096. B and S are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "S": 2048, "H": 32, "D": 80, "R": 32},
    {"B": 4, "S": 2048, "H": 64, "D": 96, "R": 24},
    {"B": 8, "S": 4096, "H": 32, "D": 80, "R": 20},
]
SMALL_CONFIG = {"B": 2, "S": 7, "H": 3, "D": 80, "R": 32}
FREE_DIMS = ["B", "S"]


def BYTES(B, S, H, D, R):
    return 2 * B * S * H * D * 2 + 2 * S * R * 4


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Model(nn.Module):
    def forward(self, q, cos, sin):
        r = cos.shape[-1]
        qf = q.float()
        q_rot, q_pass = qf[..., :r], qf[..., r:]
        c = cos[None, :, None, :]
        s = sin[None, :, None, :]
        q_rot = q_rot * c + _rotate_half(q_rot) * s
        return torch.cat((q_rot, q_pass), dim=-1).to(q.dtype)


def get_inputs(B=1, S=2048, H=32, D=80, R=32):
    inv = 1.0 / (10000.0 ** (torch.arange(0, R, 2, dtype=torch.float32) / R))
    freqs = torch.arange(S, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return [torch.randn(B, S, H, D, dtype=torch.bfloat16), emb.cos(), emb.sin()]


def get_init_inputs(B=1, S=2048, H=32, D=80, R=32):
    return []
