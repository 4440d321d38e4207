"""Cross entropy with label smoothing 0.1 (ViT / image classification training), bf16 logits upcast to fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{"B": 1024, "C": 1000}, {"B": 256, "C": 21841}]
SMALL_CONFIG = {"B": 8, "C": 100}
FREE_DIMS = ["B"]


class Model(nn.Module):
    def forward(self, logits, labels):
        return F.cross_entropy(logits.float(), labels, label_smoothing=0.1)


def get_inputs(B=1024, C=1000):
    return [torch.randn(B, C, dtype=torch.bfloat16), torch.randint(0, C, (B,))]


def get_init_inputs(B=1024, C=1000):
    return []
