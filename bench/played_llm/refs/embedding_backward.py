"""The backward of a token embedding (nn.Embedding's weight gradient, dense): dW[ids[t]] += dY[t] for every token t,
a scatter-add of token rows into vocabulary rows where frequent tokens repeat many times in a batch (the same row is
added to by many tokens, in no fixed order); rows of tokens absent from the batch are 0. grad_output dY (T, D) bf16,
ids (T,) int64 in [0, V), dW (V, D) float32 (the fp32 gradient a mixed-precision optimizer keeps), written as
torch.zeros(V, D).index_add_(0, ids, dY.float()).
GPT-2 (V = 50257, D = 768) at 8 x 1024 tokens, Llama-3 8B (V = 128256, D = 4096) at 8192 tokens, Mistral-7B v0.3
(V = 32768, D = 4096) at 16384 tokens. Half of the ids come from 64 frequent tokens. T and V are free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"T": 8192, "V": 50257, "D": 768},
    {"T": 8192, "V": 128256, "D": 4096},
    {"T": 16384, "V": 32768, "D": 4096},
]
SMALL_CONFIG = {"T": 300, "V": 1000, "D": 64}
FREE_DIMS = ["T", "V"]


def BYTES(T, V, D):
    return T * D * 2 + T * 8 + V * D * 4


def FLOPS(T, V, D):
    return T * D


class Model(nn.Module):
    def __init__(self, V):
        super().__init__()
        self.V = V

    def forward(self, grad_output, ids):
        out = torch.zeros(self.V, grad_output.shape[1], dtype=torch.float32, device=grad_output.device)
        return out.index_add_(0, ids, grad_output.float())


def get_inputs(T=8192, V=128256, D=4096):
    ids = torch.randint(0, V, (T,), dtype=torch.int64)
    common = torch.randint(0, V, (64,), dtype=torch.int64)        # frequent tokens: many repeats
    ids = torch.where(torch.rand(T) < 0.5, common[torch.randint(0, 64, (T,))], ids)
    return [torch.randn(T, D, dtype=torch.bfloat16), ids]


def get_init_inputs(T=8192, V=128256, D=4096):
    return [V]
