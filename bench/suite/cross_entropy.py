"""F.cross_entropy with integer labels (LLM training loss, mean over tokens), fp32 logits."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'M': 4096, 'V': 32000}, {'M': 2048, 'V': 128256}]
SMALL_CONFIG = {'M': 6, 'V': 100}


class Model(nn.Module):
    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels)

def get_inputs(M=4096, V=32000):
    return [torch.randn(M, V), torch.randint(0, V, (M,))]


def get_init_inputs(M=4096, V=32000):
    return []
