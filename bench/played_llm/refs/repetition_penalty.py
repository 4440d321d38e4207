"""Repetition penalty on next-token logits (transformers' RepetitionPenaltyLogitsProcessor, vLLM's sampler):
for each row b, every token id that occurs in prev_ids[b] (the prompt and the tokens generated so far, (B, L) int64;
ids repeat, a token seen several times is penalized once) has its logit divided by penalty (1.2) if it is positive
and multiplied by it if it is negative; all other logits pass unchanged. logits (B, V) fp32, output (B, V) fp32,
a new tensor (the input is not modified).
Llama-3 (128256) at B = 1 with an 8192-token context, Llama-2 / Mistral (32000) at B = 32 with 2048, Qwen2 (151936)
at B = 128 with 1024. B and L are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "V": 128256, "L": 8192},
    {"B": 32, "V": 32000, "L": 2048},
    {"B": 128, "V": 151936, "L": 1024},
]
SMALL_CONFIG = {"B": 3, "V": 1000, "L": 50}
FREE_DIMS = ["B", "L"]


def BYTES(B, V, L):
    return 2 * B * V * 4 + B * L * 8


class Model(nn.Module):
    def __init__(self, penalty=1.2):
        super().__init__()
        self.penalty = penalty

    def forward(self, logits, prev_ids):
        score = torch.gather(logits, 1, prev_ids)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        return logits.scatter(1, prev_ids, score)


def get_inputs(B=1, V=128256, L=8192):
    ids = torch.randint(0, V, (B, L), dtype=torch.int64)
    common = torch.randint(0, V, (B, 32), dtype=torch.int64)     # frequent tokens: many repeats a row
    pick = torch.randint(0, 32, (B, L))
    ids = torch.where(torch.rand(B, L) < 0.5, common.gather(1, pick), ids)
    return [torch.randn(B, V) * 3.0, ids]


def get_init_inputs(B=1, V=128256, L=8192):
    return [1.2]
