"""Weight-only int8 linear (W8A16) as LLM serving runs it (TensorRT-LLM / vLLM weight-only int8): activations x
(M, K) fp16, weight int8 (N, K) (symmetric, values in [-127, 127]) with one fp16 scale per output channel (N,) and
an fp16 bias (N,). The reference dequantizes the weight to fp16, w_deq = (w.float() * scale[:, None]).half() (the
product rounded once to fp16), then y = x @ w_deq^T + bias with the products summed in float32 and the bias added in
float32, output (M, N) fp16. Llama-2 7B projections: q/k/v/o (N = K = 4096) and gate/up (N = 11008, K = 4096), at
decode-like M = 16 (a batch of 16 tokens) and prefill M = 2048. M (tokens) is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 16, "N": 4096, "K": 4096},
    {"M": 16, "N": 11008, "K": 4096},
    {"M": 2048, "N": 4096, "K": 4096},
    {"M": 2048, "N": 11008, "K": 4096},
]
SMALL_CONFIG = {"M": 5, "N": 96, "K": 256}
FREE_DIMS = ["M"]
FIXED_INPUTS = [2]   # the per-channel scales stay small and positive, as get_inputs draws them


def BYTES(M, N, K):
    return M * K * 2 + N * K + N * 2 + N * 2 + M * N * 2


def FLOPS(M, N, K):
    return 2 * M * N * K


class Model(nn.Module):
    def forward(self, x, weight, scale, bias):
        w_deq = (weight.float() * scale.float()[:, None]).to(torch.float16)
        y = x.float() @ w_deq.float().t() + bias.float()
        return y.to(torch.float16)


def get_inputs(M=16, N=4096, K=4096):
    x = torch.randn(M, K, dtype=torch.float16)
    weight = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    # absmax scales of weights with std ~0.02: absmax / 127, about 1e-4 to 1e-3
    scale = ((0.5 + torch.rand(N)) * (0.08 / 127)).to(torch.float16)
    bias = (0.1 * torch.randn(N)).to(torch.float16)
    return [x, weight, scale, bias]


def get_init_inputs(M=16, N=4096, K=4096):
    return []
