"""Batched pairwise Euclidean distances, torch.cdist(x, y, p=2) (k-NN retrieval, k-means assignment, RBF kernels,
point-cloud / set matching): x (B, M, D) float32, y (B, N, D) float32:
    out[b, i, j] = sqrt( sum_d (x[b, i, d] - y[b, j, d]) ** 2 )          output (B, M, N) float32
torch.cdist's default mode (used here) computes it for M or N > 25 through a GEMM, sqrt(clamp(|x|^2 + |y|^2 - 2 x.y,
min=0)); a kernel may use that form (tensor cores) or the direct differences. Configs (B, M, N, D): 8 batches of
1024 x 1024 points at D = 128 (retrieval embeddings), one 4096 x 4096 set at D = 64 (k-means over features),
32 batches of 256 x 512 at D = 256 (set matching). B, M, N are free; D is the feature width.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 8, "M": 1024, "N": 1024, "D": 128},
    {"B": 1, "M": 4096, "N": 4096, "D": 64},
    {"B": 32, "M": 256, "N": 512, "D": 256},
]
SMALL_CONFIG = {"B": 2, "M": 40, "N": 33, "D": 16}
FREE_DIMS = ["B", "M", "N"]


def BYTES(B, M, N, D):
    return 4 * (B * M * D + B * N * D + B * M * N)


def FLOPS(B, M, N, D):
    return 2 * B * M * N * D


class Model(nn.Module):
    def forward(self, x, y):
        return torch.cdist(x, y, p=2)


def get_inputs(B=8, M=1024, N=1024, D=128):
    return [torch.randn(B, M, D, dtype=torch.float32), torch.randn(B, N, D, dtype=torch.float32)]


def get_init_inputs(B=8, M=1024, N=1024, D=128):
    return []
