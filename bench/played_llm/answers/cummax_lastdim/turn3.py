import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_M = None
THREADS = None
TUNABLES = {"BLOCK_M": [None, 1, 2, 4, 8], "THREADS": [None, 128, 256]}

NUM_SMS = 132


def schedule(L):
    """(block_m, block_l, threads): chunks of up to 1024 positions, about 2048 values a tile."""
    block_l = 16
    while block_l < L and block_l < 1024:
        block_l *= 2
    block_m = max(1, 2048 // block_l)
    threads = 256 if block_m * block_l >= 2048 else 128
    return block_m, block_l, threads


@T.macro
def chunk_scan(x, xi, vs, ids, nsteps, block_m, block_l):
    """Inclusive (max, last argmax) scan of each row of the chunk held in x / xi; result in vs / ids (shared)."""
    T.copy(x, vs)
    T.copy(xi, ids)
    for k in T.serial(nsteps):
        off = 1 << k
        for i, j in T.Parallel(block_m, block_l):
            jp = T.max(j - off, 0)
            take = (j >= off) and (vs[i, jp] > vs[i, j])
            x[i, j] = T.if_then_else(take, vs[i, jp], vs[i, j])
            xi[i, j] = T.if_then_else(take, ids[i, jp], ids[i, j])
        T.copy(x, vs)
        T.copy(xi, ids)


@tileagent.jit(out_idx=[1, 2])
def cummax_rows(L, block_m, block_l, threads, dtype="float16"):
    """One block walks block_m whole rows chunk by chunk, carrying the running (max, index)."""
    M = T.dynamic("M")
    nsteps = block_l.bit_length() - 1
    nch = (L + block_l - 1) // block_l

    @T.prim_func
    def main(X: T.Tensor((M, L), dtype), V: T.Tensor((M, L), dtype), I: T.Tensor((M, L), "int64")):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, block_l), "float32")
            xi = T.alloc_fragment((block_m, block_l), "int32")
            vs = T.alloc_shared((block_m, block_l), "float32")
            ids = T.alloc_shared((block_m, block_l), "int32")
            run_v = T.alloc_fragment((block_m,), "float32")
            run_i = T.alloc_fragment((block_m,), "int32")
            T.fill(run_v, -T.infinity("float32"))
            T.fill(run_i, 0)
            for c in T.serial(nch):
                T.copy(X[bm * block_m, c * block_l], x)
                for i, j in T.Parallel(block_m, block_l):
                    xi[i, j] = c * block_l + j
                chunk_scan(x, xi, vs, ids, nsteps, block_m, block_l)
                for i, j in T.Parallel(block_m, block_l):
                    keep = run_v[i] > vs[i, j]
                    x[i, j] = T.if_then_else(keep, run_v[i], vs[i, j])
                    xi[i, j] = T.if_then_else(keep, run_i[i], ids[i, j])
                T.copy(x, V[bm * block_m, c * block_l])
                T.copy(xi, I[bm * block_m, c * block_l])
                for i in T.Parallel(block_m):
                    if vs[i, block_l - 1] >= run_v[i]:
                        run_v[i] = vs[i, block_l - 1]
                        run_i[i] = ids[i, block_l - 1]

    return main


@tileagent.jit(out_idx=[3, 4])
def cummax_split(L, block_m, block_l, threads, dtype="float16"):
    """Few rows (a long context): one block per (rows, chunk). Pass 1 writes each chunk's (max, last argmax);
    pass 2 takes the carry from the earlier chunks' pairs and scans its chunk."""
    M = T.dynamic("M")
    nsteps = block_l.bit_length() - 1
    nch = (L + block_l - 1) // block_l

    @T.prim_func
    def main(X: T.Tensor((M, L), dtype), CM: T.Tensor((M, nch), "float32"), CI: T.Tensor((M, nch), "int32"),
             V: T.Tensor((M, L), dtype), I: T.Tensor((M, L), "int64")):
        with T.Kernel(T.ceildiv(M, block_m), nch, threads=threads) as (bm, c):
            x = T.alloc_fragment((block_m, block_l), "float32")
            xi = T.alloc_fragment((block_m, block_l), "int32")
            cm = T.alloc_fragment((block_m,), "float32")
            ci = T.alloc_fragment((block_m,), "int32")
            T.copy(X[bm * block_m, c * block_l], x)
            for i, j in T.Parallel(block_m, block_l):
                x[i, j] = T.if_then_else(c * block_l + j < L, x[i, j], -T.infinity("float32"))
            T.reduce_max(x, cm, dim=1)
            for i, j in T.Parallel(block_m, block_l):
                xi[i, j] = T.if_then_else(x[i, j] == cm[i], c * block_l + j, -1)
            T.reduce_max(xi, ci, dim=1)                       # the chunk's LAST position of its max
            for i in T.Parallel(block_m):
                CM[bm * block_m + i, c] = cm[i]
                CI[bm * block_m + i, c] = ci[i]
        with T.Kernel(T.ceildiv(M, block_m), nch, threads=threads) as (bm, c):
            pm = T.alloc_fragment((block_m, nch), "float32")
            pi = T.alloc_fragment((block_m, nch), "int32")
            run_v = T.alloc_fragment((block_m,), "float32")
            run_i = T.alloc_fragment((block_m,), "int32")
            x = T.alloc_fragment((block_m, block_l), "float32")
            xi = T.alloc_fragment((block_m, block_l), "int32")
            vs = T.alloc_shared((block_m, block_l), "float32")
            ids = T.alloc_shared((block_m, block_l), "int32")
            rv_s = T.alloc_shared((block_m,), "float32")
            ri_s = T.alloc_shared((block_m,), "int32")
            T.copy(CM[bm * block_m, 0], pm)
            T.copy(CI[bm * block_m, 0], pi)
            for i, k in T.Parallel(block_m, nch):
                pm[i, k] = T.if_then_else(k < c, pm[i, k], -T.infinity("float32"))
            T.reduce_max(pm, run_v, dim=1)                    # max of the earlier chunks (-inf for chunk 0)
            for i, k in T.Parallel(block_m, nch):
                pi[i, k] = T.if_then_else(k < c and pm[i, k] == run_v[i], pi[i, k], -1)
            T.reduce_max(pi, run_i, dim=1)                    # its last position among them
            T.copy(run_v, rv_s)                               # the carry is read in the (block_m, block_l) loop
            T.copy(run_i, ri_s)
            T.copy(X[bm * block_m, c * block_l], x)
            for i, j in T.Parallel(block_m, block_l):
                xi[i, j] = c * block_l + j
            chunk_scan(x, xi, vs, ids, nsteps, block_m, block_l)
            for i, j in T.Parallel(block_m, block_l):
                keep = rv_s[i] > vs[i, j]
                x[i, j] = T.if_then_else(keep, rv_s[i], vs[i, j])
                xi[i, j] = T.if_then_else(keep, ri_s[i], ids[i, j])
            T.copy(x, V[bm * block_m, c * block_l])
            T.copy(xi, I[bm * block_m, c * block_l])

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        M, L = x.shape
        block_m, block_l, threads = schedule(L)
        block_m = BLOCK_M or block_m
        threads = THREADS or threads
        nch = (L + block_l - 1) // block_l
        if nch > 1 and (M + block_m - 1) // block_m < 2 * NUM_SMS:
            cm = torch.empty(M, nch, dtype=torch.float32, device=x.device)
            ci = torch.empty(M, nch, dtype=torch.int32, device=x.device)
            return cummax_split(L, block_m, block_l, threads)(x, cm, ci)
        return cummax_rows(L, block_m, block_l, threads)(x)
