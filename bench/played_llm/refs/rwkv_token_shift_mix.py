"""RWKV token-shift mix (RWKV-4/5 time-mix / channel-mix input): x (B, T, C) bf16, mu (C,) bf16 parameter;
x_prev = x shifted by one along T with zeros at t = 0 (nn.ZeroPad2d((0, 0, 1, -1)) in the RWKV code), and
    out = x * mu + x_prev * (1 - mu)
computed in float32, output bf16 (B, T, C). An elementwise op with a one-row halo along T.
Configs: an 8 x 4096-token training batch at RWKV-4 1.5B's C=2048, one 16384-token sequence at RWKV-5 7B's C=4096,
16 x 1024 tokens at RWKV-4 3B's C=2560. T is free (B is 1 in one config; the shift runs along T, so shrinking T keeps
the t = 0 boundary in every sequence).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"B": 8, "T": 4096, "C": 2048},
    {"B": 1, "T": 16384, "C": 4096},
    {"B": 16, "T": 1024, "C": 2560},
]
SMALL_CONFIG = {"B": 2, "T": 7, "C": 64}
FREE_DIMS = ["T"]


def BYTES(B, T, C):
    return 2 * B * T * C * 2 + C * 2


def FLOPS(B, T, C):
    return 4 * B * T * C


class Model(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.mu = nn.Parameter(torch.rand(C).to(torch.bfloat16))     # time_mix in [0, 1)

    def forward(self, x):
        xf = x.float()
        x_prev = F.pad(xf, (0, 0, 1, -1))                            # x_prev[:, t] = x[:, t - 1], 0 at t = 0
        m = self.mu.float()
        return (xf * m + x_prev * (1.0 - m)).to(x.dtype)


def get_inputs(B=8, T=4096, C=2048):
    return [torch.randn(B, T, C, dtype=torch.bfloat16)]


def get_init_inputs(B=8, T=4096, C=2048):
    return [C]
