import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_M = None
THREADS = None
TUNABLES = {"BLOCK_M": [None, 1, 2, 4, 8], "THREADS": [None, 128, 256]}


def schedule(L):
    """(block_m, block_l, threads): chunks of up to 1024 positions, about 2048 values a tile."""
    block_l = 16
    while block_l < L and block_l < 1024:
        block_l *= 2
    block_m = max(1, 2048 // block_l)
    threads = 256 if block_m * block_l >= 2048 else 128
    return block_m, block_l, threads


@tileagent.jit(out_idx=[1, 2])
def cummax_rows(block_m, block_l, threads, dtype="float16"):
    M, L = T.dynamic("M, L")
    nsteps = block_l.bit_length() - 1                  # log2(block_l)

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
            for c in T.serial(T.ceildiv(L, block_l)):
                T.copy(X[bm * block_m, c * block_l], x)        # positions past L read 0: after every real one
                for i, j in T.Parallel(block_m, block_l):
                    xi[i, j] = c * block_l + j
                T.copy(x, vs)
                T.copy(xi, ids)
                # Hillis-Steele inclusive scan of (value, index) within the chunk; ties keep the later index
                for k in T.serial(nsteps):
                    off = 1 << k
                    for i, j in T.Parallel(block_m, block_l):
                        jp = T.max(j - off, 0)
                        take = (j >= off) and (vs[i, jp] > vs[i, j])
                        x[i, j] = T.if_then_else(take, vs[i, jp], vs[i, j])
                        xi[i, j] = T.if_then_else(take, ids[i, jp], ids[i, j])
                    T.copy(x, vs)
                    T.copy(xi, ids)
                # combine with the running max of the earlier chunks (strictly larger wins: ties go to the later)
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


class ModelNew(nn.Module):
    def forward(self, x):
        M, L = x.shape
        block_m, block_l, threads = schedule(L)
        return cummax_rows(BLOCK_M or block_m, block_l, THREADS or threads)(x)
