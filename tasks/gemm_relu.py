"""C = ReLU(A @ B): A (M, K), B (K, N), fp16, fp32 accumulation (the seed's GEMM with a ReLU epilogue)."""
import torch
import torch.nn as nn

CONFIGS = [{"M": m, "N": n, "K": k} for m, n, k in
           ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096), (16384, 4096, 1024))]
SMALL_CONFIG = {"M": 40, "N": 48, "K": 64}
FREE_DIMS = ["M"]


def BYTES(M, N, K):
    return 2 * (M * K + K * N + M * N)


def FLOPS(M, N, K):
    return 2 * M * N * K


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs(M=4096, N=4096, K=4096):
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs(M=4096, N=4096, K=4096):
    return []
