"""Backward of interleaved (GPT-J style) rotary position embedding, the gradient a training step sends back through
RoPE (GPT-J, Meta's reference Llama / Mistral code and DeepSeek-V2/V3's MLA rope part, which rotate adjacent pairs
(x[2i], x[2i+1]) via view_as_complex): the forward
    out[..., 2i]   = x[..., 2i] * cos[s, i] - x[..., 2i+1] * sin[s, i]
    out[..., 2i+1] = x[..., 2i+1] * cos[s, i] + x[..., 2i] * sin[s, i]
is a rotation by theta = s * inv_freq[i], so grad_x is grad_out rotated by -theta:
    gx[..., 2i]   = g[..., 2i] * cos[s, i] + g[..., 2i+1] * sin[s, i]
    gx[..., 2i+1] = g[..., 2i+1] * cos[s, i] - g[..., 2i] * sin[s, i]
grad_out g (B, S, H, D) bfloat16 contiguous, cos and sin (S, D // 2) float32 tables (position s = 0..S-1, base 10000,
FIXED_INPUTS: the tables as get_inputs builds them); the math in float32, gx (B, S, H, D) rounded to bfloat16.
Configs (B, S, H, D): Llama-2-7B (32 heads of 128) on 4 x 4096 tokens; Llama-3-8B (32 query heads of 128) on 2 x 8192;
DeepSeek-V3's MLA query rope part (128 heads of 64) on 2 x 4096. B, S, H are free; D is the head (rotary) dim.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 4, "S": 4096, "H": 32, "D": 128},
    {"B": 2, "S": 8192, "H": 32, "D": 128},
    {"B": 2, "S": 4096, "H": 128, "D": 64},
]
SMALL_CONFIG = {"B": 1, "S": 7, "H": 3, "D": 64}
FREE_DIMS = ["B", "S", "H"]
FIXED_INPUTS = [1, 2]   # cos and sin: the rotary tables, not drawn


def BYTES(B, S, H, D):
    return 2 * B * S * H * D * 2 + 2 * S * (D // 2) * 4


class Model(nn.Module):
    def forward(self, grad_out, cos, sin):
        g = grad_out.float()
        g0, g1 = g[..., 0::2], g[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        gx = torch.stack((g0 * c + g1 * s, g1 * c - g0 * s), dim=-1).flatten(-2)
        return gx.to(grad_out.dtype)


def get_inputs(B=4, S=4096, H=32, D=128):
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    theta = torch.outer(torch.arange(S, dtype=torch.float32), inv_freq)
    return [torch.randn(B, S, H, D).to(torch.bfloat16), torch.cos(theta), torch.sin(theta)]


def get_init_inputs(B=4, S=4096, H=32, D=128):
    return []
