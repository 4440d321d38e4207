"""Where the cold compile time of a kernel goes: our passes vs NVRTC, per pass, median over distinct sources.

Usage: python bench/compile_latency.py [--arch sm_90a] [--kernel rmsnorm_silu] [--runs 7] [--load]
Compiles prompts/examples/<kernel>.py for ``--runs`` distinct row lengths C (distinct sources, so NVRTC really
compiles) with an empty cache directory, on target cuda:<arch> (no GPU needed: ``--load`` also loads the module on
the GPU, as bench/memory_bound.py's "cold" figure does). Prints the median seconds of each pass and of the whole
compile; the last line is the summary.
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


def main(argv=None) -> int:
    from bench.memory_bound import load
    from tileagent.compiler.jit import JITImpl

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--kernel", default="rmsnorm_silu")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--load", action="store_true", help="also load the module on the GPU (needs one)")
    a = ap.parse_args(argv)
    module = load(a.kernel)
    factory = getattr(module, a.kernel)
    per_pass: dict[str, list[float]] = {}
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TILEAGENT_CACHE_DIR"] = tmp
        for k in range(a.runs):
            C = 160 + 64 * k
            fresh = JITImpl(factory.fn, factory.out_idx, f"cuda:{a.arch}", factory.pass_configs)
            t0 = time.perf_counter()
            kernel = fresh(None, C)
            if a.load:
                kernel.backend.load()
            totals.append(time.perf_counter() - t0)
            for name, seconds in kernel.pass_timings().items():
                per_pass.setdefault(name, []).append(seconds)
    print(f"{a.kernel} on cuda:{a.arch}, {a.runs} distinct sources, median seconds per pass:")
    ours = 0.0
    for name, values in per_pass.items():
        m = statistics.median(values)
        ours += m if name != "nvrtc" else 0.0
        print(f"  {name:<16} {m:8.4f}")
    nvrtc = statistics.median(per_pass.get("nvrtc", [0.0]))
    total = statistics.median(totals)
    print(f"cold compile median {total:.3f} s: our passes {ours:.3f} s, NVRTC {nvrtc:.3f} s, "
          f"other (frontend, load) {max(0.0, total - ours - nvrtc):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
