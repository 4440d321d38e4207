"""MoE expert FFN, first GEMM over tokens already grouped by expert (the grouped GEMM of vLLM's fused_moe /
Megatron-Core's GroupedMLP after the permute): x (T, K) bf16 holds the routed (token, slot) rows sorted by expert,
w (E, N, K) bf16 the experts' up-projection weights (nn.Linear layout: out features x in features),
expert_offsets (E + 1,) int32 cumulative row offsets, expert_offsets[0] = 0, expert_offsets[E] = T; expert e owns
rows expert_offsets[e] .. expert_offsets[e + 1] - 1 (possibly none):
    y[r, :] = x[r, :] @ w[e].T     for every row r of expert e;   float32 accumulation, output (T, N) bf16.
Group sizes are drawn under the seeded RNG (integers: the evaluator keeps expert_offsets) in pairs s, P - s with
P = T // (E // 2) (the remainder goes to the last expert), shuffled, so the total is T whatever the draw: the
evaluator sizes configs on the meta device, where get_inputs cannot read a drawn value. Some expert always gets 0 rows
and the last expert always holds P rows or more (its end, T, matters).
Configs (T, E, N, K): Mixtral-8x7B's w1 per tensor-parallel shard of 8 (hidden 4096, 14336 / 8 = 1792) at 2048
tokens x top-2 = 4096 rows; DeepSeek-V2-Lite / Qwen1.5-MoE routed experts (hidden 2048, moe_intermediate 1408, 64
experts) at 1024 tokens x top-6 = 6144 rows; OLMoE-1B-7B (hidden 2048, intermediate 1024, 64 experts) at 1024 tokens
x top-8 = 8192 rows. T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 4096, "E": 8, "N": 1792, "K": 4096},
    {"T": 6144, "E": 64, "N": 1408, "K": 2048},
    {"T": 8192, "E": 64, "N": 1024, "K": 2048},
]
SMALL_CONFIG = {"T": 90, "N": 48, "K": 64, "E": 64}   # E at the configs' 64: the floor the CPU check may shrink E to
FREE_DIMS = ["T"]


def BYTES(T, E, N, K):
    return 2 * (T * K + E * N * K + T * N) + (E + 1) * 4


def FLOPS(T, E, N, K):
    return 2 * T * N * K


class Model(nn.Module):
    def forward(self, x, w, expert_offsets):
        T = x.shape[0]
        E, N, _ = w.shape
        rows = torch.arange(T, device=x.device)
        # expert of each row: the number of ends <= row (an empty expert's end equals its start and is skipped)
        eid = torch.searchsorted(expert_offsets[1:].long().contiguous(), rows, right=True)
        xf = x.float()
        y = torch.zeros(T, N, dtype=torch.float32, device=x.device)
        for e in range(E):  # every expert over every row, kept where the row is its: no value read on the host
            y = torch.where((eid == e)[:, None], xf @ w[e].float().t(), y)
        return y.to(x.dtype)


def _sizes(T, E):
    P = T // (E // 2)
    s = torch.randint(0, P + 1, (E // 2,), dtype=torch.int64)
    s[:1] = 0                                           # an empty expert; its partner holds P rows
    sizes = torch.cat([s, P - s])
    rest = torch.cat([sizes[: E // 2], sizes[E // 2 + 1:]])
    rest = rest[torch.randperm(E - 1)]
    last = sizes[E // 2: E // 2 + 1] + (T - P * (E // 2))   # the full partner, plus the remainder: the total is T
    return torch.cat([rest, last])


def get_inputs(T=4096, E=8, N=1792, K=4096):
    sizes = _sizes(T, E)
    expert_offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)]).to(torch.int32)
    return [
        torch.randn(T, K, dtype=torch.bfloat16),
        torch.randn(E, N, K, dtype=torch.bfloat16),
        expert_offsets,
    ]


def get_init_inputs(T=4096, E=8, N=1792, K=4096):
    return []
