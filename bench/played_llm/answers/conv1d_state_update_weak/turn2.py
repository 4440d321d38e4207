Both outputs are wrong almost everywhere, and the new state is wrong at the last tap (index 3 should be the new token, expected 0.02855, got an old state value): `torch.cat([conv_state[:, :, 1:], x[:, :, None]], -1)` appends x at the END and drops the oldest tap 0, so new_state[c, w] = state[c, w + 1] for w < W - 1 and x[c] at w = W - 1; I had the shift reversed.

```python
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

LOG2E = 1.4426950408889634

BLOCK_C = None
THREADS = None
TUNABLES = {"BLOCK_C": [None, 128, 256, 512, 1024], "THREADS": [None, 64, 128, 256]}


def schedule(B, C):
    """(block_c, threads): bigger channel tiles when the batch gives enough blocks, small ones for decode B=1."""
    block_c = 512 if B >= 32 else 128
    block_c = min(block_c, C)
    threads = 128
    return block_c, threads


@tileagent.jit(out_idx=[4, 5])
def conv1d_update(C, W, block_c, threads, dtype="float16"):
    B = T.dynamic("B")

    @T.prim_func
    def main(X: T.Tensor((B, C), dtype), S: T.Tensor((B, C, W), dtype), Wt: T.Tensor((C, W), dtype),
             Bias: T.Tensor((C,), dtype), Y: T.Tensor((B, C), dtype), NS: T.Tensor((B, C, W), dtype)):
        with T.Kernel(T.ceildiv(C, block_c), B, threads=threads) as (bc, b):
            st_s = T.alloc_shared((block_c, W), dtype)
            ns = T.alloc_fragment((block_c, W), "float32")
            wf = T.alloc_fragment((block_c, W), "float32")
            prod = T.alloc_fragment((block_c, W), "float32")
            xf = T.alloc_fragment((block_c,), "float32")
            bf = T.alloc_fragment((block_c,), "float32")
            acc = T.alloc_fragment((block_c,), "float32")
            c0 = bc * block_c
            T.copy(S[b, c0, 0], st_s)
            T.copy(Wt[c0, 0], wf)
            T.copy(X[b, c0], xf)
            T.copy(Bias[c0], bf)
            for i, w in T.Parallel(block_c, W):
                ns[i, w] = T.if_then_else(w < W - 1, T.cast(st_s[i, T.min(w + 1, W - 1)], "float32"), xf[i])
                prod[i, w] = ns[i, w] * wf[i, w]
            T.copy(ns, NS[b, c0, 0])
            T.reduce_sum(prod, acc, dim=1)
            for i in T.Parallel(block_c):
                v = acc[i] + bf[i]
                acc[i] = v / (1.0 + T.exp2(v * -LOG2E))
            T.copy(acc, Y[b, c0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, conv_state, weight, bias):
        B, C, W = conv_state.shape
        block_c, threads = schedule(B, C)
        dtype = "bfloat16" if x.dtype == torch.bfloat16 else "float16"
        out, new_state = conv1d_update(C, W, BLOCK_C or block_c, THREADS or threads, dtype)(x, conv_state, weight, bias)
        return out, new_state
```
