"""ViT patch embedding: nn.Conv2d(3, D, kernel_size=P, stride=P) with bias (fp16 weights, as under .half()) on an
image x (B, 3, H, W) fp16, then .flatten(2).transpose(1, 2):
    out[b, ph * (W/P) + pw, d] = bias[d] + sum_{c, i, j} x[b, c, ph*P + i, pw*P + j] * weight[d, c, i, j]
output (B, (H/P) * (W/P), D) fp16 (a GEMM of the (B*L, 3*P*P) patch matrix with the (3*P*P, D) weight, plus bias).
Configs: ViT-B/16 (D 768, P 16) and ViT-L/14 (D 1024, P 14) at 224 x 224, batch 32 / 64. B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 32, "D": 768, "P": 16, "H": 224, "W": 224},
    {"B": 64, "D": 768, "P": 16, "H": 224, "W": 224},
    {"B": 32, "D": 1024, "P": 14, "H": 224, "W": 224},
]
SMALL_CONFIG = {"B": 2, "D": 64, "P": 4, "H": 16, "W": 12}
FREE_DIMS = ["B"]


def BYTES(B, D, P, H, W):
    L = (H // P) * (W // P)
    return 2 * (B * 3 * H * W + D * 3 * P * P + D + B * L * D)


def FLOPS(B, D, P, H, W):
    L = (H // P) * (W // P)
    return 2 * B * L * D * 3 * P * P


class Model(nn.Module):
    def __init__(self, D=768, P=16):
        super().__init__()
        self.proj = nn.Conv2d(3, D, kernel_size=P, stride=P).to(torch.float16)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


def get_inputs(B=32, D=768, P=16, H=224, W=224):
    return [torch.randn(B, 3, H, W, dtype=torch.float16)]


def get_init_inputs(B=32, D=768, P=16, H=224, W=224):
    return [D, P]
