"""Contrastive InfoNCE loss (CLIP / SimCLR style, one direction): a (N, D) and b (N, D) fp16 embeddings, row i of a
and row i of b are the positive pair, every other row of b is a negative:
    a_n = a / max(||a||_2, 1e-12), b_n = b / max(||b||_2, 1e-12)    (per row, float32)
    logits = a_n @ b_n.T / tau                                        (N, N) float32
    loss = mean_i( logsumexp_j(logits[i, :]) - logits[i, i] )         = cross_entropy(logits, arange(N))
output: the loss, a float32 scalar (0-dim). tau = 0.07 is a constructor argument.
Configs: (N, D) = (1024, 512), (4096, 768), (4096, 512). N is the batch size (free).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"N": 1024, "D": 512},
    {"N": 4096, "D": 768},
    {"N": 4096, "D": 512},
]
SMALL_CONFIG = {"N": 40, "D": 32}
FREE_DIMS = ["N"]


def BYTES(N, D):
    return 2 * 2 * N * D + 4


def FLOPS(N, D):
    return 2 * N * N * D


class Model(nn.Module):
    def __init__(self, tau=0.07):
        super().__init__()
        self.tau = tau

    def forward(self, a, b):
        a_n = F.normalize(a.float(), dim=-1)
        b_n = F.normalize(b.float(), dim=-1)
        logits = a_n @ b_n.T / self.tau
        labels = torch.arange(a.shape[0], device=a.device)
        return F.cross_entropy(logits, labels)


def get_inputs(N=1024, D=512):
    return [
        torch.randn(N, D, dtype=torch.float16),
        torch.randn(N, D, dtype=torch.float16),
    ]


def get_init_inputs(N=1024, D=512):
    return [0.07]
