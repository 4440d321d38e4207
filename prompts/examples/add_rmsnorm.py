"""Fused residual add + RMSNorm with two outputs, as in a transformer block: H = X + R (the new residual stream, in
X's dtype) and Y = RMSNorm(H) * gamma. A verified example of a kernel with several outputs.

``out_idx=[3, 4]`` makes the call allocate and return both outputs as a tuple (Y, H), in that order. The sum is
rounded to fp16 before the norm, as the reference does (``h = x + r`` in fp16, then the norm of h): the kernel
stores H from float32 registers and re-reads the rounded values through ``T.cast`` so both outputs agree with it.
One block per ``block_m`` rows, everything in registers; M is dynamic.
"""
import torch

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[3, 4])
def add_rmsnorm(M, C, block_m=None, threads=128, dtype="float16", eps=1e-6):
    block_m = block_m or max(1, min(16, threads * 16 // C))
    rows = M if M is not None else T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((rows, C), dtype), R: T.Tensor((rows, C), dtype), gamma: T.Tensor((C,), dtype),
             Y: T.Tensor((rows, C), dtype), H: T.Tensor((rows, C), dtype)):
        with T.Kernel(T.ceildiv(rows, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, C), "float32")
            r = T.alloc_fragment((block_m, C), "float32")
            sq = T.alloc_fragment((block_m, C), "float32")
            g = T.alloc_fragment((C,), "float32")
            rinv = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)
            T.copy(R[bm * block_m, 0], r)
            T.copy(gamma, g)
            for i, j in T.Parallel(block_m, C):
                x[i, j] = T.cast(T.cast(x[i, j] + r[i, j], dtype), "float32")   # h, rounded as the reference's
                sq[i, j] = x[i, j] * x[i, j]
            T.copy(x, H[bm * block_m, 0])                                        # output 2: the new residual
            T.reduce_sum(sq, rinv, dim=1)
            for i in T.Parallel(block_m):
                rinv[i] = T.rsqrt(rinv[i] / C + eps)
            for i, j in T.Parallel(block_m, C):
                x[i, j] = x[i, j] * rinv[i] * g[j]
            T.copy(x, Y[bm * block_m, 0])                                        # output 1

    return main


def reference(x, residual, gamma, eps=1e-6):
    h = x + residual
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * gamma.float()
    return y.to(x.dtype), h


def check(device="cuda", M=333, C=4096, **schedule):
    kernel = add_rmsnorm(None, C, **schedule)
    x, r = (torch.randn(M, C, device=device, dtype=torch.float16) for _ in range(2))
    gamma = torch.randn(C, device=device, dtype=torch.float16)
    y, h = kernel(x, r, gamma)
    y_ref, h_ref = reference(x, r, gamma)
    torch.testing.assert_close(h, h_ref, rtol=0, atol=0)
    torch.testing.assert_close(y, y_ref, rtol=1e-2, atol=1e-2)
    return kernel
