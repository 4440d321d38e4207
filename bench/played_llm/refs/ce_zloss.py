"""Token-level cross-entropy with ignore_index and z-loss (PaLM / OLMo / Chameleon pre-training and SFT): logits
(T, V) bf16, labels (T,) int64 where -100 marks a token that is not trained on (padding, the prompt of an SFT
sample). Per token, in float32: lse = logsumexp(logits), ce = lse - logits[label], z = lse ** 2; the loss is the mean
over the non-ignored tokens of ce + z_coef * z (z_coef = 1e-4), a float32 scalar (0-dim). With every token ignored the
mean is 0 / 0 = NaN, as torch's own ignore_index mean.
Llama-3 (128256) at T = 8192 tokens (one micro-batch of 1 x 8192), Qwen2 (151936) at T = 4096, Mistral v0.3 (32768)
at T = 16384. T is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 8192, "V": 128256},
    {"T": 4096, "V": 151936},
    {"T": 16384, "V": 32768},
]
SMALL_CONFIG = {"T": 9, "V": 1000}
FREE_DIMS = ["T"]


def BYTES(T, V):
    return T * V * 2 + T * 8 + 4


def FLOPS(T, V):
    return 4 * T * V


class Model(nn.Module):
    def __init__(self, z_coef=1e-4, ignore_index=-100):
        super().__init__()
        self.z_coef = z_coef
        self.ignore_index = ignore_index

    def forward(self, logits, labels):
        x = logits.float()
        lse = torch.logsumexp(x, dim=-1)
        valid = labels != self.ignore_index
        tgt = x.gather(1, labels.clamp(min=0).unsqueeze(1)).squeeze(1)
        per = (lse - tgt) + self.z_coef * lse * lse
        per = torch.where(valid, per, torch.zeros_like(per))
        return per.sum() / valid.sum().float()


def get_inputs(T=8192, V=128256):
    labels = torch.randint(0, V, (T,), dtype=torch.int64)
    labels[1::4] = -100                             # prompt / padding tokens: not trained on
    return [torch.randn(T, V, dtype=torch.bfloat16) * 2.0, labels]


def get_init_inputs(T=8192, V=128256):
    return [1e-4, -100]
