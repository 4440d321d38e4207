"""KernelBench L2-like: y = swish(x) + bias = x * sigmoid(x) + bias over X (M, N), bf16; math in fp32."""
import torch
import torch.nn as nn

CONFIGS = [{"M": 16384, "N": n} for n in (1024, 4096, 11008)]
SMALL_CONFIG = {"M": 37, "N": 96}
FREE_DIMS = ["M"]


def BYTES(M, N):
    return 2 * M * N * 2 + N * 2


class Model(nn.Module):
    def __init__(self, N):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(N, dtype=torch.bfloat16))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.sigmoid(xf) + self.bias.float()).to(x.dtype)


def get_inputs(M=16384, N=4096):
    return [torch.randn(M, N, dtype=torch.bfloat16)]


def get_init_inputs(M=16384, N=4096):
    return [N]
