"""Y = GELU(X + bias), exact (erf) GELU, over X (M, N) fp16 with a bias of N; math in fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{"M": 16384, "N": n} for n in (1024, 4096, 8192)]
SMALL_CONFIG = {"M": 37, "N": 96}
FREE_DIMS = ["M"]


def BYTES(M, N):
    return 2 * M * N * 2 + N * 2


class Model(nn.Module):
    def __init__(self, N):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(N, dtype=torch.float16))

    def forward(self, x):
        return F.gelu(x.float() + self.bias.float()).to(x.dtype)


def get_inputs(M=16384, N=4096):
    return [torch.randn(M, N, dtype=torch.float16)]


def get_init_inputs(M=16384, N=4096):
    return [N]
