"""TileLang's int4 GEMM example (``bench/tilelang_examples/gemm_int4``) through ``tileagent.compat`` on the GPU: exact
against ``torch._int_mm`` (int8, cuBLAS), then timed next to it in the same process (TOPS = 2 M N K / time).

Usage (CUDA machine): python bench/int4_gemm.py
Issue 13 (TileLang programs unchanged) and the sm_90 lowering of int4 tiles (two int8 mmas a 4-bit one,
``compiler.targets.cuda_tensor``); BENCHMARKS.md, round 2 session 38.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.memory_bound import bench  # noqa: E402

TILES = ((128, 128, 64, 128), (128, 128, 128, 128), (128, 256, 128, 256))  # block_M, block_N, block_K, threads


def main() -> None:
    from tileagent import compat

    compat.install()
    import tilelang
    from tileagent.compat.run import load_script

    ns = load_script(REPO / "bench" / "tilelang_examples" / "gemm_int4" / "example_tilelang_gemm_int4.py")
    for n in (4096, 8192):
        a, b = (torch.randint(-8, 8, (n, n), device="cuda", dtype=torch.int8) for _ in range(2))
        a4, b4 = ns["pack_int4"](a), ns["pack_int4"](b)
        for bm, bn, bk, threads in TILES:
            kernel = tilelang.compile(ns["matmul_nt_int4"](n, n, n, bm, bn, bk, threads), out_idx=-1)
            exact = torch.equal(kernel(a4, b4), torch._int_mm(a, b.t()))
            t = bench(lambda: kernel(a4, b4))[0]
            t8 = bench(lambda: torch._int_mm(a, b.t()))[0]
            print(f"int4 {n}^3 {bm}x{bn}x{bk} t{threads}: exact={exact} {t:.3f} ms {2 * n ** 3 / t / 1e9:.1f} TOPS | "
                  f"torch._int_mm int8 {t8:.3f} ms {2 * n ** 3 / t8 / 1e9:.1f} TOPS", flush=True)


if __name__ == "__main__":
    main()
