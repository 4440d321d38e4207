import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

FP8_MAX = 448.0
BLOCK_H = None
THREADS = None
TUNABLES = {"BLOCK_H": [None, 1024, 4096], "THREADS": [None, 128, 512]}


def _pow2_at_least(n):
    p = 1
    while p < n:
        p *= 2
    return p


def schedule(H, threads=None, block_h=None):
    threads = threads or 256
    block_h = block_h or min(2048, _pow2_at_least(H))
    block_h = min(block_h, _pow2_at_least(H))
    block_m = max(1, (threads * 32) // block_h)          # ~32 values per thread
    return block_m, block_h, threads


@tileagent.jit(out_idx=[2, 3])
def fp8_per_tensor_quant(H, block_m, block_h, threads, on_cuda, chunk=2048):
    M = T.dynamic("M")
    P = T.dynamic("P")
    nbx = (H + block_h - 1) // block_h

    @T.prim_func
    def main(X: T.Tensor((M, H), "bfloat16"), Part: T.Tensor((P,), "float32"),
             Out: T.Tensor((M, H), "float8_e4m3fn"), Scale: T.Tensor((1,), "float32")):
        # 1) per-tile absmax partials (padding reads 0, which never raises an absmax)
        with T.Kernel(nbx, T.ceildiv(M, block_m), threads=threads) as (bx, by):
            x = T.alloc_fragment((block_m, block_h), "float32")
            rmax = T.alloc_fragment((block_m,), "float32")
            tmax = T.alloc_fragment((1,), "float32")
            T.copy(X[by * block_m, bx * block_h], x)
            T.reduce_absmax(x, rmax, dim=1)
            T.reduce_max(rmax, tmax, dim=0)
            for i in T.Parallel(1):
                Part[by * nbx + bx + i] = tmax[i]
        # 2) one block: max of the partials -> scale
        with T.Kernel(1, threads=256) as b0:
            p = T.alloc_fragment((chunk,), "float32")
            m = T.alloc_fragment((1,), "float32")
            T.fill(m, 0.0)
            for c in T.serial(T.ceildiv(P, chunk)):
                T.copy(Part[c * chunk], p)                  # past P reads 0
                T.reduce_max(p, m, dim=0, clear=False)
            for i in T.Parallel(1):
                a = T.max(m[i], 1e-12)
                if on_cuda:
                    Scale[i] = a * (1.0 / FP8_MAX)
                else:
                    Scale[i] = a / FP8_MAX
        # 3) pointwise quantization with the grid-wide scale
        with T.Kernel(nbx, T.ceildiv(M, block_m), threads=threads) as (bx, by):
            x = T.alloc_fragment((block_m, block_h), "float32")
            s = Scale[0]
            T.copy(X[by * block_m, bx * block_h], x)
            for i, j in T.Parallel(block_m, block_h):
                x[i, j] = T.clamp(x[i, j] / s, -FP8_MAX, FP8_MAX)
            T.copy(x, Out[by * block_m, bx * block_h])       # float32 -> e4m3fn, RNE, saturating

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        Mrows, H = x.shape
        block_m, block_h, threads = schedule(H, THREADS, BLOCK_H)
        nparts = ((H + block_h - 1) // block_h) * ((Mrows + block_m - 1) // block_m)
        part = torch.empty(nparts, dtype=torch.float32, device=x.device)
        kernel = fp8_per_tensor_quant(H, block_m, block_h, threads, bool(x.is_cuda))
        out, scale = kernel(x, part)
        return out, scale
