"""Weighted embedding bag, sum mode (nn.EmbeddingBag(mode='sum') with per_sample_weights: DLRM / recommendation
sparse features): weight (V, E) fp32, indices (N,) int64 in [0, V), offsets (B,) int64 bag starts (offsets[0] = 0,
non-decreasing; bag b = indices[offsets[b] .. offsets[b + 1] - 1], the LAST bag runs to N, as
include_last_offset=False), per_sample_weights (N,) fp32:
    out[b, :] = sum over i in bag b of per_sample_weights[i] * weight[indices[i], :]        output (B, E) fp32
An empty bag (offsets[b] == offsets[b + 1]) gives a zero row. Bag sizes are drawn 0..L (L = 64) under the seeded RNG
(integers: the evaluator keeps indices and offsets), in pairs s, L - s shuffled into a random order, so N is
(B // 2) * L (+ L // 2 for odd B) whatever the draw: the evaluator counts sizes on the meta device, where get_inputs
cannot read a drawn size (session 44c: N = int(sizes.sum()) stopped every own-size run). Some bag is always empty
(L's partner) and the last bag always holds L rows (so its end, N, matters). The reference sums in float64 (exact enough for any float32 order).
Configs (B, L, V, E): a 1M-row table (V = 2^20) at E = 64 and 128, batches of 2048 and 16384 bags. B and V are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 2048, "L": 64, "V": 1048576, "E": 64},
    {"B": 2048, "L": 64, "V": 1048576, "E": 128},
    {"B": 16384, "L": 64, "V": 1048576, "E": 64},
    {"B": 16384, "L": 64, "V": 1048576, "E": 128},
]
SMALL_CONFIG = {"B": 5, "L": 8, "V": 1000, "E": 64}
FREE_DIMS = ["B", "V"]


def BYTES(B, L, V, E):
    N = _n_indices(B, L)
    return N * E * 4 + N * (8 + 4) + B * 8 + B * E * 4


class Model(nn.Module):
    def forward(self, weight, indices, offsets, per_sample_weights):
        N = indices.shape[0]
        B = offsets.shape[0]
        E = weight.shape[1]
        pos = torch.arange(N, device=indices.device)
        bag = torch.searchsorted(offsets.contiguous(), pos, right=True) - 1     # (N,) bag of each index
        rows = weight.index_select(0, indices).double() * per_sample_weights.double()[:, None]
        out = torch.zeros(B, E, dtype=torch.float64, device=weight.device).index_add(0, bag, rows)
        return out.to(weight.dtype)


def _n_indices(B, L):
    return (B // 2) * L + (B % 2) * (L // 2)


def get_inputs(B=2048, L=64, V=1048576, E=64):
    r = torch.randint(0, L + 1, (B // 2,), dtype=torch.int64)
    r[:1] = L                                       # its partner is an empty bag
    sizes = torch.cat([r, L - r, torch.full((B % 2,), L // 2, dtype=torch.int64)])
    rest = sizes[1:][torch.randperm(B - 1)]
    sizes = torch.cat([rest, sizes[:1]])            # the last bag: L rows
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)[:-1]])
    N = _n_indices(B, L)                            # = sizes.sum(), known without reading it
    indices = torch.randint(0, V, (N,), dtype=torch.int64)
    weight = torch.randn(V, E, dtype=torch.float32)
    psw = torch.rand(N, dtype=torch.float32) * 2.0 - 0.5
    return [weight, indices, offsets, psw]


def get_init_inputs(B=2048, L=64, V=1048576, E=64):
    return []
