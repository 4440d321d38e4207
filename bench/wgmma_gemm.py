"""gemm_relu (../shared/examples/gemm_relu.py) on wgmma (sm_90a's default) vs mma.sync (TILEAGENT_ENABLE_WGMMA=0) vs
cuBLAS, all timed in this run (CUDA events, L2 flushed, medians; bench.memory_bound.bench).

Usage (H200): TILEAGENT_SHARED=/path/to/shared python bench/wgmma_gemm.py [--sizes 4096 8192] [--dtype float16]
Per size it first checks each kernel against relu(a @ b) (fp32 reference, rtol/atol 2e-2 scaled by sqrt(K)) and times
only the correct ones (a wrong kernel prints WRONG and its max error), then prints TFLOP/s of: the example's own tiles
128/128/64 with wgmma on and off (off = mma.sync, the same program), tiles 128/64/64 with wgmma on, the drafter's
128/256/32 on 256 threads with wgmma on, cuBLAS a @ b and relu(a @ b). The example's tiles also run with the overlap
off (TILEAGENT_WGMMA_OVERLAP=0: wait_group 0 in every K iteration and the refill before the gemm, as before the
overlap, but with the pipeline's one barrier per iteration instead of two) for a same-run A/B, and the prompt example
at 128/256/64 on 256 threads (3 and 4 stages of 48 KB: one block per SM) and 128/128/64 with 4 stages (the 4-stage
ones with the overlap on and off) as larger-tile / deeper-pipeline data points for the autotuner: with s stages the
overlap keeps the loads only about s - 2 iterations ahead. Each kernel's line names the instruction its gemm lowered
to ("wgmma": overlapped, "wgmma, no overlap", "mma.sync"), so a silent fallback is visible. Exit status 1 when a
kernel is wrong or a wgmma-on kernel did not get the schedule its line asks for. Runs in well under 2 minutes.
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
OVERLAP = "TILEAGENT_WGMMA_OVERLAP"


def build(gemm, n: int, tiles: tuple, wgmma: bool, dtype: str, overlap: bool = True):
    """(kernel, "wgmma" | "wgmma, no overlap" | "mma.sync") of the example at tiles (block_M, block_N, block_K[,
    threads]); ``overlap`` False compiles with TILEAGENT_WGMMA_OVERLAP=0 (wait_group 0 in every K iteration)."""
    import tileagent

    old = {k: os.environ.get(k) for k in (ENV, OVERLAP)}
    os.environ[ENV] = "1" if wgmma else "0"
    os.environ[OVERLAP] = "1" if overlap else "0"
    try:
        # the shared example fixes 128 threads; with a thread count, the prompt example (same program, a parameter)
        func = gemm.matmul.fn(n, n, n, *tiles, dtype=dtype) if len(tiles) == 3 else _with_threads(n, tiles, dtype)
        kernel = tileagent.compile(func, target="cuda")
        ir = kernel.get_ir("thread")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    chosen = "mma.sync" if "wgmma.mma_async" not in ir else \
        "wgmma" if "wgmma.wait_group 1" in ir else "wgmma, no overlap"
    return kernel, chosen


def _with_threads(n: int, tiles: tuple, dtype: str):
    """The prompt example's gemm_relu (the shared example's program with threads and stages as parameters) at
    ``tiles`` = (block_M, block_N, block_K, threads[, num_stages (default 3, the example's)])."""
    prompts = load_from("gemm_relu", Path(__file__).resolve().parents[1] / "prompts" / "examples")
    bm, bn, bk, threads, stages = (*tiles, 3)[:5]
    return prompts.gemm_relu.fn(n, n, n, block_M=bm, block_N=bn, block_K=bk, threads=threads, num_stages=stages,
                                dtype=dtype)


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
        for label, tiles, on, overlap in (
                ("example tiles 128/128/64 wgmma ON", (128, 128, 64), True, True),
                ("example tiles 128/128/64 wgmma ON, overlap off", (128, 128, 64), True, False),
                ("example tiles 128/128/64 wgmma off", (128, 128, 64), False, True),
                ("tiles 128/64/64 wgmma ON", (128, 64, 64), True, True),
                ("prompt ex. 128/256/32 256 thr wgmma ON", (128, 256, 32, 256), True, True),
                ("prompt ex. 128/256/64 256 thr 3 st wgmma ON", (128, 256, 64, 256), True, True),
                ("prompt ex. 128/256/64 256 thr 4 st wgmma ON", (128, 256, 64, 256, 4), True, True),
                ("prompt ex. 128/256/64 256 thr 4 st wgmma ON, overlap off", (128, 256, 64, 256, 4), True, False),
                ("prompt ex. 128/128/64 128 thr 4 st wgmma ON", (128, 128, 64, 128, 4), True, True),
                ("prompt ex. 128/128/64 128 thr 4 st wgmma ON, overlap off", (128, 128, 64, 128, 4), True, False)):
            kernel, chosen = build(gemm, n, tiles, on, args.dtype, overlap)
            c.fill_(float("nan"))
            kernel(a, b, c)
            torch.cuda.synchronize()
            err = (c.float() - ref).abs().max().item()
            ok = torch.allclose(c.float(), ref, rtol=2e-2, atol=2e-2 * n ** 0.5 / 8)
            if not ok or (on and chosen != ("wgmma" if overlap else "wgmma, no overlap")):
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
            print(f"  {label:<72} {tflops:8.1f} TFLOP/s  {check}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
