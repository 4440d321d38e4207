"""SwiGLU backward (the MLP activation of Llama / Mistral): given gate g, up u and grad_out dy of
y = silu(g) * u, all (N, I) bf16, return (dg, du), both (N, I) bf16, math in fp32:
    s = sigmoid(g);  du = dy * g * s;  dg = dy * u * s * (1 + g * (1 - s)).
N (tokens) is free; I is a real intermediate size (Llama-7B 11008, Llama-3-8B / Mistral-7B 14336).
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 4096, "I": 11008},
    {"N": 8192, "I": 11008},
    {"N": 2048, "I": 14336},
]
SMALL_CONFIG = {"N": 3, "I": 256}
FREE_DIMS = ["N"]


def BYTES(N, I):
    return 5 * N * I * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, g, u, dy):
        gf, uf, dyf = g.float(), u.float(), dy.float()
        s = torch.sigmoid(gf)
        du = dyf * gf * s
        dg = dyf * uf * s * (1.0 + gf * (1.0 - s))
        return dg.to(g.dtype), du.to(u.dtype)


def get_inputs(N=4096, I=11008):
    g = torch.randn(N, I, dtype=torch.bfloat16)
    u = torch.randn(N, I, dtype=torch.bfloat16)
    dy = torch.randn(N, I, dtype=torch.bfloat16)
    return [g, u, dy]


def get_init_inputs(N=4096, I=11008):
    return []
