"""Append a step's keys / values to a paged KV cache (vLLM reshape_and_cache): key and value (T, H, D) fp16 are
scattered into key_cache / value_cache (NB, BS, H, D) fp16 at flat slot slot_mapping[t] = block * BS + offset
(slot_mapping (T,) int64, distinct slots; -1 marks a padding token that is not written). Returns the updated
caches (the inputs are not modified). Llama-3-8B (8 KV heads of 128) decode and prefill steps, Llama-2-7B (32
heads) decode; block size 16. T and NB are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 256, "NB": 2048, "BS": 16, "H": 8, "D": 128},
    {"T": 8192, "NB": 2048, "BS": 16, "H": 8, "D": 128},
    {"T": 64, "NB": 1024, "BS": 16, "H": 32, "D": 128},
]
SMALL_CONFIG = {"T": 19, "NB": 5, "BS": 16, "H": 2, "D": 64}
FREE_DIMS = ["T", "NB"]


def BYTES(T, NB, BS, H, D):
    return 2 * (2 * NB * BS * H * D * 2 + T * H * D * 2) + T * 8


class Model(nn.Module):
    def forward(self, key, value, key_cache, value_cache, slot_mapping):
        NB, BS, H, D = key_cache.shape
        kc = key_cache.clone()
        vc = value_cache.clone()
        valid = slot_mapping >= 0
        slots = slot_mapping[valid]
        kc.view(NB * BS, H, D)[slots] = key[valid]
        vc.view(NB * BS, H, D)[slots] = value[valid]
        return kc, vc


def get_inputs(T=256, NB=2048, BS=16, H=8, D=128):
    slots = torch.full((T,), -1, dtype=torch.int64)
    n = min(T, NB * BS)                             # (a checked tail size may have fewer slots than tokens)
    slots[:n] = torch.randperm(NB * BS)[:n]
    slots[1::5] = -1                                # padding tokens of the batch: not written
    return [torch.randn(T, H, D, dtype=torch.float16), torch.randn(T, H, D, dtype=torch.float16),
            torch.randn(NB, BS, H, D, dtype=torch.float16), torch.randn(NB, BS, H, D, dtype=torch.float16), slots]


def get_init_inputs(T=256, NB=2048, BS=16, H=8, D=128):
    return []
