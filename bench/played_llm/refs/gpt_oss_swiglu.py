"""GPT-OSS's clamped SwiGLU (GptOssExperts._apply_gate) on the interleaved gate/up projection of an MoE expert:
x (T, 2 * I) bf16, the gate in the even columns and the up projection in the odd ones:
    g = x[:, 0::2].clamp(max=limit)           (gate: clamped from above only)
    u = x[:, 1::2].clamp(-limit, limit)       (up: clamped on both sides)
    out = g * sigmoid(alpha * g) * (u + 1)    alpha = 1.702, limit = 7.0
output (T, I) bf16. As in the model, every step runs in bf16 (torch's eager ops on bf16 tensors: each op's result
rounded to bf16; sigmoid computed in float32 inside and rounded).
Configs: gpt-oss (I = 2880, both the 20b and the 120b) at 4096 and 16384 routed tokens, and its tensor-parallel
shard of 2 (I = 1440) at 8192 tokens. T is free.
"""
import torch
import torch.nn as nn

ALPHA = 1.702
LIMIT = 7.0

CONFIGS = [
    {"T": 4096, "I": 2880},
    {"T": 16384, "I": 2880},
    {"T": 8192, "I": 1440},
]
SMALL_CONFIG = {"T": 8, "I": 256}
FREE_DIMS = ["T"]
# the evaluator draws its own inputs; this one also reaches the clamps at |x| = 7 (about 8% of the values)
EXTRA_DISTRIBUTIONS = {"normal_x4": lambda shape, g: torch.randn(shape, generator=g) * 4}


def BYTES(T, I):
    return T * 2 * I * 2 + T * I * 2


class Model(nn.Module):
    def __init__(self, alpha=ALPHA, limit=LIMIT):
        super().__init__()
        self.alpha = alpha
        self.limit = limit

    def forward(self, x):
        x_glu, x_linear = x[..., ::2], x[..., 1::2]
        x_glu = x_glu.clamp(min=None, max=self.limit)
        x_linear = x_linear.clamp(min=-self.limit, max=self.limit)
        out_glu = x_glu * torch.sigmoid(self.alpha * x_glu)
        return out_glu * (x_linear + 1)


def get_inputs(T=4096, I=2880):
    # pre-activations of a trained expert reach past the limit: scaled so that about 8% of them are clamped
    return [torch.randn(T, 2 * I, dtype=torch.bfloat16) * 4]


def get_init_inputs(T=4096, I=2880):
    return [ALPHA, LIMIT]
