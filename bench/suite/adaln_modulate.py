"""DiT adaLN: LayerNorm without affine, then x * (1 + scale) + shift per batch, fp16."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'B': 8, 'N': 1024, 'D': 1152}, {'B': 2, 'N': 4096, 'D': 1152}]
SMALL_CONFIG = {'B': 2, 'N': 5, 'D': 64}


class Model(nn.Module):
    def forward(self, x, shift, scale):
        h = F.layer_norm(x.float(), (x.shape[-1],), eps=1e-6).to(x.dtype)
        return h * (1 + scale[:, None, :]) + shift[:, None, :]

def get_inputs(B=8, N=1024, D=1152):
    return [torch.randn(B, N, D, dtype=torch.float16), torch.randn(B, D, dtype=torch.float16), torch.randn(B, D, dtype=torch.float16)]


def get_init_inputs(B=8, N=1024, D=1152):
    return []
