"""GPT-2's input embedding: token ids (B, S) int64 -> wte[ids] + wpe[arange(S)], (B, S, D) fp16.

Token and position tables are fp16 nn.Embedding weights (V x D and 1024 x D); the sum is rounded to fp16 once, as
torch's fp16 add does. B and S (S <= 1024) are free; V and D are the model's.
"""
import torch
import torch.nn as nn

N_POSITIONS = 1024

CONFIGS = [
    {"B": 8, "S": 1024, "V": 50257, "D": 768},
    {"B": 32, "S": 512, "V": 50257, "D": 768},
    {"B": 4, "S": 1024, "V": 50257, "D": 1600},
]
SMALL_CONFIG = {"B": 2, "S": 37, "V": 1000, "D": 64}
FREE_DIMS = ["B", "S"]


def BYTES(B, S, V, D):
    return B * S * 8 + B * S * D * 2 + S * D * 2 + B * S * D * 2


class Model(nn.Module):
    def __init__(self, V, D):
        super().__init__()
        self.wte = nn.Embedding(V, D, dtype=torch.float16)
        self.wpe = nn.Embedding(N_POSITIONS, D, dtype=torch.float16)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.wte(ids) + self.wpe(pos)


def get_inputs(B=8, S=1024, V=50257, D=768):
    return [torch.randint(0, V, (B, S), dtype=torch.int64)]


def get_init_inputs(B=8, S=1024, V=50257, D=768):
    return [V, D]
