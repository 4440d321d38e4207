"""QLoRA NF4 dequantization (bitsandbytes' dequantize_4bit, quant_type "nf4", blocksize 64, no double quant):
    qweight (N, K / 2) uint8: two 4-bit codes a byte, column 2j in the low nibble, column 2j + 1 in the high nibble
    absmax (N * K / 64,) fp32: one scale per block of 64 consecutive weights of the row-major (N, K) weight, so
        weight (n, k) uses absmax[(n * K + k) // 64] = absmax[n * (K / 64) + k // 64]   (K is a multiple of 64)
    NF4 = the 16 fp32 constants below (the normal-float-4 code book, -1 ... 0 ... 1)
    out[n, k] = NF4[code(n, k)] * absmax[block(n, k)]        product in float32, rounded to bf16
output (N, K) bf16 (out_features, in_features). Configs: Llama-2/3 projections (N, K) = (4096, 4096) (q/o),
(11008, 4096) (Llama-2-7B gate/up) and (4096, 14336) (Llama-3-8B down). N is free.
"""
import torch
import torch.nn as nn

BLOCK = 64
NF4 = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
]

CONFIGS = [
    {"N": 4096, "K": 4096},
    {"N": 11008, "K": 4096},
    {"N": 4096, "K": 14336},
]
SMALL_CONFIG = {"N": 6, "K": 256}
FREE_DIMS = ["N"]


def BYTES(N, K):
    return N * K // 2 + (N * K // BLOCK) * 4 + N * K * 2


class Model(nn.Module):
    def forward(self, qweight, absmax):
        N = qweight.shape[0]
        K = qweight.shape[1] * 2
        lo = (qweight & 0xF).long()
        hi = (qweight >> 4).long()
        codes = torch.stack((lo, hi), dim=-1).view(N, K)
        table = torch.tensor(NF4, dtype=torch.float32, device=qweight.device)
        scale = absmax.float().view(N, K // BLOCK).repeat_interleave(BLOCK, dim=1)
        return (table[codes] * scale).to(torch.bfloat16)


def get_inputs(N=4096, K=4096):
    qweight = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8)
    absmax = torch.rand(N * K // BLOCK) * 0.1 + 0.01
    return [qweight, absmax]


def get_init_inputs(N=4096, K=4096):
    return []
