"""W8A8 int8 GEMM with the scales applied in the epilogue (vLLM's cutlass_scaled_mm for int8 weights and
activations, ScaledEpilogueBias): a (M, K) int8 activations quantized per token, a_scale (M, 1) float32 (one per
row of a), b (N, K) int8 weights quantized per output channel, b_scale (N,) float32 (one per row of b), bias (N,)
bf16:
    acc[m, n] = sum_k a[m, k] * b[n, k]                       exact, as the int32 accumulator of the tensor cores
    out[m, n] = a_scale[m] * (b_scale[n] * float32(acc[m, n])) + float32(bias[n])   in float32, rounded to bf16 once
output (M, N) bf16. The int32 product is computed exactly here: in float64 on the CPU (|acc| <= 128 * 128 * K =
2^26 at K = 4096, far inside float64's 53 bits), then converted to float32 as cutlass's epilogue converts the int32
accumulator (one rounding, and none while |acc| < 2^24). A kernel may accumulate in int32 (the real op) or in
float32 over the int8 values converted (exact while partial sums stay below 2^24, which random int8 data does by a
wide margin); an fp16 or bf16 accumulator is not exact (fp16 overflows past 65504).
The scales are drawn like any floating input (the op is linear in them; real ones are positive, about amax / 127).
Configs (M, K, N): Llama-2-7B's q_proj (4096 -> 4096) at a 16-token decode batch, a 512-token and a 4096-token
prefill, and its gate_proj (4096 -> 11008) at 4096 tokens. M is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 16, "K": 4096, "N": 4096},
    {"M": 512, "K": 4096, "N": 4096},
    {"M": 4096, "K": 4096, "N": 4096},
    {"M": 4096, "K": 4096, "N": 11008},
]
SMALL_CONFIG = {"M": 5, "K": 256, "N": 96}
FREE_DIMS = ["M"]


def BYTES(M, K, N):
    return M * K + N * K + 4 * M + 4 * N + 2 * N + 2 * M * N


def FLOPS(M, K, N):
    return 2 * M * K * N


class Model(nn.Module):
    def forward(self, a, a_scale, b, b_scale, bias):
        acc = (a.double() @ b.double().t()).float()          # exact int32 product, then int32 -> float32
        y = a_scale.float() * (b_scale.float()[None, :] * acc) + bias.float()[None, :]
        return y.to(torch.bfloat16)


def get_inputs(M=16, K=4096, N=4096):
    a = torch.randint(-128, 128, (M, K), dtype=torch.int8)
    b = torch.randint(-128, 128, (N, K), dtype=torch.int8)
    a_scale = torch.rand(M, 1) * 0.02 + 0.005
    b_scale = torch.rand(N) * 0.002 + 0.0005
    bias = torch.randn(N, dtype=torch.bfloat16)
    return [a, a_scale, b, b_scale, bias]


def get_init_inputs(M=16, K=4096, N=4096):
    return []
