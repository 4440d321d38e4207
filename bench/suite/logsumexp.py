"""torch.logsumexp over the vocabulary (LLM logits), fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 4096, 'V': 32000}, {'M': 1024, 'V': 128256}]
SMALL_CONFIG = {'M': 6, 'V': 100}


class Model(nn.Module):
    def forward(self, x):
        return torch.logsumexp(x, dim=-1)

def get_inputs(M=4096, V=32000):
    return [torch.randn(M, V)]


def get_init_inputs(M=4096, V=32000):
    return []
