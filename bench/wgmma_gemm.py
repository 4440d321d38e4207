"""gemm_relu (../shared/examples/gemm_relu.py) with the opt-in wgmma entry (TILEAGENT_ENABLE_WGMMA=1) vs mma.sync vs
cuBLAS, all timed in this run (CUDA events, L2 flushed, medians; bench.memory_bound.bench).

Usage (H200): TILEAGENT_SHARED=/path/to/shared python bench/wgmma_gemm.py [--sizes 4096 8192] [--dtype float16]
Per size it first checks each kernel against relu(a @ b) (fp32 reference, rtol/atol 2e-2 scaled by sqrt(K)) and
times only the correct ones (a wrong kernel prints WRONG and its max error), then prints TFLOP/s of: the example's
own tiles 128/128/64 with wgmma on and off (off = mma.sync, the same program), tiles 128/64/64 with wgmma on, the
drafter's 128/256/32 on 256 threads with wgmma on, cuBLAS a @ b and relu(a @ b). Each kernel's line names the
instruction its gemm lowered to, so a silent fallback is visible. Exit status 1 when a kernel is wrong or a wgmma-on
kernel did not choose wgmma. Runs in well under 2 minutes.
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


def build(gemm, n: int, tiles: tuple, wgmma: bool, dtype: str):
    """(kernel, "wgmma" | "mma.sync") of the example at tiles (block_M, block_N, block_K[, threads])."""
    import tileagent

    old = os.environ.get(ENV)
    os.environ[ENV] = "1" if wgmma else "0"
    try:
        # the shared example fixes 128 threads; with a thread count, the prompt example (same program, a parameter)
        func = gemm.matmul.fn(n, n, n, *tiles, dtype=dtype) if len(tiles) == 3 else _with_threads(n, tiles, dtype)
        kernel = tileagent.compile(func, target="cuda")
        ir = kernel.get_ir("thread")
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
    chosen = "wgmma" if "wgmma.mma_async" in ir else "mma.sync"
    return kernel, chosen


def _with_threads(n: int, tiles: tuple, dtype: str):
    """The prompt example's gemm_relu (the shared example's program with threads as a parameter) at ``tiles``."""
    prompts = load_from("gemm_relu", Path(__file__).resolve().parents[1] / "prompts" / "examples")
    bm, bn, bk, threads = tiles
    return prompts.gemm_relu.fn(n, n, n, block_M=bm, block_N=bn, block_K=bk, threads=threads, dtype=dtype)


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
        for label, tiles, on in (("example tiles 128/128/64 wgmma ON", (128, 128, 64), True),
                                 ("example tiles 128/128/64 wgmma off", (128, 128, 64), False),
                                 ("tiles 128/64/64 wgmma ON", (128, 64, 64), True),
                                 ("prompt ex. 128/256/32 256 thr wgmma ON", (128, 256, 32, 256), True)):
            kernel, chosen = build(gemm, n, tiles, on, args.dtype)
            c.fill_(float("nan"))
            kernel(a, b, c)
            torch.cuda.synchronize()
            err = (c.float() - ref).abs().max().item()
            ok = torch.allclose(c.float(), ref, rtol=2e-2, atol=2e-2 * n ** 0.5 / 8)
            if not ok or (on and chosen != "wgmma"):
                status = 1
            if not ok:  # correctness before timing
                rows.append((f"{label} [{chosen}]", float("nan"), f"WRONG max err {err:.3g}"))
                continue
            ms = bench(lambda: kernel(a, b, c), trials=args.trials)[0]
            rows.append((f"{label} [{chosen}]", flops / ms / 1e9, "ok"))
        for label, fn in (("cuBLAS a @ b", lambda: torch.matmul(a, b)), ("relu(a @ b)", lambda: torch.relu(a @ b))):
            ms = bench(fn, trials=args.trials)[0]
            rows.append((label, flops / ms / 1e9, "-"))
        print(f"gemm_relu {n}^3 {args.dtype}")
        for label, tflops, check in rows:
            print(f"  {label:<46} {tflops:8.1f} TFLOP/s  {check}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
