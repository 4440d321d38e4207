import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_N = None
THREADS = None
TUNABLES = {"BLOCK_N": [None, 1024, 512, 4096], "THREADS": [None, 128, 512]}

FP8_MAX = 448.0


def schedule(N):
    block_n = 128
    while block_n < N and block_n < 2048:
        block_n *= 2
    threads = 256 if block_n >= 1024 else 128
    return block_n, threads


@tileagent.jit(out_idx=[1, 2])
def swiglu_fp8_quant(N, block_n, threads, on_cuda=False):
    Tt = T.dynamic("T")
    nc = (N + block_n - 1) // block_n

    @T.prim_func
    def main(X: T.Tensor((Tt, 2, N), "bfloat16"),
             Q: T.Tensor((Tt, N), "float8_e4m3fn"),
             S: T.Tensor((Tt, 1), "float32")):
        with T.Kernel(Tt, threads=threads) as t:
            g = T.alloc_fragment((1, block_n), "float32")
            u = T.alloc_fragment((1, block_n), "float32")
            h_s = T.alloc_shared((nc, block_n), "float32")
            amax = T.alloc_fragment((1,), "float32")
            sc = T.alloc_fragment((1,), "float32")
            T.fill(amax, 0.0)
            for c in T.serial(nc):
                T.copy(X[t, 0, c * block_n], g)        # gate chunk; columns past N read 0
                T.copy(X[t, 1, c * block_n], u)        # up chunk
                for i, j in T.Parallel(1, block_n):
                    sg = g[i, j] / (1.0 + T.exp(-g[i, j]))     # silu in float32, as torch
                    g[i, j] = sg * u[i, j]                     # h (0 on padding)
                T.reduce_absmax(g, amax, dim=1, clear=False)   # running max |h|
                T.copy(g, h_s[c, 0])
            for i in T.Parallel(1):
                m = T.max(amax[i], 1e-12)
                if on_cuda:
                    sc[i] = m * (1.0 / FP8_MAX)
                else:
                    sc[i] = m / FP8_MAX
            T.copy(sc, S[t, 0])
            for c in T.serial(nc):
                T.copy(h_s[c, 0], u)
                for i, j in T.Parallel(1, block_n):
                    u[i, j] = T.clamp(u[i, j] / sc[i], -FP8_MAX, FP8_MAX)
                T.copy(u, Q[t, c * block_n])            # float32 -> e4m3fn, RNE; columns past N dropped

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        Tn, N2 = x.shape
        N = N2 // 2
        block_n, threads = schedule(N)
        kern = swiglu_fp8_quant(N, BLOCK_N or block_n, THREADS or threads, x.is_cuda)
        q, scale = kern(x.view(Tn, 2, N))
        return q, scale
