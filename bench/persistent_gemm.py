"""relu(A @ B) as a persistent, warp-specialized GEMM (one block per SM walks its tiles with ``T.Persistent``; the
producer warpgroup loads the next tile's stages while the consumers run the epilogue) next to the same tiles one block
per tile, cuBLAS and relu(a @ b), all timed in this run (CUDA events, L2 flushed, medians; bench.memory_bound.bench).

Usage (H200): python bench/persistent_gemm.py [--sizes 4096,4096,4096 8192,8192,8192] [--dtype float16]
Each kernel is checked against relu(a @ b) in float32 on fresh inputs (its output poisoned with NaN first) before it
is timed; a wrong kernel is reported and not timed (exit status 1). The tiles are the built-in drafter's first GEMM
variant (128 x 256 x 64, 256 consumer threads, 4 stages); each line says whether the kernel was warp-specialized.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileagent  # noqa: E402
import tileagent.language as T  # noqa: E402
from bench.memory_bound import bench  # noqa: E402


@tileagent.jit
def gemm_relu(M, N, K, block_M, block_N, block_K, stages, threads, blocks, persistent, dtype="float16"):
    """C = relu(A @ B); ``persistent``: ``blocks`` blocks walk the tiles (else one block per tile)."""

    @T.macro
    def tile(A, B, C, A_s, B_s, acc, by, bx):
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        for i, j in T.Parallel(block_M, block_N):
            acc[i, j] = T.max(acc[i, j], 0)
        T.copy(acc, C[by * block_M, bx * block_N])

    if persistent:
        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
            with T.Kernel(blocks, threads=threads) as b:
                A_s = T.alloc_shared((block_M, block_K), dtype)
                B_s = T.alloc_shared((block_K, block_N), dtype)
                acc = T.alloc_fragment((block_M, block_N), "float32")
                for by, bx in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)], blocks, b):
                    tile(A, B, C, A_s, B_s, acc, by, bx)
    else:
        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
                A_s = T.alloc_shared((block_M, block_K), dtype)
                B_s = T.alloc_shared((block_K, block_N), dtype)
                acc = T.alloc_fragment((block_M, block_N), "float32")
                T.use_swizzle(panel_size=8)
                tile(A, B, C, A_s, B_s, acc, by, bx)
    return main


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["4096,4096,4096", "8192,8192,8192", "4096,11008,4096"])
    ap.add_argument("--dtype", default="float16")
    args = ap.parse_args()
    torch.manual_seed(0)
    dt = getattr(torch, args.dtype)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, failed = [], 0
    for size in args.sizes:
        M, N, K = (int(x) for x in size.split(","))
        a, b = torch.randn(M, K, device="cuda", dtype=dt), torch.randn(K, N, device="cuda", dtype=dt)
        want = torch.relu(a.float() @ b.float())
        flops = 2 * M * N * K
        for label, persistent in (("one block per tile", False), (f"persistent, {sms} blocks", True)):
            kernel = gemm_relu(M, N, K, 128, 256, 64, 4, 256, sms, persistent, args.dtype)
            ws = "warp-specialized" in kernel.get_ir("thread")
            c = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
            kernel(a, b, c)
            err = (c.float() - want).abs().max().item()
            if not err <= 0.05 * want.abs().max().item():
                print(f"{M}x{N}x{K} {label}: WRONG (max error {err})", flush=True)
                failed += 1
                continue
            ms = bench(lambda: kernel(a, b, c))[0]
            rows.append((f"{M}x{N}x{K}", f"{label}{', WS' if ws else ''}", flops / ms / 1e9))
        cublas = bench(lambda: torch.matmul(a, b))[0]
        relu = bench(lambda: torch.relu(a @ b))[0]
        rows += [(f"{M}x{N}x{K}", "cuBLAS", flops / cublas / 1e9), (f"{M}x{N}x{K}", "relu(a@b)", flops / relu / 1e9)]
    print(f"\n{'size':<18} {'kernel':<34} {'TFLOP/s':>8}")
    for size, label, tflops in rows:
        print(f"{size:<18} {label:<34} {tflops:>8.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
