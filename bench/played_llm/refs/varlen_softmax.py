"""Softmax over packed variable-length sequences (flash-attn's cu_seqlens layout: packed attention scores, ragged
token groups): x (total, D) fp16 holds the tokens of B sequences concatenated; cu_seqlens (B + 1,) int32 offsets,
cu_seqlens[0] = 0, cu_seqlens[B] = total, sequence b = rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1 (>= 1 row).
For each sequence b and column d, softmax over the sequence's rows (dim 0 within the segment, not the whole column):
    m[b, d] = max of x[r, d] over r in segment b;   out[r, d] = exp(x[r, d] - m) / sum over the segment of exp(. - m)
math in float32, output (total, D) fp16. Lengths are drawn 1..L (L = 2048 the longest sequence) under the seeded RNG
in get_inputs (integers: the evaluator keeps them), in pairs r, L + 1 - r shuffled into a random order, so total is
(B // 2) * (L + 1) (+ (L + 1) // 2 for odd B) whatever the draw: the evaluator counts sizes on the meta device, where
get_inputs cannot read a drawn length (session 44c: a total taken with int(cu_seqlens[-1]) stopped every own-size
run). One sequence is always L long and one a single row (its output is exactly 1).
Configs (B, L, D): 8 and 64 sequences at D = 64 and 128. B and L are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 8, "L": 2048, "D": 64},
    {"B": 8, "L": 2048, "D": 128},
    {"B": 64, "L": 2048, "D": 64},
    {"B": 64, "L": 2048, "D": 128},
]
SMALL_CONFIG = {"B": 3, "L": 40, "D": 64}
FREE_DIMS = ["B", "L"]


def _total(B, L):
    return (B // 2) * (L + 1) + (B % 2) * ((L + 1) // 2)


def _lengths(B, L):
    r = torch.randint(1, L + 1, (B // 2,), dtype=torch.int64)
    r[:1] = L                                     # one sequence of L rows, its partner of 1
    lengths = torch.cat([r, L + 1 - r, torch.full((B % 2,), (L + 1) // 2, dtype=torch.int64)])
    return lengths[torch.randperm(B)]


def BYTES(B, L, D):
    total = _total(B, L)
    return 2 * total * D * 2 + (B + 1) * 4


class Model(nn.Module):
    def forward(self, x, cu_seqlens):
        T, D = x.shape
        B = cu_seqlens.shape[0] - 1
        rows = torch.arange(T, device=x.device)
        seg = torch.searchsorted(cu_seqlens[1:].long().contiguous(), rows, right=True)   # (T,) segment of each row
        xf = x.float()
        idx = seg[:, None].expand(T, D)
        m = torch.full((B, D), float("-inf"), dtype=torch.float32, device=x.device)
        m = m.scatter_reduce(0, idx, xf, reduce="amax", include_self=True)
        e = torch.exp(xf - m.index_select(0, seg))
        s = torch.zeros(B, D, dtype=torch.float32, device=x.device).index_add(0, seg, e)
        return (e / s.index_select(0, seg)).to(x.dtype)


def get_inputs(B=8, L=2048, D=64):
    lengths = _lengths(B, L)
    cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(torch.int32)
    total = _total(B, L)                          # = cu_seqlens[-1], known without reading it
    return [torch.randn(total, D, dtype=torch.float16), cu_seqlens]


def get_init_inputs(B=8, L=2048, D=64):
    return []
