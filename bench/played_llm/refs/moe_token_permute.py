"""MoE token permutation before the grouped expert GEMM (Megatron-Core's moe_utils.permute, vLLM's
moe_permute): hidden (T, D) bf16 and the router's top-k expert ids topk_ids (T, k) int64 (distinct experts per token,
in [0, E)); the T * k (token, slot) pairs are ordered by expert with a stable sort of the flattened ids, so within
one expert the pairs keep their flat order t * k + slot:
    order = argsort(topk_ids.view(-1), stable=True)         (T * k,) int64, the row map
    permuted = hidden[order // k]                           (T * k, D) bf16
returns (permuted, order); both exact. E = num_experts is the model's (a constructor argument).
Configs: Mixtral-8x7B (hidden 4096, 8 experts, top-2) at 4096 tokens, DeepSeek-V2-Lite (2048, 64 experts, top-6) at
16384 tokens, DeepSeek-V3 (7168, 256 experts, top-8) at 512 tokens. T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 4096, "D": 4096, "E": 8, "k": 2},
    {"T": 16384, "D": 2048, "E": 64, "k": 6},
    {"T": 512, "D": 7168, "E": 256, "k": 8},
]
SMALL_CONFIG = {"T": 37, "D": 256, "E": 8, "k": 2}
FREE_DIMS = ["T"]


def BYTES(T, D, E, k):
    return T * D * 2 + T * k * 8 + T * k * D * 2 + T * k * 8


class Model(nn.Module):
    def __init__(self, num_experts=8):
        super().__init__()
        self.num_experts = num_experts

    def forward(self, hidden, topk_ids):
        k = topk_ids.shape[1]
        order = torch.argsort(topk_ids.reshape(-1), stable=True)
        return hidden[order // k], order


def get_inputs(T=4096, D=4096, E=8, k=2):
    topk_ids = torch.randn(T, E).topk(k, dim=-1).indices           # the router's top-k: distinct, in [0, E)
    return [torch.randn(T, D, dtype=torch.bfloat16), topk_ids.to(torch.int64)]


def get_init_inputs(T=4096, D=4096, E=8, k=2):
    return [E]
