"""Cold compile time of the tensor-core acceptance kernels (issue 12: each <= 0.5 s), TMA off and as by default.

Usage: TILEAGENT_SHARED=/path/to/shared python bench/tensor_core_compile.py [--arch sm_90a] [--runs 3]
Each compile is ``tileagent.compile(..., target="cuda:<arch>")`` (our passes, then NVRTC to a cubin; no GPU needed)
with an empty module and NVRTC cache directory of its own, and a distinct size each run (a distinct source), so
nothing is reused; each kernel's first compile is a warm-up (imports, NVRTC's library load, its precompiled header)
and not counted. Prints the median seconds per kernel: the whole compile, and NVRTC's part (the ``nvrtc`` pass of
the pass timings).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.tensor_core import load  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    import tileagent

    gemm, fa, mla = load("gemm_relu"), load("flash_attn_fwd"), load("mla_decode")
    kernels = {"gemm_relu 4096^3 128/128/64": lambda n: gemm.matmul.fn(4096 + n, 4096, 4096, 128, 128, 64),
               "flash_attn_fwd B8 H32 S4096 D128": lambda n: fa.flash_attn_fwd.fn(8, 32, 4096 + n, 128, False),
               "flash_attn_fwd causal": lambda n: fa.flash_attn_fwd.fn(8, 32, 4096 + n, 128, True),
               "mla_decode B64 H128 ctx8192": lambda n: mla.mla_decode.fn(64, 128, 8192 + 64 * n)}
    target = f"cuda:{args.arch}"
    for tma in ("0", "default"):  # TILEAGENT_ENABLE_TMA=0, and unset (sm_90a: TMA for pipelines that feed a gemm)
        if tma == "default":
            os.environ.pop("TILEAGENT_ENABLE_TMA", None)
        else:
            os.environ["TILEAGENT_ENABLE_TMA"] = tma
        for name, factory in kernels.items():
            total, nvrtc = [], []
            for run in range(args.runs + 1):
                os.environ["TILEAGENT_CACHE_DIR"] = tempfile.mkdtemp()
                func = factory(run)
                t0 = time.perf_counter()
                kernel = tileagent.compile(func, target=target)
                if run:  # run 0 warms up
                    total.append(time.perf_counter() - t0)
                    nvrtc.append(kernel.pass_timings().get("nvrtc", float("nan")))
            print(f"TMA={tma} {name:34s} cold compile {statistics.median(total):.3f} s "
                  f"(NVRTC {statistics.median(nvrtc):.3f} s)", flush=True)


if __name__ == "__main__":
    main()
