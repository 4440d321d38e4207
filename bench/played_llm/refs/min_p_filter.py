"""Min-p filtering of next-token logits (vLLM's sampler: logits / temperature, then _apply_min_p; transformers'
TemperatureLogitsWarper then MinPLogitsWarper):
    z = logits / temperature[:, None]                 float32, the output's values
    p = softmax(z, dim=-1);   keep[b, v] = p[b, v] >= min_p[b] * max_v p[b, v]
    out = z where keep, else -inf
logits (B, V) float32, temperature (B,) float32 (> 0), min_p (B,) float32 in [0, 1) (0 keeps every token);
output (B, V) float32. The probabilities are taken in float64 here so the kept set is well defined (p / max p =
exp(z - max z), so the softmax's denominator does not matter; only rounding at the threshold does). The most likely
token is always kept. Logits may already hold -inf (tokens masked by an earlier processor: bad words, allowed-token
lists): they stay -inf; SPECIAL_VALUES plants them.
temperature and min_p come from get_inputs (FIXED_INPUTS): temperatures in [0.3, 1.5], min_p in [0, 0.2] with a
quarter of the rows at 0 (min-p off for that request).
Llama-2 / Mistral (32000) at B = 64 and 256, Llama-3 (128256) at B = 1 and 64. B is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"B": 1, "V": 128256},
    {"B": 64, "V": 32000},
    {"B": 256, "V": 32000},
    {"B": 64, "V": 128256},
]
SMALL_CONFIG = {"B": 3, "V": 1000}
FREE_DIMS = ["B"]
FIXED_INPUTS = [1, 2]
SPECIAL_VALUES = {0: [float("-inf")]}


def BYTES(B, V):
    return 2 * 4 * B * V + 8 * B


class Model(nn.Module):
    def forward(self, logits, temperature, min_p):
        z = logits / temperature[:, None]
        p = torch.softmax(z.double(), dim=-1)
        pmax = p.max(dim=-1, keepdim=True).values
        keep = p >= min_p.double()[:, None] * pmax
        return z.masked_fill(~keep, float("-inf"))


def get_inputs(B=1, V=128256):
    logits = torch.randn(B, V) * 3.0
    temperature = torch.rand(B) * 1.2 + 0.3
    min_p = torch.rand(B) * 0.2
    min_p = torch.where(torch.rand(B) < 0.25, torch.zeros_like(min_p), min_p)
    return [logits, temperature, min_p]


def get_init_inputs(B=1, V=128256):
    return []
