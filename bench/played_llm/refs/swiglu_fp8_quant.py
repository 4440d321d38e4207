"""Fused SwiGLU + per-token dynamic FP8 quantization (the activation before an FP8 down-projection in vLLM / SGLang
serving: silu_and_mul + scaled_fp8_quant in one pass):
    x (T, 2N) bf16 holding [gate | up]: gate = x[:, :N], up = x[:, N:]
    h = silu(gate) * up                                               in float32
    scale[t] = max(amax(|h[t, :]|), 1e-12) / 448                      (448 = the largest float8_e4m3fn value)
    q = (h / scale[:, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
outputs (q (T, N) float8_e4m3fn, scale (T, 1) float32). Configs (T, N): Llama-3-8B decode batch (16, 14336),
Qwen2.5-7B prefill chunk (512, 18944), a Mixtral-8x7B expert over 4096 tokens (4096, 14336). T is free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"T": 16, "N": 14336},
    {"T": 512, "N": 18944},
    {"T": 4096, "N": 14336},
]
SMALL_CONFIG = {"T": 5, "N": 256}
FREE_DIMS = ["T"]


def BYTES(T, N):
    return T * 2 * N * 2 + T * N + T * 4


class Model(nn.Module):
    def forward(self, x):
        n = x.shape[-1] // 2
        h = F.silu(x[:, :n].float()) * x[:, n:].float()
        scale = h.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 448.0
        q = (h / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q, scale


def get_inputs(T=16, N=14336):
    return [torch.randn(T, 2 * N, dtype=torch.bfloat16)]


def get_init_inputs(T=16, N=14336):
    return []
