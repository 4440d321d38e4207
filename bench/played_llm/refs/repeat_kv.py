"""HF transformers' repeat_kv for grouped-query attention: the key (or value) states of Hkv heads, each repeated
n_rep times so that every one of the Hkv * n_rep query heads has its own copy:
    hidden (B, Hkv, S, D) bf16 -> hidden[:, :, None].expand(B, Hkv, n_rep, S, D).reshape(B, Hkv * n_rep, S, D)
    out[b, h * n_rep + r, s, d] = hidden[b, h, s, d]
output (B, Hkv * n_rep, S, D) bf16 (a pure data movement: exact). n_rep is the constructor argument (num_attention_heads
// num_key_value_heads).
Configs: Llama-3-8B (8 KV heads, n_rep 4, D 128) at 2 x 4096 tokens, Llama-3-70B (8 KV heads, n_rep 8) at 1 x 8192,
Qwen2-7B (4 KV heads, n_rep 7) at 4 x 2048. B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 2, "HKV": 8, "NREP": 4, "S": 4096, "D": 128},
    {"B": 1, "HKV": 8, "NREP": 8, "S": 8192, "D": 128},
    {"B": 4, "HKV": 4, "NREP": 7, "S": 2048, "D": 128},
]
SMALL_CONFIG = {"B": 2, "HKV": 2, "NREP": 3, "S": 40, "D": 64}
FREE_DIMS = ["B"]


def BYTES(B, HKV, NREP, S, D):
    return B * HKV * S * D * 2 * (1 + NREP)


class Model(nn.Module):
    def __init__(self, n_rep=4):
        super().__init__()
        self.n_rep = n_rep

    def forward(self, hidden_states):
        batch, num_key_value_heads, slen, head_dim = hidden_states.shape
        if self.n_rep == 1:
            return hidden_states
        hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, self.n_rep, slen, head_dim)
        return hidden_states.reshape(batch, num_key_value_heads * self.n_rep, slen, head_dim)


def get_inputs(B=2, HKV=8, NREP=4, S=4096, D=128):
    return [torch.randn(B, HKV, S, D, dtype=torch.bfloat16)]


def get_init_inputs(B=2, HKV=8, NREP=4, S=4096, D=128):
    return [NREP]
