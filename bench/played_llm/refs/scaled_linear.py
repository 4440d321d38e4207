"""A per-token-scaled linear layer (W8A8-style dequantization after the GEMM, here in bf16): y = (x @ W^T) *
row_scale[:, None] * col_scale[None, :] + bias, x (M, K) bf16, W (N, K) bf16, row_scale (M,) and col_scale (N,)
float32, bias (N,) bf16; accumulate in fp32, output bf16 (M, N). M is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 256, "K": 4096, "N": 4096},
    {"M": 1024, "K": 2048, "N": 8192},
]
SMALL_CONFIG = {"M": 16, "K": 64, "N": 96}
FREE_DIMS = ["M"]


def BYTES(M, K, N):
    return M * K * 2 + N * K * 2 + M * N * 2 + M * 4 + N * 6


class Model(nn.Module):
    def __init__(self, K=4096, N=4096):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(N, K, dtype=torch.bfloat16) / K ** 0.5)
        self.col_scale = nn.Parameter(torch.rand(N) + 0.5)
        self.bias = nn.Parameter(torch.randn(N, dtype=torch.bfloat16))

    def forward(self, x, row_scale):
        y = (x.float() @ self.weight.float().t()) * row_scale[:, None] * self.col_scale[None, :]
        return (y + self.bias.float()).to(x.dtype)


def get_inputs(M=256, K=4096, N=4096):
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.rand(M) + 0.5]


def get_init_inputs(M=256, K=4096, N=4096):
    return [K, N]
