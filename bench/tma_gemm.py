"""gemm_relu (../shared/examples/gemm_relu.py and the prompt example) with TMA loads on and off side by side
(TILEAGENT_ENABLE_TMA), with wgmma and with mma.sync, next to cuBLAS, all timed in this run (CUDA events, L2
flushed, medians; bench.memory_bound.bench).

Usage (H200): TILEAGENT_SHARED=/path/to/shared python bench/tma_gemm.py [--sizes 4096 8192] [--dtype float16]
Each kernel is built by ``bench.wgmma_gemm.build`` with TILEAGENT_ENABLE_TMA set to 1 or 0 around the compile (the
module cache keys on it), checked against relu(a @ b) (fp32 reference, the tolerance of bench/wgmma_gemm.py) and
timed only when correct. Each line says which gemm instruction ran and whether the pipeline's loads were TMA
("TMA") or cp.async ("cp.async"), so a silent fallback is visible. Exit status 1 when a kernel is wrong or a
TMA-on kernel did not get TMA loads.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.memory_bound import load as load_from  # noqa: E402
from bench.wgmma_gemm import SHARED, build  # noqa: E402

TMA = "TILEAGENT_ENABLE_TMA"
ROWS = (  # label, tiles (block_M, block_N, block_K[, threads[, stages]]), wgmma
    ("example tiles 128/128/64 wgmma", (128, 128, 64), True),
    ("example tiles 128/128/64 mma.sync", (128, 128, 64), False),
    ("prompt ex. 128/256/64 256 thr 4 st wgmma", (128, 256, 64, 256, 4), True),
    ("prompt ex. 128/128/64 128 thr 4 st wgmma", (128, 128, 64, 128, 4), True),
)


def build_tma(gemm, n: int, tiles: tuple, wgmma: bool, dtype: str, tma: bool):
    """(kernel, what ran) with TILEAGENT_ENABLE_TMA = ``tma`` during the compile."""
    old = os.environ.get(TMA)
    os.environ[TMA] = "1" if tma else "0"
    try:
        kernel, chosen = build(gemm, n, tiles, wgmma, dtype)
        ir = kernel.get_ir("thread")
    finally:
        if old is None:
            os.environ.pop(TMA, None)
        else:
            os.environ[TMA] = old
    loads = "TMA" if "TMA 2d box" in ir else "cp.async"
    return kernel, f"{chosen}, {loads}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    gemm = load_from("gemm_relu", SHARED)
    tdt = getattr(torch, args.dtype)
    status = 0
    for n in args.sizes:
        a = torch.randn(n, n, device="cuda", dtype=tdt)
        b = torch.randn(n, n, device="cuda", dtype=tdt)
        c = torch.empty(n, n, device="cuda", dtype=tdt)
        ref = torch.relu(a.float() @ b.float())
        flops = 2 * n ** 3
        rows = []
        for label, tiles, wgmma in ROWS:
            for tma in (True, False):
                kernel, what = build_tma(gemm, n, tiles, wgmma, args.dtype, tma)
                c.fill_(float("nan"))
                kernel(a, b, c)
                torch.cuda.synchronize()
                err = (c.float() - ref).abs().max().item()
                ok = torch.allclose(c.float(), ref, rtol=2e-2, atol=2e-2 * n ** 0.5 / 8)
                if not ok or (tma and not what.endswith("TMA")):
                    status = 1
                name = f"{label} TMA {'ON' if tma else 'off'} [{what}]"
                if not ok:
                    rows.append((name, float("nan"), f"WRONG max err {err:.3g}"))
                    continue
                ms = bench(lambda: kernel(a, b, c), trials=args.trials)[0]
                rows.append((name, flops / ms / 1e9, "ok"))
        for label, fn in (("cuBLAS a @ b", lambda: torch.matmul(a, b)), ("relu(a @ b)", lambda: torch.relu(a @ b))):
            ms = bench(fn, trials=args.trials)[0]
            rows.append((label, flops / ms / 1e9, "-"))
        print(f"gemm_relu {n}^3 {args.dtype}")
        for label, tflops, check in rows:
            print(f"  {label:<78} {tflops:8.1f} TFLOP/s  {check}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
