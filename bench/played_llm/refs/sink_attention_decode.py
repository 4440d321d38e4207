"""GPT-OSS attention, decode step, with learned attention sinks (gpt-oss-20b / 120b: 64 query heads sharing 8 KV
heads, head dim 64): one query token per sequence attends over its whole KV cache, and each query head h has a
learned sink logit sinks[h] that joins the softmax's denominator but has no value:
    q (B, Hq, D) bf16, k_cache and v_cache (B, Hkv, S, D) bf16 (heads before positions), sinks (Hq,) float32;
    query head h reads KV head h // (Hq // Hkv)
    s_j = (q . k_j) * D^-0.5                        j = 0 .. S-1, float32
    p_j = exp(s_j) / (sum_i exp(s_i) + exp(sinks[h]))    (softmax over [s_0 .. s_{S-1}, sinks[h]], sink column dropped)
    o = sum_j p_j v_j                               all math in float32, output (B, Hq, D) bf16.
The sinks are drawn uniform on [0, 12): with N(0, 1) inputs the scaled scores have std about 1, so the keys'
denominator is about S * e^0.5 (log 4.2 at S = 100, 8.8 at S = 4096, 10.9 at S = 32768); across the 64 heads the
sink's share of the denominator then runs from negligible to dominant at every config, and a kernel that drops the
sink (or adds it to the numerator) fails.
Configs (B, S): 32 sequences of 4096 tokens, 4 of 32768 (long context), 128 of 1024 (a large serving batch).
B and S are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 32, "S": 4096, "Hq": 64, "Hkv": 8, "D": 64},
    {"B": 4, "S": 32768, "Hq": 64, "Hkv": 8, "D": 64},
    {"B": 128, "S": 1024, "Hq": 64, "Hkv": 8, "D": 64},
]
SMALL_CONFIG = {"B": 2, "S": 100, "Hkv": 8, "Hq": 64, "D": 64}   # heads and head dim at the configs' values
FREE_DIMS = ["B", "S"]
TOLERANCES = {"bfloat16": (2e-3, 2e-2)}  # outputs are averages over S values, often ~0.02; P in bf16 stays inside


def BYTES(B, S, Hq, Hkv, D):
    return 2 * (2 * B * Hkv * S * D + 2 * B * Hq * D) + 4 * Hq


def FLOPS(B, S, Hq, Hkv, D):
    return 4 * B * Hq * S * D


class Model(nn.Module):
    def __init__(self, Hq):
        super().__init__()
        self.sinks = nn.Parameter(12.0 * torch.rand(Hq, dtype=torch.float32))

    def forward(self, q, k_cache, v_cache):
        B, Hq, D = q.shape
        Hkv = k_cache.shape[1]
        G = Hq // Hkv
        qg = q.float().view(B, Hkv, G, D)
        k = k_cache.float()                                          # (B, Hkv, S, D)
        v = v_cache.float()
        s = torch.matmul(qg, k.transpose(-1, -2)) * (D ** -0.5)      # (B, Hkv, G, S)
        sink = self.sinks.float().view(1, Hkv, G, 1).expand(B, Hkv, G, 1)
        p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]   # the sink's column dropped
        o = torch.matmul(p, v)                                       # (B, Hkv, G, D)
        return o.reshape(B, Hq, D).to(q.dtype)


def get_inputs(B=32, S=4096, Hq=64, Hkv=8, D=64):
    q = torch.randn(B, Hq, D, dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, S, D, dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, S, D, dtype=torch.bfloat16)
    return [q, k, v]


def get_init_inputs(B=32, S=4096, Hq=64, Hkv=8, D=64):
    return [Hq]
