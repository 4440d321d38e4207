"""Y = torch.bincount(X, minlength=E) for int32 ids X (L,) in [0, E): a verified example kernel of a histogram
(counts, a scatter-add: several elements add into one output element).

Two kernels in one program, run in order: the first zeroes the counts (an output is not zero when it arrives: the
evaluator fills it with garbage), the second counts. Each block of the second counts ``block`` ids into a histogram
of its own in shared memory with ``T.atomic_add`` (iterations that hit one bin all add: a plain ``hist[b] =
hist[b] + 1`` loses updates, also split into two loops), then adds its non-zero bins into the global counts with
one atomic per bin. Lanes past L are masked (the tile copy reads 0 there, a valid bin). L is dynamic.
"""
import torch

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def bincount(E, block=2048, threads=256):
    L = T.dynamic("L")

    @T.prim_func
    def main(X: T.Tensor((L,), "int32"), Y: T.Tensor((E,), "int32")):
        with T.Kernel(1, threads=threads):
            for e in T.Parallel(E):
                Y[e] = 0
        with T.Kernel(T.ceildiv(L, block), threads=threads) as bx:
            hist = T.alloc_shared((E,), "int32")
            ids = T.alloc_fragment((block,), "int32")
            T.clear(hist)
            T.copy(X[bx * block], ids)  # lanes past L read 0
            for i in T.Parallel(block):
                if bx * block + i < L:
                    T.atomic_add(hist[ids[i]], 1)
            for e in T.Parallel(E):
                if hist[e] > 0:
                    T.atomic_add(Y[e], hist[e])

    return main


def reference(x, E):
    return torch.bincount(x, minlength=E).to(torch.int32)


def check(device="cuda", L=100_000, E=256, **schedule):
    kernel = bincount(E, **schedule)
    x = (torch.randn(L, device=device).abs() * E / 3).long().clamp_(max=E - 1).to(torch.int32)  # skewed to bin 0
    torch.testing.assert_close(kernel(x), reference(x, E), rtol=0, atol=0)
    return kernel
