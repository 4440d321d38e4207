"""Cosine embedding loss with +-1 targets (sentence-pair similarity training), fp32 embeddings."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{"B": 8192, "D": 768}, {"B": 2048, "D": 4096}]
SMALL_CONFIG = {"B": 10, "D": 96}
FREE_DIMS = ["B"]


class Model(nn.Module):
    def forward(self, x1, x2, y):
        return F.cosine_embedding_loss(x1, x2, y, margin=0.1)


def get_inputs(B=8192, D=768):
    return [torch.randn(B, D), torch.randn(B, D), torch.randint(0, 2, (B,)) * 2 - 1]


def get_init_inputs(B=8192, D=768):
    return []
