"""Attention scores with a key padding mask (bool, per batch and key), then softmax, fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'B': 8, 'H': 16, 'S': 1024}]
SMALL_CONFIG = {'B': 2, 'H': 2, 'S': 9}


class Model(nn.Module):
    def forward(self, scores, pad):
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
        return torch.softmax(scores, dim=-1)

def get_inputs(B=8, H=16, S=1024):
    return [torch.randn(B, H, S, S), torch.rand(B, S) > 0.9]


def get_init_inputs(B=8, H=16, S=1024):
    return []
