"""Ragged mean pooling: x (B, S, D) bf16 and lengths (B,) int64 (1 <= lengths[b] <= S); out[b] is the mean of
x[b, :lengths[b], :] in float32, shape (B, D) fp32. Sentence-embedding / classifier heads over a right-padded batch
(BERT-large D = 1024, BERT-base D = 768). B and S are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 32, "S": 2048, "D": 1024},
    {"B": 128, "S": 512, "D": 768},
    {"B": 64, "S": 512, "D": 1024},
]
SMALL_CONFIG = {"B": 3, "S": 83, "D": 64}
FREE_DIMS = ["B", "S"]


def BYTES(B, S, D):
    return B * S * D * 2 + B * 8 + B * D * 4


class Model(nn.Module):
    def forward(self, x, lengths):
        S = x.shape[1]
        keep = (torch.arange(S, device=x.device)[None, :] < lengths[:, None]).unsqueeze(-1)
        total = (x.float() * keep).sum(dim=1)
        return total / lengths[:, None].to(torch.float32)


def get_inputs(B=32, S=2048, D=1024):
    lengths = torch.randint(1, S + 1, (B,), dtype=torch.int64)
    lengths[0] = S                                  # one full-length sequence in every batch
    if B > 1:
        lengths[-1] = 1                             # and one of a single token
    return [torch.randn(B, S, D, dtype=torch.bfloat16), lengths]


def get_init_inputs(B=32, S=2048, D=1024):
    return []
