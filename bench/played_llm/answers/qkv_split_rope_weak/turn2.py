q (output 0) and v (output 2) match, only k (output 1) is wrong almost everywhere, so the rotation is right and the k scope reads the wrong columns: I read k head g at column g*D, which is q head g; k starts after the H query heads, at H*D + g*D.

```python
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_T = None
THREADS = None
TUNABLES = {"BLOCK_T": [None, 8, 16, 32], "THREADS": [None, 64, 128, 256]}


def schedule(n_tok, D):
    """(block_t, threads): up to 16 tokens of one head per block, ~8 values per thread per half-head tile."""
    bt = 1
    while bt < n_tok and bt < 16:
        bt *= 2
    threads = max(32, min(128, bt * (D // 2) // 8))
    return bt, threads


@tileagent.jit(out_idx=[3, 4, 5])
def qkv_rope(H, G, D, block_t, threads, dtype="float16"):
    Tn = T.dynamic("T")
    half = D // 2
    W = (H + 2 * G) * D
    k_off = H * D
    v_off = (H + G) * D

    @T.prim_func
    def main(X: T.Tensor((Tn, W), dtype), Cos: T.Tensor((Tn, half), "float32"), Sin: T.Tensor((Tn, half), "float32"),
             Q: T.Tensor((Tn, H * D), dtype), K: T.Tensor((Tn, G * D), dtype), V: T.Tensor((Tn, G * D), dtype)):
        # q heads: rotary
        with T.Kernel(T.ceildiv(Tn, block_t), H, threads=threads) as (bt, h):
            x1 = T.alloc_fragment((block_t, half), "float32")
            x2 = T.alloc_fragment((block_t, half), "float32")
            c = T.alloc_fragment((block_t, half), "float32")
            s = T.alloc_fragment((block_t, half), "float32")
            o1 = T.alloc_fragment((block_t, half), "float32")
            o2 = T.alloc_fragment((block_t, half), "float32")
            t0 = bt * block_t
            T.copy(X[t0, h * D], x1)
            T.copy(X[t0, h * D + half], x2)
            T.copy(Cos[t0, 0], c)
            T.copy(Sin[t0, 0], s)
            for i, j in T.Parallel(block_t, half):
                a = x1[i, j]
                b = x2[i, j]
                o1[i, j] = a * c[i, j] - b * s[i, j]
                o2[i, j] = b * c[i, j] + a * s[i, j]
            T.copy(o1, Q[t0, h * D])
            T.copy(o2, Q[t0, h * D + half])
        # k heads: rotary
        with T.Kernel(T.ceildiv(Tn, block_t), G, threads=threads) as (bt, g):
            x1 = T.alloc_fragment((block_t, half), "float32")
            x2 = T.alloc_fragment((block_t, half), "float32")
            c = T.alloc_fragment((block_t, half), "float32")
            s = T.alloc_fragment((block_t, half), "float32")
            o1 = T.alloc_fragment((block_t, half), "float32")
            o2 = T.alloc_fragment((block_t, half), "float32")
            t0 = bt * block_t
            T.copy(X[t0, k_off + g * D], x1)
            T.copy(X[t0, k_off + g * D + half], x2)
            T.copy(Cos[t0, 0], c)
            T.copy(Sin[t0, 0], s)
            for i, j in T.Parallel(block_t, half):
                a = x1[i, j]
                b = x2[i, j]
                o1[i, j] = a * c[i, j] - b * s[i, j]
                o2[i, j] = b * c[i, j] + a * s[i, j]
            T.copy(o1, K[t0, g * D])
            T.copy(o2, K[t0, g * D + half])
        # v heads: plain copy (exact, in the input dtype)
        with T.Kernel(T.ceildiv(Tn, block_t), G, threads=threads) as (bt, g):
            vv = T.alloc_fragment((block_t, D), dtype)
            t0 = bt * block_t
            T.copy(X[t0, v_off + g * D], vv)
            T.copy(vv, V[t0, g * D])

    return main


class ModelNew(nn.Module):
    def __init__(self, H=32, G=8, D=128):
        super().__init__()
        self.H, self.G, self.D = H, G, D

    def forward(self, x, cos, sin):
        n_tok = x.shape[0]
        H, G, D = self.H, self.G, self.D
        bt, th = schedule(n_tok, D)
        dtype = "bfloat16" if x.dtype == torch.bfloat16 else "float16"
        q, k, v = qkv_rope(H, G, D, BLOCK_T or bt, THREADS or th, dtype)(x, cos, sin)
        return q.view(n_tok, H, D), k.view(n_tok, G, D), v.view(n_tok, G, D)
```
