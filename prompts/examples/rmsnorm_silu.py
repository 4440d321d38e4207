"""Y = SiLU(RMSNorm(X) * gamma), one row per thread-block slice: a verified example kernel.

The whole row is read once into a float32 fragment, squared and reduced, then scaled, activated and written:
one read and one write of X. Works for any C; M need not be a multiple of the block.
"""
import torch

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[2])
def rmsnorm_silu(M, C, block_m=4, threads=128, dtype="float16", eps=1e-5):
    @T.prim_func
    def main(X: T.Tensor((M, C), dtype), gamma: T.Tensor((C,), dtype), Y: T.Tensor((M, C), dtype)):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, C), "float32")
            g = T.alloc_fragment((C,), "float32")
            sq = T.alloc_fragment((block_m, C), "float32")
            rinv = T.alloc_fragment((block_m,), "float32")

            T.copy(X[bm * block_m, 0], x)
            T.copy(gamma, g)
            for i, j in T.Parallel(block_m, C):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, rinv, dim=1)
            for i in T.Parallel(block_m):
                rinv[i] = T.rsqrt(rinv[i] / C + eps)
            for i, j in T.Parallel(block_m, C):
                v = x[i, j] * rinv[i] * g[j]
                x[i, j] = v * T.sigmoid(v)
            T.copy(x, Y[bm * block_m, 0])

    return main


def reference(x, gamma, eps=1e-5):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * gamma.float()
    return torch.nn.functional.silu(y).to(x.dtype)


def check(device="cuda", M=1000, C=320):
    kernel = rmsnorm_silu(M, C)
    x = torch.randn(M, C, device=device, dtype=torch.float16)
    g = torch.randn(C, device=device, dtype=torch.float16)
    torch.testing.assert_close(kernel(x, g), reference(x, g), rtol=2e-2, atol=2e-2)
    return kernel
