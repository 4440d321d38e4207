"""Selective log-softmax (TRL's selective_log_softmax, the per-token log-probabilities of the chosen tokens in
RL training: GRPO / PPO / DPO): logits (B, S, V) bf16 from the LM head, index (B, S) int64 in [0, V) (the sampled
tokens); in float32:
    out[b, s] = logits[b, s, index[b, s]] - logsumexp(logits[b, s, :])
             = log_softmax(logits.float(), dim=-1)[b, s, index[b, s]]
output (B, S) float32. Nothing of size V is written: only one float per token.
Configs: Qwen2.5 (V = 151936) at 8 x 1024 tokens, Llama-3 (V = 128256) at 4 x 2048, Llama-2 / Mistral (V = 32000) at
16 x 512. B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 8, "S": 1024, "V": 151936},
    {"B": 4, "S": 2048, "V": 128256},
    {"B": 16, "S": 512, "V": 32000},
]
SMALL_CONFIG = {"B": 2, "S": 16, "V": 1000}
FREE_DIMS = ["B"]


def BYTES(B, S, V):
    return B * S * V * 2 + B * S * 8 + B * S * 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, index):
        logp = torch.log_softmax(logits.float(), dim=-1)
        return torch.gather(logp, -1, index.unsqueeze(-1)).squeeze(-1)


def get_inputs(B=8, S=1024, V=151936):
    return [torch.randn(B, S, V, dtype=torch.bfloat16) * 3,
            torch.randint(0, V, (B, S), dtype=torch.int64)]


def get_init_inputs(B=8, S=1024, V=151936):
    return []
