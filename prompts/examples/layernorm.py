"""Y = LayerNorm(X) * weight + bias over the rows of X (M, N), fp16 in and out, fp32 math: a verified example kernel.

Each block owns ``block_m`` whole rows in float32 registers: one read of X, one write of Y. The variance is the mean
of (x - mean)^2 (two reductions over registers, no extra memory traffic), which stays accurate for rows with a large
mean, unlike E[x^2] - mean^2. Weight and bias are read once per block. M is dynamic: one kernel for every row count;
the rows of the last block past M read as 0 and their stores are dropped.
"""
import torch

import tileagent
import tileagent.language as T


def schedule(N: int) -> tuple[int, int]:
    """(block_m, threads): about 16 to 32 values per thread, whole rows per block."""
    threads = 256 if N >= 4096 else 128
    block_m = 1
    while block_m * 2 * N <= threads * 32 and block_m < 64:
        block_m *= 2
    return block_m, threads


@tileagent.jit(out_idx=[3], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def layernorm(M, N, block_m=None, threads=None, dtype="float16", eps=1e-5):
    default_m, default_threads = schedule(N)
    block_m, threads = block_m or default_m, threads or default_threads
    rows = M if M is not None else T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((rows, N), dtype), W: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype),
             Y: T.Tensor((rows, N), dtype)):
        with T.Kernel(T.ceildiv(rows, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, N), "float32")
            d = T.alloc_fragment((block_m, N), "float32")
            w = T.alloc_fragment((N,), "float32")
            b = T.alloc_fragment((N,), "float32")
            mean = T.alloc_fragment((block_m,), "float32")
            rstd = T.alloc_fragment((block_m,), "float32")

            T.copy(X[bm * block_m, 0], x)  # fp16 -> fp32 on the way in
            T.copy(W, w)
            T.copy(B, b)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(block_m):
                mean[i] = mean[i] * (1.0 / N)
            for i, j in T.Parallel(block_m, N):  # same extents as x and d: they share one layout
                d[i, j] = (x[i, j] - mean[i]) * (x[i, j] - mean[i])
            T.reduce_sum(d, rstd, dim=1)
            for i in T.Parallel(block_m):
                rstd[i] = T.rsqrt(rstd[i] * (1.0 / N) + eps)
            for i, j in T.Parallel(block_m, N):
                x[i, j] = (x[i, j] - mean[i]) * rstd[i] * w[j] + b[j]
            T.copy(x, Y[bm * block_m, 0])  # fp32 -> fp16 on the way out

    return main


def reference(x, w, b, eps=1e-5):
    return torch.nn.functional.layer_norm(x.float(), x.shape[-1:], w.float(), b.float(), eps).to(x.dtype)


def check(device="cuda", M=1000, N=1024):
    kernel = layernorm(None, N)
    x = torch.randn(M, N, device=device, dtype=torch.float16) * 3 + 5  # a large mean: the two-pass variance holds
    w = torch.randn(N, device=device, dtype=torch.float16)
    b = torch.randn(N, device=device, dtype=torch.float16)
    torch.testing.assert_close(kernel(x, w, b), reference(x, w, b), rtol=1e-2, atol=1e-2)
    return kernel
