"""KernelBench L2-like: y = Linear(x) * scale + Linear(x) (matmul, scaling, residual add), fp16."""
import torch
import torch.nn as nn

CONFIGS = [{"M": m, "K": k, "N": n} for m, k, n in ((16384, 4096, 4096), (4096, 8192, 8192), (16384, 1024, 4096))]
SMALL_CONFIG = {"M": 33, "K": 64, "N": 48}
FREE_DIMS = ["M"]


def BYTES(M, K, N):
    return 2 * (M * K + K * N + N + M * N)


def FLOPS(M, K, N):
    return 2 * M * N * K


class Model(nn.Module):
    def __init__(self, K, N, scaling_factor=0.5):
        super().__init__()
        self.linear = nn.Linear(K, N, dtype=torch.float16)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.linear(x)
        original_x = x.clone().detach()
        return x * self.scaling_factor + original_x


def get_inputs(M=16384, K=4096, N=4096):
    return [torch.randn(M, K, dtype=torch.float16)]


def get_init_inputs(M=16384, K=4096, N=4096):
    return [K, N, 0.5]
