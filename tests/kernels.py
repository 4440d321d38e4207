"""Our own DSL kernels for backend tests: each factory returns a prim_func; REFERENCES holds the torch answer."""

import torch

import tileagent.language as T


def bias_gelu(M, N, block_m=8, threads=128, dtype="float16"):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), B: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, N), "float32")
            T.copy(X[bm * block_m, 0], x)
            for i, j in T.Parallel(block_m, N):
                v = x[i, j] + T.cast(B[j], "float32")
                x[i, j] = 0.5 * v * (1.0 + T.erf(v * 0.7071067811865476))
            T.copy(x, Y[bm * block_m, 0])

    return main


def layernorm(M, N, block_m=4, threads=128, dtype="float16", eps=1e-5):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype),
             Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, N), "float32")
            sq = T.alloc_fragment((block_m, N), "float32")
            mean = T.alloc_fragment((block_m,), "float32")
            var = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(block_m):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(block_m, N):
                sq[i, j] = (x[i, j] - mean[i]) * (x[i, j] - mean[i])
            T.reduce_sum(sq, var, dim=1)
            for i, j in T.Parallel(block_m, N):
                x[i, j] = (x[i, j] - mean[i]) * T.rsqrt(var[i] / N + eps) * T.cast(W[j], "float32") + \
                    T.cast(B[j], "float32")
            T.copy(x, Y[bm * block_m, 0])

    return main


def column_max(M, N, block_n=32, threads=128):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_n), threads=threads) as bn:
            x = T.alloc_fragment((M, block_n), "float32")
            m = T.alloc_fragment((block_n,), "float32")
            T.copy(X[0, bn * block_n], x)
            T.reduce_max(x, m, dim=0)
            T.copy(m, Y[bn * block_n])

    return main


def transpose(M, N, block=32, threads=128, dtype="float16"):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=threads) as (bx, by):
            tile = T.alloc_shared((block, block), dtype)
            T.copy(X[by * block, bx * block], tile)
            out = T.alloc_shared((block, block), dtype)
            for i, j in T.Parallel(block, block):
                out[i, j] = tile[j, i]
            T.copy(out, Y[bx * block, by * block])

    return main


def column_sum_atomic(M, N, block_m=16, threads=128):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, N), "float32")
            s = T.alloc_fragment((N,), "float32")
            T.copy(X[bm * block_m, 0], x)
            T.reduce_sum(x, s, dim=0)
            for j in T.Parallel(N):
                T.atomic_add(Y[j], s[j])

    return main


def splitk_gemm(M, N, K, splits, block=32, block_k=32, dtype="float16", out_dtype="float32", elementwise=False):
    """C += A @ B with K split over ``splits`` blocks along z, each adding its partial tile with a tile-form
    T.atomic_add (``elementwise``: one T.atomic_add per element in a T.Parallel nest) (C must start zeroed)."""
    k_per = K // splits

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), splits, threads=128) as (bx, by, bz):
            A_s = T.alloc_shared((block, block_k), dtype)
            B_s = T.alloc_shared((block_k, block), dtype)
            acc = T.alloc_fragment((block, block), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(k_per, block_k), num_stages=2):
                T.copy(A[by * block, bz * k_per + k * block_k], A_s)
                T.copy(B[bz * k_per + k * block_k, bx * block], B_s)
                T.gemm(A_s, B_s, acc)
            if elementwise:
                for i, j in T.Parallel(block, block):
                    T.atomic_add(C[by * block + i, bx * block + j], acc[i, j])
            else:
                T.atomic_add(C[by * block, bx * block], acc)

    return main


def scale_rows(M, N, threads=64):
    m = T.dynamic("m")

    @T.prim_func
    def main(X: T.Tensor((m, N), "float32"), Y: T.Tensor((m, N), "float32")):
        with T.Kernel(m, threads=threads) as row:
            x = T.alloc_fragment((1, N), "float32")
            T.copy(X[row, 0], x)
            for i, j in T.Parallel(1, N):
                x[i, j] = T.exp2(x[i, j]) * 0.5 - T.abs(x[i, j])
            T.copy(x, Y[row, 0])

    return main


def _gelu(x):
    return torch.nn.functional.gelu(x)


REFERENCES = {
    "bias_gelu": lambda x, b: _gelu(x.float() + b.float()).to(x.dtype),
    "layernorm": lambda x, w, b: torch.nn.functional.layer_norm(x.float(), x.shape[-1:], w.float(), b.float(),
                                                                1e-5).to(x.dtype),
    "column_max": lambda x: x.amax(0),
    "transpose": lambda x: x.T.contiguous(),
    "column_sum_atomic": lambda x: x.sum(0),
    "scale_rows": lambda x: torch.exp2(x) * 0.5 - x.abs(),
    "splitk_gemm": lambda a, b: (a.float() @ b.float()),
    "splitk_gemm_elementwise": lambda a, b: (a.float() @ b.float()),
}
