"""gemm_relu (../shared/examples/gemm_relu.py and the prompt example) with TMA loads, warp-specialized (a producer
warpgroup issues them) and not, and without TMA (cp.async), side by side (TILEAGENT_ENABLE_TMA,
TILEAGENT_WARP_SPECIALIZE), with wgmma and with mma.sync, next to cuBLAS, all timed in this run (CUDA events, L2
flushed, medians; bench.memory_bound.bench).

Usage (H200): TILEAGENT_SHARED=/path/to/shared python bench/tma_gemm.py [--sizes 4096 8192] [--dtype float16]
Each kernel is built by ``bench.wgmma_gemm.build`` with both variables set around the compile (the module cache
keys on them), checked against relu(a @ b) (fp32 reference, the tolerance of bench/wgmma_gemm.py) and timed only
when correct. Each line says which gemm instruction ran and whether the pipeline's loads were TMA ("TMA", "TMA, warp-
specialized") or cp.async ("cp.async"), so a silent fallback is visible. Exit status 1 when a kernel is wrong or a
TMA-on kernel did not get TMA loads. ``--modes ws,tma,cp.async`` picks the columns.
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
WS = "TILEAGENT_WARP_SPECIALIZE"
MODES = {"ws": ("1", "1"), "tma": ("1", "0"), "cp.async": ("0", "0")}  # mode -> (TMA, WS) settings
ROWS = (  # label, tiles (block_M, block_N, block_K[, threads[, stages]]), wgmma
    ("example tiles 128/128/64 wgmma", (128, 128, 64), True),
    ("example tiles 128/128/64 mma.sync", (128, 128, 64), False),
    ("prompt ex. 128/256/64 256 thr 4 st wgmma", (128, 256, 64, 256, 4), True),
    ("prompt ex. 128/256/64 256 thr 3 st wgmma", (128, 256, 64, 256, 3), True),
    ("prompt ex. 128/128/64 128 thr 4 st wgmma", (128, 128, 64, 128, 4), True),
)


def build_tma(gemm, n: int, tiles: tuple, wgmma: bool, dtype: str, mode: str):
    """(kernel, what ran) with TILEAGENT_ENABLE_TMA and TILEAGENT_WARP_SPECIALIZE as ``mode`` says during the
    compile."""
    old = {k: os.environ.get(k) for k in (TMA, WS)}
    os.environ[TMA], os.environ[WS] = MODES[mode]
    try:
        kernel, chosen = build(gemm, n, tiles, wgmma, dtype)
        ir = kernel.get_ir("thread")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    loads = ("TMA, warp-specialized" if "warp-specialized" in ir else "TMA") if "TMA 2d box" in ir else "cp.async"
    return kernel, f"{chosen}, {loads}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--modes", default="ws,tma,cp.async")
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
            for mode in args.modes.split(","):
                tma = mode != "cp.async"
                kernel, what = build_tma(gemm, n, tiles, wgmma, args.dtype, mode)
                c.fill_(float("nan"))
                kernel(a, b, c)
                torch.cuda.synchronize()
                err = (c.float() - ref).abs().max().item()
                ok = torch.allclose(c.float(), ref, rtol=2e-2, atol=2e-2 * n ** 0.5 / 8)
                if not ok or (tma and "TMA" not in what):
                    status = 1
                name = f"{label} {mode} [{what}]"
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
