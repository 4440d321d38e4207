"""Running maximum along the last dim with its argmax (torch.cummax(x, dim=-1)): monotone envelopes of per-token
scores (the running-max baseline of max-logprob / confidence curves in speculative decoding and early exit, a
"prefix max" of attention-sink scores, the upper envelope in monotonic / alignment attention of TTS models): x (M, L)
float16,
    values[m, l]  = max over j <= l of x[m, j]                (float16, exact: no arithmetic)
    indices[m, l] = the j <= l where that max sits            (int64; among equal maxima torch gives the LAST one)
returns (values, indices) as torch.cummax does. A scan along the row: every output depends on the whole prefix.
Configs (M, L): 32 heads x 128 sequences of 4096 positions (4096 rows of 4096); 64 rows of a 32768-token context;
32768 rows of 512 (batch x heads of a short-context model). M and L are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"M": 4096, "L": 4096},
    {"M": 64, "L": 32768},
    {"M": 32768, "L": 512},
]
SMALL_CONFIG = {"M": 5, "L": 700}
FREE_DIMS = ["M", "L"]


def BYTES(M, L):
    return M * L * 2 + M * L * 2 + M * L * 8


class Model(nn.Module):
    def forward(self, x):
        values, indices = torch.cummax(x, dim=-1)
        return values, indices


def get_inputs(M=4096, L=4096):
    return [torch.randn(M, L).to(torch.float16)]


def get_init_inputs(M=4096, L=4096):
    return []
