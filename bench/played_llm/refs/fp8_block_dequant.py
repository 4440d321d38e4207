"""Block-wise FP8 weight dequantization (DeepSeek-V3's weight_dequant, run when an fp8 checkpoint is loaded into a
bf16 model): weight (N, K) float8_e4m3fn with one float32 scale_inv per 128 x 128 block, scale_inv
(ceil(N / 128), ceil(K / 128)); W[n, k] = float(weight[n, k]) * scale_inv[n // 128, k // 128] in float32, rounded to
bf16; output (N, K) bf16. DeepSeek-V3's MLP gate / up (18432 x 7168) and down (7168 x 18432), q_b_proj (24576 x 1536)
and kv_a_proj_with_mqa (576 x 7168: 576 rows, the last block of rows half full). N is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 18432, "K": 7168},
    {"N": 7168, "K": 18432},
    {"N": 24576, "K": 1536},
    {"N": 576, "K": 7168},
]
SMALL_CONFIG = {"N": 200, "K": 384}
FREE_DIMS = ["N"]


def BYTES(N, K):
    return N * K + ((N + 127) // 128) * ((K + 127) // 128) * 4 + N * K * 2


class Model(nn.Module):
    def forward(self, weight, scale_inv):
        N, K = weight.shape
        s = scale_inv.repeat_interleave(128, dim=0)[:N].repeat_interleave(128, dim=1)[:, :K]
        return (weight.float() * s).to(torch.bfloat16)


def get_inputs(N=18432, K=7168):
    w = (torch.randn(N, K) * 120.0).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    scale_inv = torch.rand((N + 127) // 128, (K + 127) // 128) * 4e-4 + 1e-5
    return [w, scale_inv]


def get_init_inputs(N=18432, K=7168):
    return []
