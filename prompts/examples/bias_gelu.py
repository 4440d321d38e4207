"""Y = GELU(X + bias) with the exact (erf) GELU, X (M, N) fp16, bias (N,), fp32 math: a verified example kernel.

An elementwise op with a broadcast operand. The grid is 2-D: ``block_n`` columns by ``block_m`` rows per block, so
any N works (rows and columns past the end read as 0 and their stores are dropped) and each thread holds 32 values.
The bias tile is loaded once per block into registers and indexed by the column variable of the loop.
"""
import torch

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[2])
def bias_gelu(M, N, block_m=8, block_n=512, threads=128, dtype="float16"):
    rows = M if M is not None else T.dynamic("M")
    inv_sqrt2 = 0.7071067811865476

    @T.prim_func
    def main(X: T.Tensor((rows, N), dtype), B: T.Tensor((N,), dtype), Y: T.Tensor((rows, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(rows, block_m), threads=threads) as (bn, bm):
            x = T.alloc_fragment((block_m, block_n), "float32")
            b = T.alloc_fragment((block_n,), "float32")
            T.copy(X[bm * block_m, bn * block_n], x)
            T.copy(B[bn * block_n], b)
            for i, j in T.Parallel(block_m, block_n):
                v = x[i, j] + b[j]
                x[i, j] = 0.5 * v * (1.0 + T.erf(v * inv_sqrt2))
            T.copy(x, Y[bm * block_m, bn * block_n])

    return main


def reference(x, bias):
    return torch.nn.functional.gelu(x.float() + bias.float()).to(x.dtype)


def check(device="cuda", M=1000, N=4096, **schedule):
    kernel = bias_gelu(None, N, **schedule)
    x = torch.randn(M, N, device=device, dtype=torch.float16) * 3
    bias = torch.randn(N, device=device, dtype=torch.float16)
    torch.testing.assert_close(kernel(x, bias), reference(x, bias), rtol=1e-2, atol=1e-2)
    return kernel
