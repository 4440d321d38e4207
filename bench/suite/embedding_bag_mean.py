"""EmbeddingBag (mode="mean") with fixed-size bags: indices (B, K) int64 into a table (V, D) fp16; output (B, D)
fp16 = the mean of the K gathered rows. B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 256, "K": 8, "V": 32000, "D": 4096},
    {"B": 1024, "K": 32, "V": 128256, "D": 4096},
    {"B": 1024, "K": 8, "V": 128256, "D": 4096},
]
SMALL_CONFIG = {"B": 3, "K": 5, "V": 100, "D": 64}
FREE_DIMS = ["B"]


def BYTES(B, K, V, D):
    return B * K * 8 + B * K * D * 2 + B * D * 2


class Model(nn.Module):
    def __init__(self, V=32000, D=4096):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(V, D).to(torch.float16))

    def forward(self, indices):
        return torch.nn.functional.embedding_bag(indices, self.weight, mode="mean")


def get_inputs(B=256, K=8, V=32000, D=4096):
    return [torch.randint(0, V, (B, K), dtype=torch.int64)]


def get_init_inputs(B=256, K=8, V=32000, D=4096):
    return [V, D]
