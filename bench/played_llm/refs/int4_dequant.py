"""Dequantize int4 weights packed two a byte (GPTQ/AWQ-style symmetric, zero point 8) to fp16: qweight (N, K / 2)
uint8 holds column 2j in its low nibble and column 2j + 1 in its high nibble; scales (N, K / G) fp16, one per
group of G consecutive columns; W[n, k] = (q[n, k] - 8) * scales[n, k // G], output (N, K) fp16. Llama-2-7B MLP
gate/up (11008 x 4096) and down (4096 x 11008) at group 128, Llama-3-70B gate (28672 x 8192) at group 64. N is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 11008, "K": 4096, "G": 128},
    {"N": 4096, "K": 11008, "G": 128},
    {"N": 28672, "K": 8192, "G": 64},
]
SMALL_CONFIG = {"N": 6, "K": 1536, "G": 128}
FREE_DIMS = ["N"]


def BYTES(N, K, G):
    return N * K // 2 + N * (K // G) * 2 + N * K * 2


class Model(nn.Module):
    def forward(self, qweight, scales):
        N = qweight.shape[0]
        K = qweight.shape[1] * 2
        G = K // scales.shape[1]
        lo = (qweight & 0xF).to(torch.int32)
        hi = (qweight >> 4).to(torch.int32)
        q = torch.stack((lo, hi), dim=-1).view(N, K) - 8
        return (q.float() * scales.float().repeat_interleave(G, dim=1)).to(torch.float16)


def get_inputs(N=11008, K=4096, G=128):
    qweight = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8)
    scales = (torch.rand(N, K // G) * 0.02 + 0.001).to(torch.float16)
    return [qweight, scales]


def get_init_inputs(N=11008, K=4096, G=128):
    return []
