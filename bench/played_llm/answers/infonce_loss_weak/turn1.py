Three kernel scopes in one launch (ragged N needs no masks: out-of-bounds reads are 0): (1) per row, the inverse L2 norms of a and b and the positive logit a_i·b_i (into a float32 workspace); (2) a flash-attention-style pass: per block of rows of a, stream the columns (rows of b) in tiles, compute the raw fp16 dot products with `T.gemm` (float32 accumulator, products of fp16 values are exact), scale by ra[i]·rb[j]/tau, and keep an online logsumexp; write lse_i - pos_i per row; (3) one block averages the per-row losses into a `(1,)` output, returned as a 0-d view.

```python
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

LOG2E = 1.4426950408889634

BLOCK_M = None
BLOCK_K = None
TUNABLES = {"BLOCK_M": [None, 128], "BLOCK_K": [None, 32, 128]}


@tileagent.jit(out_idx=[4])
def infonce(D, inv_tau, block_r=4, block_M=64, block_N=64, block_K=64, num_stages=2, threads=128,
            block_f=1024, dtype="float16"):
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N, D), dtype), B: T.Tensor((N, D), dtype), WS: T.Tensor((3, N), "float32"),
             LR: T.Tensor((N,), "float32"), Y: T.Tensor((1,), "float32")):
        # 1) row statistics: 1/max(||a||, eps), 1/max(||b||, eps), positive logit
        with T.Kernel(T.ceildiv(N, block_r), threads=128) as br:
            xa = T.alloc_fragment((block_r, D), "float32")
            xb = T.alloc_fragment((block_r, D), "float32")
            pa = T.alloc_fragment((block_r, D), "float32")
            pb = T.alloc_fragment((block_r, D), "float32")
            pab = T.alloc_fragment((block_r, D), "float32")
            sa = T.alloc_fragment((block_r,), "float32")
            sb = T.alloc_fragment((block_r,), "float32")
            sab = T.alloc_fragment((block_r,), "float32")
            T.copy(A[br * block_r, 0], xa)
            T.copy(B[br * block_r, 0], xb)
            for i, j in T.Parallel(block_r, D):
                pa[i, j] = xa[i, j] * xa[i, j]
                pb[i, j] = xb[i, j] * xb[i, j]
                pab[i, j] = xa[i, j] * xb[i, j]
            T.reduce_sum(pa, sa, dim=1)
            T.reduce_sum(pb, sb, dim=1)
            T.reduce_sum(pab, sab, dim=1)
            for i in T.Parallel(block_r):
                sa[i] = 1.0 / T.max(T.sqrt(sa[i]), 1e-12)
                sb[i] = 1.0 / T.max(T.sqrt(sb[i]), 1e-12)
                sab[i] = sab[i] * sa[i] * sb[i] * inv_tau
            T.copy(sa, WS[0, br * block_r])
            T.copy(sb, WS[1, br * block_r])
            T.copy(sab, WS[2, br * block_r])

        # 2) per-row logsumexp over all columns (online), minus the positive logit
        with T.Kernel(T.ceildiv(N, block_M), threads=threads) as bm:
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            raf = T.alloc_fragment((block_M,), "float32")
            rbf = T.alloc_fragment((block_N,), "float32")
            dg = T.alloc_fragment((block_M,), "float32")
            m = T.alloc_fragment((block_M,), "float32")
            m_old = T.alloc_fragment((block_M,), "float32")
            l = T.alloc_fragment((block_M,), "float32")
            l_tile = T.alloc_fragment((block_M,), "float32")
            T.copy(WS[0, bm * block_M], raf)
            T.copy(WS[2, bm * block_M], dg)
            T.fill(m, -T.infinity("float32"))
            T.clear(l)
            for c in T.serial(T.ceildiv(N, block_N)):
                T.clear(acc)
                for k in T.Pipelined(T.ceildiv(D, block_K), num_stages=num_stages):
                    T.copy(A[bm * block_M, k * block_K], A_s)
                    T.copy(B[c * block_N, k * block_K], B_s)
                    T.gemm(A_s, B_s, acc, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(WS[1, c * block_N], rbf)
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] = acc[i, j] * raf[i] * rbf[j] * inv_tau   # padding columns read 0
                T.copy(m, m_old)
                T.reduce_max(acc, m, dim=1, clear=False)
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] = T.exp2((acc[i, j] - m[i]) * LOG2E)
                T.reduce_sum(acc, l_tile, dim=1)
                for i in T.Parallel(block_M):
                    l[i] = l[i] * T.exp2((m_old[i] - m[i]) * LOG2E) + l_tile[i]
            for i in T.Parallel(block_M):
                l[i] = m[i] + T.log(l[i]) - dg[i]
            T.copy(l, LR[bm * block_M])                      # rows past N are not stored

        # 3) mean over rows (one block, deterministic)
        with T.Kernel(1, threads=128) as bx:
            v = T.alloc_fragment((block_f,), "float32")
            accf = T.alloc_fragment((block_f,), "float32")
            tot = T.alloc_fragment((1,), "float32")
            T.clear(accf)
            for k in T.serial(T.ceildiv(N, block_f)):
                T.copy(LR[k * block_f], v)                   # past N reads 0
                for j in T.Parallel(block_f):
                    accf[j] = accf[j] + v[j]
            T.reduce_sum(accf, tot, dim=0)
            for i in T.Parallel(1):
                tot[i] = tot[i] / T.cast(N, "float32")
            T.copy(tot, Y[0])

    return main


class ModelNew(nn.Module):
    def __init__(self, tau=0.07):
        super().__init__()
        self.tau = tau

    def forward(self, a, b):
        N, D = a.shape
        dtype = "bfloat16" if a.dtype == torch.bfloat16 else "float16"
        block_M = BLOCK_M or 64
        block_K = BLOCK_K or 64
        threads = 128 if block_M == 64 else 256
        ws = torch.empty(3, N, dtype=torch.float32, device=a.device)
        lr = torch.empty(N, dtype=torch.float32, device=a.device)
        kernel = infonce(D, 1.0 / self.tau, block_M=block_M, block_K=block_K, threads=threads, dtype=dtype)
        y = kernel(a, b, ws, lr)
        return y.view(())
```
