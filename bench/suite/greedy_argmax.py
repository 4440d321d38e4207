"""Greedy decoding's next token: argmax of the LM head's logits over the vocabulary (bf16), per sequence."""
import torch
import torch.nn as nn

CONFIGS = [{'M': 256, 'V': 32000}, {'M': 64, 'V': 128256}, {'M': 2048, 'V': 151936}]
SMALL_CONFIG = {'M': 5, 'V': 9000}


class Model(nn.Module):
    def forward(self, logits):
        return torch.argmax(logits, dim=-1)


def get_inputs(M=256, V=32000):
    return [torch.randn(M, V, dtype=torch.bfloat16)]


def get_init_inputs(M=256, V=32000):
    return []
