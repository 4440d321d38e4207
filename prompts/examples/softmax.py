"""Row softmax Y = softmax(X) over the last dim, float32 math, stored in X's dtype: a verified example kernel.

One block per ``block_m`` rows; each row lives in registers (one read, one write). exp is computed as exp2 with
log2(e) folded into the scale.
"""
import torch

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def softmax(M, N, block_m=1, threads=None, dtype="float16"):
    threads = threads or max(32, min(256, N // 32))
    log2e = 1.4426950408889634
    rows = M if M is not None else T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((rows, N), dtype), Y: T.Tensor((rows, N), dtype)):
        with T.Kernel(T.ceildiv(rows, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, N), "float32")
            row_max = T.alloc_fragment((block_m,), "float32")
            row_sum = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_m, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * log2e)
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_m, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bm * block_m, 0])

    return main


def reference(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def check(device="cuda", M=777, N=2048):
    kernel = softmax(M, N)
    x = torch.randn(M, N, device=device, dtype=torch.float16) * 4
    torch.testing.assert_close(kernel(x), reference(x), rtol=1e-2, atol=1e-3)
    return kernel
