import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[2])
def selective_log_softmax(V, block_m=1, block_v=2048, threads=256, dtype="float16"):
    log2e = 1.4426950408889634
    rows = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((rows, V), dtype), labels: T.Tensor((rows,), "int64"), Y: T.Tensor((rows,), "float32")):
        with T.Kernel(T.ceildiv(rows, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, block_v), "float32")
            hit = T.alloc_fragment((block_m, block_v), "float32")
            lab_s = T.alloc_shared((block_m,), "int64")
            lab = T.alloc_fragment((block_m,), "int64")
            m = T.alloc_fragment((block_m,), "float32")
            m_old = T.alloc_fragment((block_m,), "float32")
            l = T.alloc_fragment((block_m,), "float32")
            l_tile = T.alloc_fragment((block_m,), "float32")
            picked = T.alloc_fragment((block_m,), "float32")
            picked_tile = T.alloc_fragment((block_m,), "float32")
            T.copy(labels[bm * block_m], lab_s)
            for i in T.Parallel(block_m):
                lab[i] = lab_s[i]
            T.fill(m, -T.infinity("float32"))
            T.clear(l)
            T.clear(picked)
            for k in T.serial(T.ceildiv(V, block_v)):
                T.copy(X[bm * block_m, k * block_v], x)
                for i, j in T.Parallel(block_m, block_v):
                    x[i, j] = T.if_then_else(k * block_v + j < V, x[i, j], -T.infinity("float32"))
                    hit[i, j] = T.if_then_else(k * block_v + j == lab[i], x[i, j], 0.0)
                T.reduce_sum(hit, picked_tile, dim=1)
                T.copy(m, m_old)
                T.reduce_max(x, m, dim=1, clear=False)
                for i, j in T.Parallel(block_m, block_v):
                    x[i, j] = T.exp2((x[i, j] - m[i]) * log2e)
                T.reduce_sum(x, l_tile, dim=1)
                for i in T.Parallel(block_m):
                    l[i] = l[i] * T.exp2((m_old[i] - m[i]) * log2e) + l_tile[i]
                    picked[i] = picked[i] + picked_tile[i]
            for i in T.Parallel(block_m):
                l[i] = picked[i] - m[i] - T.log(l[i])
            T.copy(l, Y[bm * block_m])

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, index):
        B, S, V = logits.shape
        dtype = "bfloat16" if logits.dtype == torch.bfloat16 else "float16"
        y = selective_log_softmax(V, dtype=dtype)(logits.view(B * S, V), index.view(B * S))
        return y.view(B, S)
