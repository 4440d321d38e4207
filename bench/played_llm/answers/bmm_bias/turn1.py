A batched version of the tiled GEMM example: the grid's third axis is the batch (dynamic B), each block computes a (block_M, block_N) tile of out[b] with a float32 accumulator, and the epilogue adds the (block_N,) slice of bias[b, 0, :] as a per-column fragment before storing fp16.

```python
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_M = None
BLOCK_N = None
BLOCK_K = None
NUM_STAGES = 3
THREADS = 128
TUNABLES = {
    "BLOCK_M": [None, 64, 128],
    "BLOCK_N": [None, 64, 128, 256],
    "BLOCK_K": [None, 32, 64],
    "NUM_STAGES": [3, 2, 4],
    "THREADS": [128, 256],
}


def schedule(M, N, K):
    block_m = 128 if M >= 128 else 64
    block_n = 128 if N >= 128 else 64
    block_k = 64 if K >= 64 else 32
    return block_m, block_n, block_k


@tileagent.jit(out_idx=[3])
def bmm_bias_kernel(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128, dtype="float16"):
    B = T.dynamic("B")

    @T.prim_func
    def main(
        Bias: T.Tensor((B, 1, N), dtype),
        A: T.Tensor((B, M, K), dtype),
        Bm: T.Tensor((B, K, N), dtype),
        C: T.Tensor((B, M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), B, threads=threads) as (bx, by, bz):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            bias_f = T.alloc_fragment((block_N,), "float32")

            T.copy(Bias[bz, 0, bx * block_N], bias_f)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[bz, by * block_M, k * block_K], A_s)
                T.copy(Bm[bz, k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(block_M, block_N):
                acc[i, j] = acc[i, j] + bias_f[j]
            T.copy(acc, C[bz, by * block_M, bx * block_N])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, bias, a, b):
        M, K = a.shape[1], a.shape[2]
        N = b.shape[2]
        bm, bn, bk = schedule(M, N, K)
        kernel = bmm_bias_kernel(M, N, K, BLOCK_M or bm, BLOCK_N or bn, BLOCK_K or bk, NUM_STAGES, THREADS)
        return kernel(bias, a, b)
```
