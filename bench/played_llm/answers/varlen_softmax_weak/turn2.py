import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

LOG2E = 1.4426950408889634
BLOCK_D = None
THREADS = None
TUNABLES = {"BLOCK_D": [None, 16, 32, 64], "THREADS": [None, 128, 256]}


def schedule(B, D):
    """(block_t, block_d, threads): narrow column tiles until the grid has >= 264 blocks; 32 values a thread."""
    threads = THREADS or 128
    block_d = BLOCK_D or D
    if BLOCK_D is None:
        while block_d > 16 and B * (D // block_d) < 264:
            block_d //= 2
    block_d = min(block_d, D)
    block_t = max(8, (threads * 32) // block_d)
    return block_t, block_d, threads


@tileagent.jit(out_idx=[2], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def varlen_softmax(B, D, block_t, block_d, threads, dtype="float16"):
    Ttot = T.dynamic("Ttot")

    @T.prim_func
    def main(X: T.Tensor((Ttot, D), dtype), CU: T.Tensor((B + 1,), "int32"), Y: T.Tensor((Ttot, D), dtype)):
        with T.Kernel(B, T.ceildiv(D, block_d), threads=threads) as (b, bd):
            x = T.alloc_fragment((block_t, block_d), "float32")
            m = T.alloc_fragment((block_d,), "float32")
            m_old = T.alloc_fragment((block_d,), "float32")
            l = T.alloc_fragment((block_d,), "float32")
            l_tile = T.alloc_fragment((block_d,), "float32")
            start = CU[b]
            end = CU[b + 1]
            n = end - start
            d0 = bd * block_d
            T.fill(m, -T.infinity("float32"))
            T.clear(l)
            # pass 1: online column max and sum of exp over the segment's rows
            for k in T.serial(T.ceildiv(n, block_t)):
                r0 = start + k * block_t
                T.copy(X[r0, d0], x)
                for i, j in T.Parallel(block_t, block_d):
                    x[i, j] = T.if_then_else(r0 + i < end, x[i, j], -T.infinity("float32"))
                T.copy(m, m_old)
                T.reduce_max(x, m, dim=0, clear=False)
                for i, j in T.Parallel(block_t, block_d):
                    x[i, j] = T.exp2((x[i, j] - m[j]) * LOG2E)
                T.reduce_sum(x, l_tile, dim=0)
                for j in T.Parallel(block_d):
                    l[j] = l[j] * T.exp2((m_old[j] - m[j]) * LOG2E) + l_tile[j]
            for j in T.Parallel(block_d):
                l[j] = 1.0 / l[j]
            # pass 2: normalized output; whole tiles by T.copy, the segment's last partial tile element-wise
            n_full = n // block_t
            for k in T.serial(n_full):
                r1 = start + k * block_t
                T.copy(X[r1, d0], x)
                for i, j in T.Parallel(block_t, block_d):
                    x[i, j] = T.exp2((x[i, j] - m[j]) * LOG2E) * l[j]
                T.copy(x, Y[r1, d0])
            if n_full * block_t < n:
                r2 = start + n_full * block_t
                T.copy(X[r2, d0], x)
                for i, j in T.Parallel(block_t, block_d):
                    if r2 + i < end:
                        Y[r2 + i, d0 + j] = T.cast(T.exp2((x[i, j] - m[j]) * LOG2E) * l[j], dtype)

    return main


class ModelNew(nn.Module):
    def forward(self, x, cu_seqlens):
        B = cu_seqlens.shape[0] - 1
        D = x.shape[1]
        block_t, block_d, threads = schedule(B, D)
        return varlen_softmax(B, D, block_t, block_d, threads)(x, cu_seqlens)
