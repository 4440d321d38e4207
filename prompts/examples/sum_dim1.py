"""Y = X.sum(dim=1, keepdim=True) for X (B, D1, D2) fp32: a verified example kernel of a column reduction.

Each block owns ``block_n`` columns of one batch. It walks down D1 in ``block_k``-row tiles, adding each tile into
a float32 accumulator of the same shape (every thread sums its own elements: no communication in the loop), and
reduces the accumulator over its rows once at the end (``T.reduce_sum(..., dim=0)``). Rows and columns past the end
read as 0, which adds nothing to a sum, so any D1 and D2 work; B is dynamic.
"""
import torch

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def sum_dim1(B, D1, D2, block_k=32, block_n=128, threads=128):
    batch = B if B is not None else T.dynamic("B")

    @T.prim_func
    def main(X: T.Tensor((batch, D1, D2), "float32"), Y: T.Tensor((batch, 1, D2), "float32")):
        with T.Kernel(T.ceildiv(D2, block_n), batch, threads=threads) as (bn, b):
            x = T.alloc_fragment((block_k, block_n), "float32")
            acc = T.alloc_fragment((block_k, block_n), "float32")
            s = T.alloc_fragment((block_n,), "float32")
            T.clear(acc)
            for k in T.serial(T.ceildiv(D1, block_k)):
                T.copy(X[b, k * block_k, bn * block_n], x)  # a (block_k, block_n) tile of batch b
                for i, j in T.Parallel(block_k, block_n):
                    acc[i, j] += x[i, j]
            T.reduce_sum(acc, s, dim=0)
            T.copy(s, Y[b, 0, bn * block_n])

    return main


def reference(x):
    return x.sum(dim=1, keepdim=True)


def check(device="cuda", B=3, D1=1000, D2=300, **schedule):
    kernel = sum_dim1(None, D1, D2, **schedule)
    x = torch.randn(B, D1, D2, device=device)
    torch.testing.assert_close(kernel(x), reference(x), rtol=1e-4, atol=1e-4)
    return kernel
