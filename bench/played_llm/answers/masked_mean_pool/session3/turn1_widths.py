# Not a played answer: session 3's turn1.py with only its narrowed global accesses fixed (RESULTS.md S3-5, S3-6),
# for the H200 A/B (run_gpu.sh widths); passed tileagent eval --device cpu.
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_K = None
BLOCK_N = None
TUNABLES = {"BLOCK_K": [None, 32, 128], "BLOCK_N": [None, 128, 256]}


def schedule(D):
    """(block_k, block_n, threads): a (64, 64) tile, 32 values per thread at 128 threads."""
    return 64, 64, 128


@tileagent.jit(out_idx=[2])
def masked_mean(D, block_k, block_n, threads, dtype="float16"):
    B, S = T.dynamic("B, S")

    @T.prim_func
    def main(H: T.Tensor((B, S, D), dtype), Mask: T.Tensor((B, S), "int64"), Y: T.Tensor((B, D), dtype)):
        with T.Kernel(T.ceildiv(D, block_n), B, threads=threads) as (bn, b):
            x = T.alloc_fragment((block_k, block_n), "float32")
            acc = T.alloc_fragment((block_k, block_n), "float32")
            mf = T.alloc_fragment((block_k,), "float32")
            s = T.alloc_fragment((block_n,), "float32")
            ct = T.alloc_fragment((1,), "float32")
            ms = T.alloc_shared((block_k,), "int64")
            T.clear(acc)
            T.clear(ct)
            for k in T.serial(T.ceildiv(S, block_k)):
                T.copy(H[b, k * block_k, bn * block_n], x)     # rows past S read as 0
                T.copy(Mask[b, k * block_k], ms)               # int64 via shared: keeps H's loads 128-bit
                for i in T.Parallel(block_k):
                    mf[i] = T.cast(ms[i], "float32")
                for i, j in T.Parallel(block_k, block_n):
                    acc[i, j] += x[i, j] * mf[i]
                T.reduce_sum(mf, ct, dim=0, clear=False)
            T.reduce_sum(acc, s, dim=0)
            for j in T.Parallel(block_n):
                s[j] = s[j] / T.max(ct[0], 1e-9)
            T.copy(s, Y[b, bn * block_n])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, hidden, attention_mask):
        B, S, D = hidden.shape
        block_k, block_n, threads = schedule(D)
        return masked_mean(D, BLOCK_K or block_k, BLOCK_N or block_n, threads)(hidden, attention_mask)
