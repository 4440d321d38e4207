"""KernelBench level 2, problem 70 (Gemm_Sigmoid_Scaling_ResidualAdd), float32 throughout as KernelBench writes it:
y = gemm(x) + scaling_factor * sigmoid(gemm(x)) with gemm(x) = x @ W^T + b, x (M, K) float32, nn.Linear(K, N)
float32 weight (N, K) and bias (N,), scaling_factor 2.0, output (M, N) float32. KernelBench's own sizes are small
(batch 128, 1024 -> 512); here square-ish GEMMs of 2048-4096 as a transformer layer's projections (4096 x 4096 at
4096 tokens, a 2048-wide model, a 2048 -> 8192 MLP projection). torch computes the float32 matmul in full float32
(torch.backends.cuda.matmul.allow_tf32 is False by default). M is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 4096, "K": 4096, "N": 4096},
    {"M": 2048, "K": 2048, "N": 2048},
    {"M": 4096, "K": 2048, "N": 8192},
]
SMALL_CONFIG = {"M": 40, "K": 64, "N": 96}
FREE_DIMS = ["M"]


def BYTES(M, K, N):
    return 4 * (M * K + N * K + N + M * N)


def FLOPS(M, K, N):
    return 2 * M * N * K


class Model(nn.Module):
    def __init__(self, K, N, scaling_factor=2.0):
        super().__init__()
        self.gemm = nn.Linear(K, N)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.gemm(x)
        original_x = x
        x = torch.sigmoid(x)
        x = x * self.scaling_factor
        x = x + original_x
        return x


def get_inputs(M=4096, K=4096, N=4096):
    return [torch.randn(M, K)]


def get_init_inputs(M=4096, K=4096, N=4096):
    return [K, N, 2.0]
