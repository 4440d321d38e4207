"""Per-row cross-entropy loss Y[r] = logsumexp(X[r]) - X[r, labels[r]] (``F.cross_entropy(..., reduction="none")``)
for logits X (M, V) in fp16 and int64 labels: a verified example of a row streamed in tiles with a label lookup.

A row of a vocabulary-sized V does not fit in registers, so each block walks its ``block_m`` rows in
``block_v``-wide tiles with an online logsumexp: a running max ``m`` and a running sum ``l`` of exp(x - m), rescaled
by exp(m_old - m) whenever the max grows. Columns past V are masked with -inf (padding reads as 0, which would be
wrong for a max). The label's logit is picked in the same pass: a select of x where the column equals the row's
label, summed over the tile (exactly one column of one tile matches). All math in float32; M is dynamic.

The int64 labels go through a shared tile into a fragment written by a ``T.Parallel`` loop: a fragment filled by
``T.copy`` from an int64 tensor and read in the tile's loop would give that loop 8-byte vectors, and the fp16 row
tile would then load 2 values (32 bits) at a time instead of 8 (128 bits).
"""
import torch
import torch.nn.functional as F

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[2])
def cross_entropy(M, V, block_m=1, block_v=2048, threads=256, dtype="float16"):
    log2e = 1.4426950408889634
    rows = M if M is not None else T.dynamic("M")

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
            T.copy(labels[bm * block_m], lab_s)             # int64 via shared: keeps X's loads 128-bit
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
                T.reduce_max(x, m, dim=1, clear=False)       # m = max(m_old, this tile's row max)
                for i, j in T.Parallel(block_m, block_v):
                    x[i, j] = T.exp2((x[i, j] - m[i]) * log2e)
                T.reduce_sum(x, l_tile, dim=1)
                for i in T.Parallel(block_m):
                    l[i] = l[i] * T.exp2((m_old[i] - m[i]) * log2e) + l_tile[i]
                    picked[i] = picked[i] + picked_tile[i]
            for i in T.Parallel(block_m):
                l[i] = m[i] + T.log(l[i]) - picked[i]
            T.copy(l, Y[bm * block_m])                      # rows past M are not stored

    return main


def reference(x, labels):
    return F.cross_entropy(x.float(), labels, reduction="none")


def check(device="cuda", M=301, V=32000, **schedule):
    kernel = cross_entropy(None, V, **schedule)
    x = torch.randn(M, V, device=device, dtype=torch.float16) * 3
    labels = torch.randint(0, V, (M,), device=device)
    torch.testing.assert_close(kernel(x, labels), reference(x, labels), rtol=1e-4, atol=1e-4)
    return kernel
