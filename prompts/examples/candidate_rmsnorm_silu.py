"""Candidate for tasks/rmsnorm_silu.py in the evaluator's format: Y = SiLU(RMSNorm(X) * gamma), fp16 in and out.

`class ModelNew` has Model's constructor and forward signatures and names its parameter `gamma` as Model does, so
the evaluator copies Model's weights into it. The forward path only reads shapes, picks a schedule with Python ints
and calls the kernel: the output is allocated by `out_idx`, and every element is written by the kernel.

Tunable knobs: BLOCK_M and THREADS (None: the schedule() default for the row length C). The agent loop re-evaluates
this file with each value listed in TUNABLES assigned instead.
"""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_M = None
THREADS = None
TUNABLES = {"BLOCK_M": [None, 1, 2, 4, 8], "THREADS": [None, 64, 128, 256]}

LOG2E = 1.4426950408889634


def schedule(C):
    """(block_m, threads) for a row length C: every thread holds 16 to 32 values of a block of whole rows."""
    threads = 256 if C >= 2048 else 128
    per_thread = 16 if C in (256, 512, 1024) else 32
    block_m = 1
    while block_m * 2 * C <= threads * per_thread and block_m < 128:
        block_m *= 2
    return block_m, threads


@tileagent.jit(out_idx=[2], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def rmsnorm_silu(C, block_m, threads, eps, dtype="float16"):
    M = T.dynamic("M")  # one compiled kernel serves every row count

    @T.prim_func
    def main(X: T.Tensor((M, C), dtype), gamma: T.Tensor((C,), dtype), Y: T.Tensor((M, C), dtype)):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, C), "float32")
            g = T.alloc_fragment((C,), "float32")
            sq = T.alloc_fragment((block_m, C), "float32")
            rinv = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)  # rows past M read as 0; their stores below are dropped
            T.copy(gamma, g)
            for i, j in T.Parallel(block_m, C):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, rinv, dim=1)
            for i in T.Parallel(block_m):
                rinv[i] = T.rsqrt(rinv[i] / C + eps)
            for i, j in T.Parallel(block_m, C):
                v = x[i, j] * rinv[i] * g[j]
                x[i, j] = v / (1.0 + T.exp2(v * -LOG2E))  # silu(v) = v * sigmoid(v)
            T.copy(x, Y[bm * block_m, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(C, dtype=torch.float16))

    def forward(self, x):
        C = x.shape[1]
        block_m, threads = schedule(C)
        return rmsnorm_silu(C, BLOCK_M or block_m, THREADS or threads, self.eps)(x, self.gamma)
