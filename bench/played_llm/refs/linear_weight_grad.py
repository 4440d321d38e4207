"""The weight gradient of a linear layer in the backward pass (y = x @ W^T, so dW = dY^T @ X), bf16 as in
mixed-precision training without Megatron's fused fp32 accumulation (its fallback `grad_output.t().matmul(input)`):
grad_output dY (T, N) bf16, input X (T, K) bf16, dW (N, K) bf16 with float32 accumulation over the T tokens. The
reduction runs over the token dim, which is the leading (row) dim of both operands: the natural kernel reads dY
transposed (a transposed-A GEMM).
Llama-2/3 / Mistral 7-8B at T = 8192 tokens (a micro-batch of 1 x 8192 or 2 x 4096): the attention projections
(N = K = 4096), the MLP gate / up projection (N = 14336, K = 4096), and the down projection at T = 16384
(N = 4096, K = 14336). T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 8192, "N": 4096, "K": 4096},
    {"T": 8192, "N": 14336, "K": 4096},
    {"T": 16384, "N": 4096, "K": 14336},
]
SMALL_CONFIG = {"T": 96, "N": 48, "K": 64}
FREE_DIMS = ["T"]


def BYTES(T, N, K):
    return 2 * (T * N + T * K + N * K)


def FLOPS(T, N, K):
    return 2 * T * N * K


class Model(nn.Module):
    def forward(self, grad_output, x):
        return grad_output.t().matmul(x)


def get_inputs(T=8192, N=4096, K=4096):
    return [torch.randn(T, N, dtype=torch.bfloat16) * 0.1, torch.randn(T, K, dtype=torch.bfloat16)]


def get_init_inputs(T=8192, N=4096, K=4096):
    return []
