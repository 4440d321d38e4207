"""gemm_relu (../shared/examples/gemm_relu.py) with the opt-in wgmma entry (TILEAGENT_ENABLE_WGMMA=1) vs mma.sync vs
cuBLAS, all timed in this run (CUDA events, L2 flushed, medians; bench.memory_bound.bench).

Usage (H200): TILEAGENT_SHARED=/path/to/shared python bench/wgmma_gemm.py [--sizes 4096 8192] [--dtype float16]
Per size it checks each kernel against relu(a @ b) (fp32 reference, rtol/atol 2e-2 scaled by sqrt(K)), then prints
TFLOP/s of: the example's own tiles 128/128/64 (mma.sync: its B tile has 256-byte rows, which the wgmma entry does
not take yet), tiles 128/64/64 with wgmma on and off (off = mma.sync, the same program), cuBLAS a @ b and
relu(a @ b). It also prints which instruction each kernel's gemm lowered to, so a silent fallback is visible.
Exit status 1 when a kernel is wrong or the wgmma kernel did not choose wgmma. Runs in well under 2 minutes.
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

SHARED = Path(os.environ.get("TILEAGENT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "examples"
ENV = "TILEAGENT_ENABLE_WGMMA"


def build(gemm, n: int, tiles: tuple[int, int, int], wgmma: bool, dtype: str):
    import tileagent

    old = os.environ.get(ENV)
    os.environ[ENV] = "1" if wgmma else "0"
    try:
        kernel = tileagent.compile(gemm.matmul.fn(n, n, n, *tiles, dtype=dtype), target="cuda")
        ir = kernel.get_ir("thread")
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
    chosen = "wgmma" if "wgmma.mma_async" in ir else "mma.sync"
    return kernel, chosen


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
        for label, tiles, on in (("example tiles 128/128/64", (128, 128, 64), False),
                                 ("tiles 128/64/64 wgmma ON", (128, 64, 64), True),
                                 ("tiles 128/64/64 wgmma off", (128, 64, 64), False)):
            kernel, chosen = build(gemm, n, tiles, on, args.dtype)
            c.fill_(float("nan"))
            kernel(a, b, c)
            torch.cuda.synchronize()
            err = (c.float() - ref).abs().max().item()
            ok = torch.allclose(c.float(), ref, rtol=2e-2, atol=2e-2 * n ** 0.5 / 8)
            if not ok or (on and chosen != "wgmma"):
                status = 1
            ms = bench(lambda: kernel(a, b, c), trials=args.trials)[0]
            rows.append((f"{label} [{chosen}]", flops / ms / 1e9, "ok" if ok else f"WRONG max err {err:.3g}"))
        for label, fn in (("cuBLAS a @ b", lambda: torch.matmul(a, b)), ("relu(a @ b)", lambda: torch.relu(a @ b))):
            ms = bench(fn, trials=args.trials)[0]
            rows.append((label, flops / ms / 1e9, "-"))
        print(f"gemm_relu {n}^3 {args.dtype}")
        for label, tflops, check in rows:
            print(f"  {label:<40} {tflops:8.1f} TFLOP/s  {check}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
