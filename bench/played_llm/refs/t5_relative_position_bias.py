"""T5's relative position bias (T5Attention.compute_bias with has_relative_attention_bias, bidirectional as in the
encoder): the query positions `cache_position` (Q,) int64 (here arange(K - Q, K): the last Q of K positions, as in
a decode step or a chunk) and the key positions 0 .. K-1 give rel = key - query (Q, K); each rel falls in one of
32 buckets (HF's _relative_position_bucket, num_buckets 32, max_distance 128):
    half = 16; bucket = 16 if rel > 0 else 0; n = |rel|
    bucket += n                                                              if n < 8
    bucket += min(8 + int(log(n / 8) / log(128 / 8) * (16 - 8)), 15)         otherwise (float32 log, truncation)
then the bucket indexes nn.Embedding(32, n_heads) (float32), output (1, n_heads, Q, K) float32 (exact: a lookup).
Configs: t5-large's 16 heads at 512 x 512 (encoder), 32 heads (t5-11b / flan-ul2 style) at 2048 x 2048, one decode
step (Q = 1) over 4096 keys at 32 heads. Q and K are free.
"""
import math

import torch
import torch.nn as nn

NUM_BUCKETS = 32
MAX_DISTANCE = 128

CONFIGS = [
    {"Q": 512, "K": 512, "heads": 16},
    {"Q": 2048, "K": 2048, "heads": 32},
    {"Q": 1, "K": 4096, "heads": 32},
]
SMALL_CONFIG = {"Q": 16, "K": 300, "heads": 4}
FREE_DIMS = ["Q", "K"]


def BYTES(Q, K, heads):
    return heads * Q * K * 4 + Q * 8 + NUM_BUCKETS * heads * 4


def relative_position_bucket(relative_position, num_buckets=NUM_BUCKETS, max_distance=MAX_DISTANCE):
    """HF transformers' T5Attention._relative_position_bucket, bidirectional=True."""
    relative_buckets = 0
    num_buckets //= 2
    relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
    relative_position = torch.abs(relative_position)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


class Model(nn.Module):
    def __init__(self, n_heads=16, key_length=512):
        super().__init__()
        self.key_length = key_length
        self.relative_attention_bias = nn.Embedding(NUM_BUCKETS, n_heads)

    def forward(self, cache_position):
        context_position = cache_position[:, None]
        memory_position = torch.arange(self.key_length, dtype=torch.long, device=cache_position.device)[None, :]
        bucket = relative_position_bucket(memory_position - context_position)     # (Q, K)
        values = self.relative_attention_bias(bucket)                              # (Q, K, heads)
        return values.permute([2, 0, 1]).unsqueeze(0)                             # (1, heads, Q, K)


def get_inputs(Q=512, K=512, heads=16):
    return [torch.arange(K - Q, K, dtype=torch.int64)]


def get_init_inputs(Q=512, K=512, heads=16):
    return [heads, K]
