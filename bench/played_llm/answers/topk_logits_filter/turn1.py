import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_V = None
THREADS = None
TUNABLES = {"BLOCK_V": [None, 1024, 4096], "THREADS": [None, 256, 1024]}

NT = 16      # thresholds tested per pass: each pass shrinks the window holding the k-th score 17-fold
NPASS = 10   # 17**10 > 2**40: from the row's [min, max] down to adjacent floats for any realistic row


def schedule(V):
    return 2048, 512


@tileagent.jit(out_idx=[1])
def topk_filter(V, k, temperature, on_cuda, block_v, threads, nt=NT, npass=NPASS):
    B = T.dynamic("B")
    inv_t = 1.0 / temperature
    n_tiles = (V + block_v - 1) // block_v
    kf = float(k)
    step = 1.0 / (nt + 1)

    def scale(v):
        return v * inv_t if on_cuda else v / temperature

    @T.prim_func
    def main(X: T.Tensor((B, V), "float32"), Y: T.Tensor((B, V), "float32")):
        with T.Kernel(B, threads=threads) as b:
            x = T.alloc_fragment((block_v,), "float32")
            xm = T.alloc_fragment((block_v,), "float32")
            acc = T.alloc_fragment((nt, block_v), "float32")
            th = T.alloc_fragment((nt,), "float32")
            cnt = T.alloc_fragment((nt,), "float32")
            cand = T.alloc_fragment((nt,), "float32")
            mx = T.alloc_fragment((1,), "float32")
            mn = T.alloc_fragment((1,), "float32")
            red = T.alloc_fragment((1,), "float32")
            lo = T.alloc_local((1,), "float32")
            hi = T.alloc_local((1,), "float32")

            # pass 0: the row's score range
            T.fill(mx, -T.infinity("float32"))
            T.fill(mn, T.infinity("float32"))
            for t in T.serial(n_tiles):
                T.copy(X[b, t * block_v], x)
                for j in T.Parallel(block_v):
                    s = scale(x[j])
                    x[j] = T.if_then_else(t * block_v + j < V, s, -T.infinity("float32"))
                    xm[j] = T.if_then_else(t * block_v + j < V, s, T.infinity("float32"))
                T.reduce_max(x, mx, dim=0, clear=False)
                T.reduce_min(xm, mn, dim=0, clear=False)
            lo[0] = mn[0]
            hi[0] = mx[0]

            # invariant: count(s >= lo) >= k; count(s >= hi) < k (or hi is the max)
            for p in T.serial(npass):
                for i in T.Parallel(nt):
                    th[i] = lo[0] + (hi[0] - lo[0]) * (T.cast(i + 1, "float32") * step)
                T.clear(acc)
                for t in T.serial(n_tiles):
                    T.copy(X[b, t * block_v], x)
                    for j in T.Parallel(block_v):
                        x[j] = T.if_then_else(t * block_v + j < V, scale(x[j]), -T.infinity("float32"))
                    for i, j in T.Parallel(nt, block_v):
                        acc[i, j] += T.if_then_else(x[j] >= th[i], 1.0, 0.0)
                T.reduce_sum(acc, cnt, dim=1)
                for i in T.Parallel(nt):
                    cand[i] = T.if_then_else(cnt[i] >= kf, th[i], -T.infinity("float32"))
                T.reduce_max(cand, red, dim=0)
                lo[0] = T.max(lo[0], red[0])
                for i in T.Parallel(nt):
                    cand[i] = T.if_then_else(cnt[i] < kf, th[i], T.infinity("float32"))
                T.reduce_min(cand, red, dim=0)
                hi[0] = T.min(hi[0], red[0])

            # write: keep the scores >= the k-th one (lo), the others -inf
            for t in T.serial(n_tiles):
                T.copy(X[b, t * block_v], x)
                for j in T.Parallel(block_v):
                    s = scale(x[j])
                    x[j] = T.if_then_else(s >= lo[0], s, -T.infinity("float32"))
                T.copy(x, Y[b, t * block_v])

    return main


class ModelNew(nn.Module):
    def __init__(self, top_k=50, temperature=0.7):
        super().__init__()
        self.top_k = top_k
        self.temperature = temperature

    def forward(self, logits):
        B, V = logits.shape
        block_v, threads = schedule(V)
        k = min(max(self.top_k, 1), V)
        kern = topk_filter(V, k, float(self.temperature), bool(logits.is_cuda),
                           BLOCK_V or block_v, THREADS or threads)
        return kern(logits)
