"""A float32 GEMM on TF32 tensor cores: wgmma m64nNk8 .tf32 (sm_90a's default for K-major operands) vs mma.sync
m16n8k8 .tf32 (TILEAGENT_ENABLE_WGMMA=0) vs cuBLAS, timed in one run (CUDA events, L2 flushed, medians;
bench.memory_bound.bench).

Usage (H200): python bench/tf32_gemm.py [--sizes 4096 8192] [--tiles 128,128,32,128 128,256,32,256]
The kernel: C = A @ B^T, A (M, K) and B (N, K) float32 (K-major, the orientation wgmma takes for TF32), tiles
(block_M, block_N, block_K, threads), 3 stages. Each build is first checked against a float64 product of the inputs
truncated to TF32 (the tensor core reads 19 bits; a kernel is wrong past 1e-3 relative to the output's scale) and
timed only when correct. Baselines in the same run: cuBLAS with TF32 allowed (torch.backends.cuda.matmul.allow_tf32)
and in full float32 (torch's default). Prints TFLOP/s per build and baseline, and the instruction each build's gemm
lowered to, so a silent fallback is visible.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402


def gemm(n: int, bm: int, bn: int, bk: int, threads: int):
    import tileagent.language as T

    @T.prim_func
    def main(A: T.Tensor((n, n), "float32"), B: T.Tensor((n, n), "float32"), C: T.Tensor((n, n), "float32")):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(n, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float32")
            B_s = T.alloc_shared((bn, bk), "float32")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(n, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C[by * bm, bx * bn])

    return main


def build(n: int, tiles: tuple, wgmma: bool):
    import tileagent

    old = os.environ.get("TILEAGENT_ENABLE_WGMMA")
    os.environ["TILEAGENT_ENABLE_WGMMA"] = "1" if wgmma else "0"
    try:
        kernel = tileagent.compile(gemm(n, *tiles), target="cuda")
        ir = kernel.get_ir("thread")
    finally:
        if old is None:
            os.environ.pop("TILEAGENT_ENABLE_WGMMA")
        else:
            os.environ["TILEAGENT_ENABLE_WGMMA"] = old
    return kernel, "wgmma k8 .tf32" if "k8.f32.tf32" in ir else "mma.sync m16n8k8" if "m16n8k8" in ir else "other"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--tiles", nargs="+", default=["128,128,32,128", "128,256,32,256"])
    args = ap.parse_args()
    failed = False
    for n in args.sizes:
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        t32 = lambda x: (x.view(torch.int32) & -8192).view(torch.float32)  # noqa: E731
        ref = (t32(a).double() @ t32(b).double().T).float()
        flop = 2 * n ** 3
        rows = []
        for spec in args.tiles:
            tiles = tuple(int(v) for v in spec.split(","))
            for wgmma in (True, False):
                kernel, chosen = build(n, tiles, wgmma)
                c = torch.full((n, n), float("nan"), device="cuda")
                kernel(a, b, c)
                err = float((c - ref).abs().max()) / float(ref.abs().max())
                if not err < 1e-3:
                    rows.append((f"{spec} wgmma={'on' if wgmma else 'off'} ({chosen})", f"WRONG (rel err {err:.2e})"))
                    failed = True
                    continue
                ms = bench(lambda: kernel(a, b, c))[0]
                rows.append((f"{spec} wgmma={'on' if wgmma else 'off'} ({chosen})", f"{flop / ms / 1e9:.1f} TFLOP/s"))
        for allow, label in ((True, "cuBLAS TF32"), (False, "cuBLAS float32")):
            torch.backends.cuda.matmul.allow_tf32 = allow
            ms = bench(lambda: a @ b.T)[0]
            rows.append((label, f"{flop / ms / 1e9:.1f} TFLOP/s"))
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"n = {n}")
        for label, value in rows:
            print(f"  {label:<48} {value}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
