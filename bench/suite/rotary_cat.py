"""Rotary position embedding with rotate_half through cat (LLaMA), fp16, BSHD, head dim 128."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'B': 4, 'S': 2048, 'H': 32}, {'B': 1, 'S': 8192, 'H': 32}]
SMALL_CONFIG = {'B': 2, 'S': 5, 'H': 2}


class Model(nn.Module):
    def forward(self, x, cos, sin):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        rotated = torch.cat((-x2, x1), dim=-1)
        return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]

def get_inputs(B=4, S=2048, H=32):
    return [torch.randn(B, S, H, 128, dtype=torch.float16), torch.randn(S, 128, dtype=torch.float16), torch.randn(S, 128, dtype=torch.float16)]


def get_init_inputs(B=4, S=2048, H=32):
    return []
