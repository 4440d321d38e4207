# Not a played answer: session 3's turn1.py with only its narrowed global accesses fixed (RESULTS.md S3-5, S3-6),
# for the H200 A/B (run_gpu.sh widths); passed tileagent eval --device cpu.
import torch
import torch.nn as nn
import torch.nn.functional as F

import tileagent
import tileagent.language as T

BLOCK_V = None
THREADS = None
TUNABLES = {"BLOCK_V": [None, 2048, 8192], "THREADS": [None, 128, 512]}

LOG2E = 1.4426950408889634


def schedule(V):
    """(block_v, threads): 16 values per thread per tile, one row per block."""
    if V >= 4096:
        return 4096, 256
    return 1024, 128


@tileagent.jit(out_idx=[3])
def cross_entropy_mean(V, block_v, threads, dtype="float16", block_r=1024):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, V), dtype), labels: T.Tensor((M,), "int64"), Loss: T.Tensor((M,), "float32"),
             Out: T.Tensor((1,), "float32")):
        with T.Kernel(M, threads=threads) as bm:
            x = T.alloc_fragment((1, block_v), "float32")
            hit = T.alloc_fragment((1, block_v), "float32")
            lab_s = T.alloc_shared((1,), "int64")
            lab = T.alloc_fragment((1,), "int64")
            m = T.alloc_fragment((1,), "float32")
            m_old = T.alloc_fragment((1,), "float32")
            l = T.alloc_fragment((1,), "float32")
            l_tile = T.alloc_fragment((1,), "float32")
            picked = T.alloc_fragment((1,), "float32")
            picked_tile = T.alloc_fragment((1,), "float32")
            T.copy(labels[bm], lab_s)                       # int64 via shared: keeps X's loads 128-bit
            for i in T.Parallel(1):
                lab[i] = lab_s[i]
            T.fill(m, -T.infinity("float32"))
            T.clear(l)
            T.clear(picked)
            for k in T.serial(T.ceildiv(V, block_v)):
                T.copy(X[bm, k * block_v], x)
                for i, j in T.Parallel(1, block_v):
                    x[i, j] = T.if_then_else(k * block_v + j < V, x[i, j], -T.infinity("float32"))
                    hit[i, j] = T.if_then_else(k * block_v + j == lab[i], x[i, j], 0.0)
                T.reduce_sum(hit, picked_tile, dim=1)
                T.copy(m, m_old)
                T.reduce_max(x, m, dim=1, clear=False)
                for i, j in T.Parallel(1, block_v):
                    x[i, j] = T.exp2((x[i, j] - m[i]) * LOG2E)
                T.reduce_sum(x, l_tile, dim=1)
                for i in T.Parallel(1):
                    l[i] = l[i] * T.exp2((m_old[i] - m[i]) * LOG2E) + l_tile[i]
                    picked[i] = picked[i] + picked_tile[i]
            for i in T.Parallel(1):
                l[i] = m[i] + T.log(l[i]) - picked[i]
            T.copy(l, Loss[bm])

        with T.Kernel(1, threads=256) as b0:
            acc = T.alloc_fragment((block_r,), "float32")
            t = T.alloc_fragment((block_r,), "float32")
            tot = T.alloc_fragment((1,), "float32")
            T.clear(acc)
            for k in T.serial(T.ceildiv(M, block_r)):
                T.copy(Loss[k * block_r], t)
                for j in T.Parallel(block_r):
                    acc[j] = acc[j] + t[j]
            T.reduce_sum(acc, tot, dim=0)
            for i in T.Parallel(1):
                tot[i] = tot[i] / T.cast(M, "float32")
            T.copy(tot, Out[0])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, labels):
        M, V = logits.shape
        block_v, threads = schedule(V)
        loss = torch.empty((M,), dtype=torch.float32, device=logits.device)
        out = cross_entropy_mean(V, BLOCK_V or block_v, THREADS or threads)(logits, labels, loss)
        return out.view(())
