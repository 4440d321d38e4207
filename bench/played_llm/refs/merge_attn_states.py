"""Merge two partial attention results (vLLM's merge_attn_states: split-KV / cascade attention, where a shared
prefix and each sequence's own suffix are attended separately, each giving an output and its log-sum-exp):
    prefix_out, suffix_out (T, H, D) bf16;  prefix_lse, suffix_lse (H, T) float32 (natural log, one per token and head)
    p_lse, s_lse = the lse of token t, head h, with +inf replaced by -inf (as vLLM does: a +inf lse marks an empty
                   / invalid partial result, which must get weight 0, not all of it)
    m = max(p_lse, s_lse);  p = exp(p_lse - m),  s = exp(s_lse - m)
    out[t, h, :] = (p * prefix_out[t, h, :] + s * suffix_out[t, h, :]) / (p + s)      all math in float32
output (T, H, D) bf16. When both lse are -inf (after the +inf mapping) nothing was attended: the ref returns
prefix_out there (weights 1 and 0), as vLLM's CUDA kernel does, rather than the NaN of 0/0.
Note the layouts: the outputs are token-major (T, H, D), the lse head-major (H, T).
Configs (T, H, D): a decode step of a 32-head model (1, 32, 128), a 512-token prefill chunk (512, 32, 128), an
8192-token prefill of an 8-KV-head layout (8192, 8, 128). T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 1, "H": 32, "D": 128},
    {"T": 512, "H": 32, "D": 128},
    {"T": 8192, "H": 8, "D": 128},
]
SMALL_CONFIG = {"T": 5, "H": 4, "D": 128}
FREE_DIMS = ["T"]
# the +inf and -inf lse the docstring defines, planted in the 'special_values' distribution (no draw produces them:
# session 44's probe without those rules passed every check before SPECIAL_VALUES)
SPECIAL_VALUES = {1: [float("inf"), float("-inf")], 3: [float("inf"), float("-inf")]}


def BYTES(T, H, D):
    return 3 * T * H * D * 2 + 2 * H * T * 4


class Model(nn.Module):
    def forward(self, prefix_out, prefix_lse, suffix_out, suffix_lse):
        ninf = torch.tensor(float("-inf"), dtype=torch.float32, device=prefix_lse.device)
        p_lse = torch.where(prefix_lse == float("inf"), ninf, prefix_lse.float())
        s_lse = torch.where(suffix_lse == float("inf"), ninf, suffix_lse.float())
        m = torch.maximum(p_lse, s_lse)
        empty = m == float("-inf")                       # both -inf: keep the prefix (weights 1, 0)
        m = torch.where(empty, torch.zeros_like(m), m)
        p = torch.where(empty, torch.ones_like(m), torch.exp(p_lse - m))
        s = torch.where(empty, torch.zeros_like(m), torch.exp(s_lse - m))
        w_p = (p / (p + s)).transpose(0, 1).unsqueeze(-1)   # (T, H, 1)
        w_s = (s / (p + s)).transpose(0, 1).unsqueeze(-1)
        out = prefix_out.float() * w_p + suffix_out.float() * w_s
        return out.to(prefix_out.dtype)


def get_inputs(T=1, H=32, D=128):
    # lse of a softmax over a few hundred keys: around log(S) plus the max score
    prefix_out = torch.randn(T, H, D, dtype=torch.bfloat16)
    suffix_out = torch.randn(T, H, D, dtype=torch.bfloat16)
    prefix_lse = torch.randn(H, T, dtype=torch.float32) * 2.0 + 6.0
    suffix_lse = torch.randn(H, T, dtype=torch.float32) * 2.0 + 6.0
    return [prefix_out, prefix_lse, suffix_out, suffix_lse]


def get_init_inputs(T=1, H=32, D=128):
    return []
