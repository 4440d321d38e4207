import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 32
THREADS = 256
NUM_STAGES = 2
TUNABLES = {"BLOCK_M": [128, 64], "BLOCK_N": [128, 64, 256], "BLOCK_K": [32, 64], "NUM_STAGES": [2, 3]}


def _split3(v):
    hi = T.cast(v, "bfloat16")
    r = v - T.cast(hi, "float32")
    mid = T.cast(r, "bfloat16")
    lo = T.cast(r - T.cast(mid, "float32"), "bfloat16")
    return hi, mid, lo


@tileagent.jit(out_idx=[4])
def cdist_kernel(D, block_M, block_N, block_K, threads, num_stages):
    B, M, N = T.dynamic("B, M, N")
    rows_n = max(1, 4096 // D)
    nk = (D + block_K - 1) // block_K

    @T.prim_func
    def main(X: T.Tensor((B, M, D), "float32"), Y: T.Tensor((B, N, D), "float32"),
             XN: T.Tensor((B, M), "float32"), YN: T.Tensor((B, N), "float32"),
             O: T.Tensor((B, M, N), "float32")):
        # squared norms of the rows of x
        with T.Kernel(T.ceildiv(M, rows_n), B, threads=128) as (bm, b):
            t = T.alloc_fragment((rows_n, D), "float32")
            s = T.alloc_fragment((rows_n,), "float32")
            T.copy(X[b, bm * rows_n, 0], t)
            for i, j in T.Parallel(rows_n, D):
                t[i, j] = t[i, j] * t[i, j]
            T.reduce_sum(t, s, dim=1)
            T.copy(s, XN[b, bm * rows_n])
        # squared norms of the rows of y
        with T.Kernel(T.ceildiv(N, rows_n), B, threads=128) as (bn, b):
            t = T.alloc_fragment((rows_n, D), "float32")
            s = T.alloc_fragment((rows_n,), "float32")
            T.copy(Y[b, bn * rows_n, 0], t)
            for i, j in T.Parallel(rows_n, D):
                t[i, j] = t[i, j] * t[i, j]
            T.reduce_sum(t, s, dim=1)
            T.copy(s, YN[b, bn * rows_n])
        # cross term on tensor cores, 3-piece bf16 split
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), B, threads=threads) as (bx, by, b):
            xs = T.alloc_shared((block_M, block_K), "float32")
            ys = T.alloc_shared((block_N, block_K), "float32")
            xh = T.alloc_shared((block_M, block_K), "bfloat16")
            xm = T.alloc_shared((block_M, block_K), "bfloat16")
            xl = T.alloc_shared((block_M, block_K), "bfloat16")
            yh = T.alloc_shared((block_N, block_K), "bfloat16")
            ym = T.alloc_shared((block_N, block_K), "bfloat16")
            yl = T.alloc_shared((block_N, block_K), "bfloat16")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            part = T.alloc_fragment((block_M, block_N), "float32")
            xn = T.alloc_fragment((block_M,), "float32")
            yn = T.alloc_fragment((block_N,), "float32")
            T.use_swizzle(panel_size=8)
            T.clear(acc)
            for k in T.Pipelined(nk, num_stages=num_stages):
                T.copy(X[b, by * block_M, k * block_K], xs)
                T.copy(Y[b, bx * block_N, k * block_K], ys)
                for i, j in T.Parallel(block_M, block_K):
                    hi, mid, lo = _split3(xs[i, j])
                    xh[i, j] = hi
                    xm[i, j] = mid
                    xl[i, j] = lo
                for i, j in T.Parallel(block_N, block_K):
                    hi, mid, lo = _split3(ys[i, j])
                    yh[i, j] = hi
                    ym[i, j] = mid
                    yl[i, j] = lo
                T.gemm(xl, yh, part, transpose_B=True, clear_accum=True)
                T.gemm(xh, yl, part, transpose_B=True)
                T.gemm(xm, ym, part, transpose_B=True)
                T.gemm(xm, yh, part, transpose_B=True)
                T.gemm(xh, ym, part, transpose_B=True)
                T.gemm(xh, yh, part, transpose_B=True)
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] = acc[i, j] + part[i, j]
            T.copy(XN[b, by * block_M], xn)
            T.copy(YN[b, bx * block_N], yn)
            for i, j in T.Parallel(block_M, block_N):
                acc[i, j] = T.sqrt(T.max(xn[i] + yn[j] - 2.0 * acc[i, j], 0.0))
            T.copy(acc, O[b, by * block_M, bx * block_N])

    return main


class ModelNew(nn.Module):
    def forward(self, x, y):
        B, M, D = x.shape
        N = y.shape[1]
        xn = torch.empty(B, M, dtype=torch.float32, device=x.device)
        yn = torch.empty(B, N, dtype=torch.float32, device=x.device)
        kernel = cdist_kernel(D, BLOCK_M, BLOCK_N, BLOCK_K, THREADS, NUM_STAGES)
        return kernel(x, y, xn, yn)
