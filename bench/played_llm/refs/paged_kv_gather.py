"""Gather a paged KV cache into contiguous keys per sequence (vLLM's gather_cache / the chunked-prefill context
gather of FlashInfer and vLLM's MLA prefill, before a dense attention kernel over the cached prefix): key_cache
(NB, BS, H, D) float16 paged in blocks of BS tokens, block_table (B, MB) int32 the cache block of each sequence's
MB logical blocks, seq_lens (B,) int32 the tokens each sequence holds (1 .. MB * BS):
    out[b, s, :, :] = key_cache[block_table[b, s // BS], s % BS, :, :]     for s < seq_lens[b]
    out[b, s, :, :] = 0                                                     for seq_lens[b] <= s < MB * BS
output (B, MB * BS, H, D) float16 (a pure copy: exact). A row gather: each output token row (H * D contiguous
halves, 2 KB for Llama-3-8B) comes from a cache row picked by an index tensor; block ids are random (a fragmented
cache) and may repeat across sequences (shared prefix blocks). Slots of a table past a sequence's length still hold
valid block ids (as vLLM pads them), but the tokens they name must not be copied.
Configs (B, MB, NB, BS, H, D): Llama-3-8B (8 KV heads of 128), 8 sequences of up to 4096 tokens in a 4096-block
cache; Llama-2-7B (32 heads of 128), 4 sequences of up to 2048; Qwen2-7B (4 KV heads of 128), 32 sequences of up to
1024, block size 32. B, MB and NB are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 8, "MB": 256, "NB": 4096, "BS": 16, "H": 8, "D": 128},
    {"B": 4, "MB": 128, "NB": 1024, "BS": 16, "H": 32, "D": 128},
    {"B": 32, "MB": 32, "NB": 2048, "BS": 32, "H": 4, "D": 128},
]
SMALL_CONFIG = {"B": 3, "MB": 3, "NB": 7, "BS": 16, "H": 2, "D": 64}
FREE_DIMS = ["B", "MB", "NB"]


def BYTES(B, MB, NB, BS, H, D):
    return 2 * (2 * B * MB * BS * H * D) + 4 * B * MB + 4 * B


class Model(nn.Module):
    def forward(self, key_cache, block_table, seq_lens):
        NB, BS, H, D = key_cache.shape
        B, MB = block_table.shape
        S = MB * BS
        pos = torch.arange(S, device=key_cache.device)
        blocks = block_table.long()[:, pos // BS]                       # (B, S)
        out = key_cache[blocks, (pos % BS)[None, :].expand(B, S)]       # (B, S, H, D)
        valid = pos[None, :] < seq_lens.long()[:, None]                 # (B, S)
        return torch.where(valid[:, :, None, None], out, torch.zeros((), dtype=out.dtype, device=out.device))


def get_inputs(B=8, MB=256, NB=4096, BS=16, H=8, D=128):
    key_cache = torch.randn(NB, BS, H, D).to(torch.float16)
    block_table = torch.randint(0, NB, (B, MB), dtype=torch.int32)
    seq_lens = torch.randint(1, MB * BS + 1, (B,), dtype=torch.int32)
    seq_lens[0] = MB * BS                                               # one sequence fills its table
    if B >= 2:
        seq_lens[1] = (MB * BS) // 2 + 3                                # one ends inside a block
    return [key_cache, block_table, seq_lens]


def get_init_inputs(B=8, MB=256, NB=4096, BS=16, H=8, D=128):
    return []
