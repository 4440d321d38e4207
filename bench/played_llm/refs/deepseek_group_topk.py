"""DeepSeek-V3's MoE router gate (topk_method "noaux_tc", as in modeling_deepseek.MoEGate) on router logits
(T, E = 256) of any dtype, computed in float32:
    scores = sigmoid(logits.float())                                  (T, E)
    s = scores + e_score_correction_bias                              bias (E,) fp32 parameter
    group_scores[t, g] = sum of the top-2 of s[t, g*32:(g+1)*32]      8 groups of 32 experts
    keep the top-4 groups; s of the experts of the other groups set to 0 (the model's masked_fill 0.0;
        every s is positive here, so 0 is below every kept one)
    topk_idx = the 8 largest s among the kept experts (largest first, as torch.topk sorted)
    w = scores[t, topk_idx] (without the bias); topk_weight = w / w.sum(-1) * 2.5 (routed_scaling_factor)
outputs (topk_idx int64 (T, 8), topk_weight float32 (T, 8)). The bias is drawn in [0, 0.1) so s stays positive, and
inputs are continuous (ties have probability ~0). T is free: 1 (decode), 128, 4096 and 16384 tokens.
"""
import torch
import torch.nn as nn

N_GROUP = 8
TOPK_GROUP = 4
TOP_K = 8
SCALE = 2.5

CONFIGS = [
    {"T": 1, "E": 256},
    {"T": 128, "E": 256},
    {"T": 4096, "E": 256},
    {"T": 16384, "E": 256},
]
SMALL_CONFIG = {"T": 5, "E": 256}
FREE_DIMS = ["T"]


def BYTES(T, E):
    return T * E * 4 + E * 4 + T * TOP_K * 12


class Model(nn.Module):
    def __init__(self, E=256):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.e_score_correction_bias = nn.Parameter(torch.rand(E, generator=g) * 0.1, requires_grad=False)

    def forward(self, logits):
        T, E = logits.shape
        scores = logits.float().sigmoid()
        s = scores + self.e_score_correction_bias.unsqueeze(0)
        group_scores = s.view(T, N_GROUP, -1).topk(2, dim=-1)[0].sum(dim=-1)          # (T, 8)
        group_idx = torch.topk(group_scores, k=TOPK_GROUP, dim=-1, sorted=False)[1]   # (T, 4)
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(T, N_GROUP, E // N_GROUP).reshape(T, -1)
        tmp = s.masked_fill(~score_mask.bool(), 0.0)
        _, topk_idx = torch.topk(tmp, k=TOP_K, dim=-1, sorted=True)
        w = scores.gather(1, topk_idx)
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20) * SCALE
        return topk_idx, w


def get_inputs(T=4096, E=256):
    return [torch.randn(T, E, dtype=torch.float32)]


def get_init_inputs(T=4096, E=256):
    return [E]
