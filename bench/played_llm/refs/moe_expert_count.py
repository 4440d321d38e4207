"""Tokens per expert for MoE routing (the histogram before the grouped expert GEMM: vLLM's moe_align_block_size /
Megatron's tokens_per_expert): topk_ids (T, K) int32, the router's top-K expert ids per token (distinct within a
token, in [0, E)):
    counts[e] = number of (t, k) with topk_ids[t, k] == e      = torch.bincount(topk_ids.flatten(), minlength=E)
output counts (E,) int32, exact. E = num_experts is the model's (a constructor argument); sum(counts) = T * K.
Configs (T, K, E): Mixtral-8x7B (4096 tokens, top-2 of 8), DeepSeek-V3 (8192 tokens, top-8 of 256), Qwen3-30B-A3B
(2048 tokens, top-8 of 128). T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 4096, "K": 2, "E": 8},
    {"T": 8192, "K": 8, "E": 256},
    {"T": 2048, "K": 8, "E": 128},
]
SMALL_CONFIG = {"T": 37, "K": 2, "E": 8}
FREE_DIMS = ["T"]


def BYTES(T, K, E):
    return T * K * 4 + E * 4


class Model(nn.Module):
    def __init__(self, num_experts=8):
        super().__init__()
        self.num_experts = num_experts

    def forward(self, topk_ids):
        # scatter_add of ones == bincount(minlength=E) for ids in [0, E); unlike bincount its size does not depend on
        # the values, so the forward also runs on the meta device
        ids = topk_ids.reshape(-1).long()
        counts = torch.zeros(self.num_experts, dtype=torch.int64, device=ids.device)
        counts.scatter_add_(0, ids, torch.ones_like(ids))
        return counts.to(torch.int32)


def get_inputs(T=4096, K=2, E=8):
    # the router's top-K of random logits with a per-expert bias (a skewed load, as trained routers give)
    logits = torch.randn(T, E) + torch.randn(E)
    return [logits.topk(K, dim=-1).indices.to(torch.int32)]


def get_init_inputs(T=4096, K=2, E=8):
    return [E]
