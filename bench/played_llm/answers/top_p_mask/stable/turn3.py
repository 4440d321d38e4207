import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def schedule(V, on_cuda=True):
    """(block_v, threads, in_shared): on the GPU 8192-wide tiles on 512 threads (16 values a thread) for vocabulary
    rows; the row is kept in shared memory for the bisection passes when it fits (32000 fp32 = 125 KB), else every
    pass re-reads it from global memory (L2). On the CPU interpreter, whose time grows with the loop steps of a
    block, a pass over the row is one 32768-wide tile (4x fewer steps); the GPU never takes that schedule."""
    if V >= 8192:
        block_v, threads = (8192, 512) if on_cuda else (32768, 1024)
    else:
        block_v = 1024
        while block_v < V:
            block_v *= 2
        threads = 128
    n_tiles = -(-V // block_v)
    in_shared = n_tiles * block_v * 4 <= 160 * 1024
    return block_v, threads, in_shared


@tileagent.jit(out_idx=[1])
def top_p_mask(V, thr, iters=64, block_v=8192, threads=512, in_shared=True):
    B = T.dynamic("B")
    n_tiles = (V + block_v - 1) // block_v
    Vp = n_tiles * block_v

    @T.prim_func
    def main(X: T.Tensor((B, V), "float32"), Y: T.Tensor((B, V), "float32")):
        with T.Kernel(B, threads=threads) as b:
            X_s = T.alloc_shared((1, Vp if in_shared else block_v), "float32")
            x = T.alloc_fragment((1, block_v), "float32")
            t = T.alloc_fragment((1, block_v), "float32")
            acc = T.alloc_fragment((1, block_v), "float64")
            mx = T.alloc_fragment((1,), "float32")
            mn = T.alloc_fragment((1,), "float32")
            mxd = T.alloc_fragment((1,), "float64")
            z = T.alloc_fragment((1,), "float64")
            tot = T.alloc_fragment((1,), "float64")
            lo = T.alloc_fragment((1,), "float64")
            hi = T.alloc_fragment((1,), "float64")
            mid = T.alloc_fragment((1,), "float64")
            vs = T.alloc_fragment((1,), "float32")
            slt = T.alloc_fragment((1,), "float64")
            pst = T.alloc_fragment((1,), "float64")
            eq = T.alloc_fragment((1, block_v), "float32")
            rk = T.alloc_fragment((1, block_v), "float32")
            cnt = T.alloc_fragment((1,), "float32")
            carry = T.alloc_fragment((1,), "float32")
            ins = T.alloc_fragment((1, block_v), "float32")
            nin = T.alloc_fragment((1,), "float32")
            done = T.alloc_fragment((1,), "float32")

            # pass 1: row max and min (and the row into shared memory when it fits)
            T.fill(mx, -T.infinity("float32"))
            T.fill(mn, T.infinity("float32"))
            for k in T.serial(n_tiles):
                T.copy(X[b, k * block_v], x)
                if in_shared:
                    T.copy(x, X_s[0, k * block_v])
                for i, j in T.Parallel(1, block_v):
                    t[i, j] = T.if_then_else(k * block_v + j < V, x[i, j], T.infinity("float32"))
                    x[i, j] = T.if_then_else(k * block_v + j < V, x[i, j], -T.infinity("float32"))
                T.reduce_max(x, mx, dim=1, clear=False)
                T.reduce_min(t, mn, dim=1, clear=False)
            for i in T.Parallel(1):
                mxd[i] = T.cast(mx[i], "float64")

            # pass 2: Z = sum exp(x - max) in float64 (the reference's float64 softmax denominator)
            T.clear(acc)
            for k in T.serial(n_tiles):
                if in_shared:
                    T.copy(X_s[0, k * block_v], x)
                else:
                    T.copy(X[b, k * block_v], x)
                for i, j in T.Parallel(1, block_v):
                    acc[i, j] += T.if_then_else(k * block_v + j < V,
                                                T.exp(T.cast(x[i, j], "float64") - mxd[i]), 0.0)
            T.reduce_sum(acc, z, dim=1)

            # bisection on the logit threshold: removed = {x <= lo}, where mass(x <= lo) / Z <= 1 - top_p
            # and mass(x <= hi) / Z > 1 - top_p (hi starts at the max: always kept)
            for i in T.Parallel(1):
                lo[i] = T.cast(mn[i], "float64") - 1.0
                hi[i] = mxd[i]
            T.clear(done)
            for it in T.serial(iters):
                if done[0] < 0.5:                      # stop once no logit lies strictly between lo and hi
                    for i in T.Parallel(1):
                        mid[i] = lo[i] + (hi[i] - lo[i]) * 0.5
                    T.clear(acc)
                    T.clear(ins)
                    for k in T.serial(n_tiles):
                        if in_shared:
                            T.copy(X_s[0, k * block_v], x)
                        else:
                            T.copy(X[b, k * block_v], x)
                        for i, j in T.Parallel(1, block_v):
                            xv = T.cast(x[i, j], "float64")
                            acc[i, j] += T.if_then_else(k * block_v + j < V and xv <= mid[i], T.exp(xv - mxd[i]), 0.0)
                            ins[i, j] += T.if_then_else(k * block_v + j < V and xv > lo[i] and xv < hi[i], 1.0, 0.0)
                    T.reduce_sum(acc, tot, dim=1)
                    T.reduce_sum(ins, nin, dim=1)
                    for i in T.Parallel(1):
                        done[i] = T.if_then_else(nin[i] < 0.5, 1.0, 0.0)
                        lo[i] = T.if_then_else(tot[i] / z[i] <= thr, mid[i], lo[i])
                        hi[i] = T.if_then_else(tot[i] / z[i] <= thr, hi[i], mid[i])

            # the boundary value v* (the smallest logit above lo) and the mass strictly below it: a tie group at
            # v* is cut in index order, as the reference's ascending sort places equal values (lowest index first)
            T.fill(vs, T.infinity("float32"))
            for k in T.serial(n_tiles):
                if in_shared:
                    T.copy(X_s[0, k * block_v], x)
                else:
                    T.copy(X[b, k * block_v], x)
                for i, j in T.Parallel(1, block_v):
                    x[i, j] = T.if_then_else(k * block_v + j < V and T.cast(x[i, j], "float64") > lo[i], x[i, j],
                                             T.infinity("float32"))
                T.reduce_min(x, vs, dim=1, clear=False)
            T.clear(acc)
            for k in T.serial(n_tiles):
                if in_shared:
                    T.copy(X_s[0, k * block_v], x)
                else:
                    T.copy(X[b, k * block_v], x)
                for i, j in T.Parallel(1, block_v):
                    acc[i, j] += T.if_then_else(k * block_v + j < V and x[i, j] < vs[i],
                                                T.exp(T.cast(x[i, j], "float64") - mxd[i]), 0.0)
            T.reduce_sum(acc, tot, dim=1)
            for i in T.Parallel(1):
                slt[i] = tot[i] / z[i]
                pst[i] = T.exp(T.cast(vs[i], "float64") - mxd[i]) / z[i]
            T.clear(carry)

            # output: x < v* removed; x == v* removed while (mass below) + (its rank in the tie group) * p* <= 1 - top_p
            for k in T.serial(n_tiles):
                if in_shared:
                    T.copy(X_s[0, k * block_v], x)
                else:
                    T.copy(X[b, k * block_v], x)
                for i, j in T.Parallel(1, block_v):
                    eq[i, j] = T.if_then_else(k * block_v + j < V and x[i, j] == vs[i], 1.0, 0.0)
                T.cumsum(eq, rk, dim=1)
                for i, j in T.Parallel(1, block_v):
                    cut = slt[i] + T.cast(carry[i] + rk[i, j], "float64") * pst[i]
                    x[i, j] = T.if_then_else(x[i, j] < vs[i] or (eq[i, j] > 0.5 and cut <= thr),
                                             -T.infinity("float32"), x[i, j])
                T.copy(x, Y[b, k * block_v])
                T.reduce_sum(eq, cnt, dim=1)
                for i in T.Parallel(1):
                    carry[i] = carry[i] + cnt[i]

    return main


class ModelNew(nn.Module):
    def __init__(self, top_p=0.9):
        super().__init__()
        self.top_p = top_p

    def forward(self, logits):
        B, V = logits.shape
        block_v, threads, in_shared = schedule(V, logits.is_cuda)
        kern = top_p_mask(V, 1 - self.top_p, block_v=block_v, threads=threads, in_shared=in_shared)
        return kern(logits)
