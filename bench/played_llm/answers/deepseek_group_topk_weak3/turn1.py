One block per `block_m` tokens, the row of 256 scores in registers as a (block_m, 8, 32) fragment (the logits viewed as (T, 8, 32)). Group score = max + second max (the second found after masking the first index of the max); the top-4 groups and then the top-8 experts are picked by repeated max + first-index-of-max reductions, masking the chosen element by index so ties cannot drop two. The unbiased score at each pick is gathered with a masked sum; the weights are normalized at the end and scaled by 2.5.

```python
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

N_GROUP = 8
TOPK_GROUP = 4
TOP_K = 8
SCALE = 2.5

BLOCK_M = None
THREADS = None
TUNABLES = {"BLOCK_M": [None, 4, 8, 16], "THREADS": [None, 64, 128, 256]}


def schedule(T_):
    return 8, 128


@tileagent.jit(out_idx=[2, 3])
def noaux_tc_router(G, GS, block_m=8, threads=128):
    M = T.dynamic("T")
    E = G * GS
    NEG = -T.infinity("float32")

    @T.prim_func
    def main(
        Logits: T.Tensor((M, G, GS), "float32"),
        Bias: T.Tensor((G, GS), "float32"),
        TopkIdx: T.Tensor((M, TOP_K), "int64"),
        TopkW: T.Tensor((M, TOP_K), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            sc = T.alloc_fragment((block_m, G, GS), "float32")     # sigmoid scores
            s = T.alloc_fragment((block_m, G, GS), "float32")      # biased scores, masked as we pick
            tmp = T.alloc_fragment((block_m, G, GS), "float32")
            itmp = T.alloc_fragment((block_m, G, GS), "int32")
            b = T.alloc_fragment((G, GS), "float32")
            gmax = T.alloc_fragment((block_m, G), "float32")
            g2 = T.alloc_fragment((block_m, G), "float32")
            gidx = T.alloc_fragment((block_m, G), "int32")
            gs = T.alloc_fragment((block_m, G), "float32")
            gsel = T.alloc_fragment((block_m, G), "int32")
            kept = T.alloc_fragment((block_m, G), "float32")
            ftmp = T.alloc_fragment((block_m, G), "float32")
            m = T.alloc_fragment((block_m,), "float32")
            sel = T.alloc_fragment((block_m,), "int32")
            w = T.alloc_fragment((block_m,), "float32")
            wsum = T.alloc_fragment((block_m,), "float32")
            wk = T.alloc_fragment((TOP_K, block_m), "float32")

            T.copy(Logits[bm * block_m, 0, 0], sc)
            T.copy(Bias, b)
            for i, g, e in T.Parallel(block_m, G, GS):
                sc[i, g, e] = T.sigmoid(sc[i, g, e])
                s[i, g, e] = sc[i, g, e] + b[g, e]

            # group score: sum of the two largest biased scores of each group
            T.reduce_max(s, gmax, dim=2)
            for i, g, e in T.Parallel(block_m, G, GS):
                itmp[i, g, e] = T.if_then_else(s[i, g, e] == gmax[i, g], e, GS)
            T.reduce_min(itmp, gidx, dim=2)
            for i, g, e in T.Parallel(block_m, G, GS):
                tmp[i, g, e] = T.if_then_else(e == gidx[i, g], NEG, s[i, g, e])
            T.reduce_max(tmp, g2, dim=2)
            for i, g in T.Parallel(block_m, G):
                gs[i, g] = gmax[i, g] + g2[i, g]
                kept[i, g] = 0.0

            # top-4 groups
            for r in T.serial(TOPK_GROUP):
                T.reduce_max(gs, m, dim=1)
                for i, g in T.Parallel(block_m, G):
                    gsel[i, g] = T.if_then_else(gs[i, g] == m[i], g, G)
                T.reduce_min(gsel, sel, dim=1)
                for i, g in T.Parallel(block_m, G):
                    kept[i, g] = T.if_then_else(g == sel[i], 1.0, kept[i, g])
                    gs[i, g] = T.if_then_else(g == sel[i], NEG, gs[i, g])

            for i, g, e in T.Parallel(block_m, G, GS):
                s[i, g, e] = T.if_then_else(kept[i, g] > 0.5, s[i, g, e], NEG)

            # top-8 experts among the kept groups, largest first
            T.clear(wsum)
            for k in T.serial(TOP_K):
                T.reduce_max(s, gmax, dim=2)
                T.reduce_max(gmax, m, dim=1)
                for i, g, e in T.Parallel(block_m, G, GS):
                    itmp[i, g, e] = T.if_then_else(s[i, g, e] == m[i], g * GS + e, E)
                T.reduce_min(itmp, gidx, dim=2)
                T.reduce_min(gidx, sel, dim=1)
                for i, g, e in T.Parallel(block_m, G, GS):
                    tmp[i, g, e] = T.if_then_else(g * GS + e == sel[i], sc[i, g, e], 0.0)
                    s[i, g, e] = T.if_then_else(g * GS + e == sel[i], NEG, s[i, g, e])
                T.reduce_sum(tmp, ftmp, dim=2)
                T.reduce_sum(ftmp, w, dim=1)
                for i in T.Parallel(block_m):
                    wk[k, i] = w[i]
                    wsum[i] = wsum[i] + w[i]
                    TopkIdx[bm * block_m + i, k] = T.cast(sel[i], "int64")

            for k, i in T.Parallel(TOP_K, block_m):
                TopkW[bm * block_m + i, k] = wk[k, i] / (wsum[i] + 1e-20) * SCALE

    return main


class ModelNew(nn.Module):
    def __init__(self, E=256):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.e_score_correction_bias = nn.Parameter(torch.rand(E, generator=g) * 0.1, requires_grad=False)

    def forward(self, logits):
        T_, E = logits.shape
        GS = E // N_GROUP
        block_m, threads = schedule(T_)
        kernel = noaux_tc_router(N_GROUP, GS, BLOCK_M or block_m, THREADS or threads)
        idx, w = kernel(logits.view(T_, N_GROUP, GS), self.e_score_correction_bias.view(N_GROUP, GS))
        return idx, w
```
