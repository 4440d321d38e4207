"""Ragged per-sequence sums over packed (varlen) tokens, as flash-attn's cu_seqlens layout:
    x (total, D) bf16: the tokens of S sequences concatenated; cu_seqlens (S + 1,) int32 offsets,
    cu_seqlens[0] = 0, cu_seqlens[S] = total, sequence s = rows cu_seqlens[s] .. cu_seqlens[s + 1] - 1 (>= 1 row)
    out[s, :] = sum of sequence s's rows, accumulated in float32, rounded to x's dtype (bf16)
output (S, D) bf16. total = S * L rows (L the mean length), cut at S - 1 random distinct places: every sequence has
>= 1 row, lengths vary freely (a fixed total keeps the shapes computable without values, on the meta device).
Configs (S, D, L): 8 long sequences at D = 4096 (Llama-2-7B hidden), 64 at D = 2048 (Llama-3.2-1B), 256 short ones
at D = 1024 (BERT-large). S and L are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"S": 8, "D": 4096, "L": 512},
    {"S": 64, "D": 2048, "L": 128},
    {"S": 256, "D": 1024, "L": 37},
]
SMALL_CONFIG = {"S": 3, "L": 20, "D": 64}
FREE_DIMS = ["S", "L"]


def BYTES(S, D, L):
    return S * L * D * 2 + (S + 1) * 4 + S * D * 2


class Model(nn.Module):
    def forward(self, x, cu_seqlens):
        # float64 prefix sums, differenced at the offsets: exact enough for any float32 sum, deterministic, and
        # free of .tolist() so the forward also runs on the meta device
        c = torch.cat([x.new_zeros(1, x.shape[1], dtype=torch.float64), x.double().cumsum(dim=0)])
        out = c.index_select(0, cu_seqlens[1:].long()) - c.index_select(0, cu_seqlens[:-1].long())
        return out.float().to(x.dtype)


def get_inputs(S=8, D=4096, L=512):
    total = S * L
    cuts = torch.sort(torch.randperm(total - 1)[: S - 1] + 1).values
    cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int64), cuts, torch.full((1,), total)]).to(torch.int32)
    return [torch.randn(total, D, dtype=torch.bfloat16), cu_seqlens]


def get_init_inputs(S=8, D=4096, L=512):
    return []
