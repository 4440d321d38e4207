"""Where the cold compile time of a kernel goes: our passes vs NVRTC, per pass, median over distinct sources.

Usage: python bench/compile_latency.py [--arch sm_90a] [--kernel rmsnorm_silu] [--dtype bfloat16] [--runs 7] [--load]
                                      [--ab] [--options=--Ofast-compile=mid]
Compiles prompts/examples/<kernel>.py (a factory ``kernel(M, C, ..., dtype=...)``) for ``--runs`` distinct row lengths
C (distinct sources, so NVRTC really compiles; ``--dtype`` passed on when given: bfloat16 includes cuda_bf16.h) with an
empty cache directory, on target cuda:<arch> (no GPU needed: ``--load`` also loads the module on
the GPU, as bench/memory_bound.py's "cold" figure does). Prints the median seconds of each pass and of the whole
compile, and NVRTC's CPU seconds (this process, all threads: on a busy machine the wall time grows, the CPU time
much less); the last line is the summary.

``--ab`` compiles every C twice, alternating which goes first, each side with its own empty cache directory: "before"
without the compile-time options of compiler/runtime/nvrtc.py (``TILEAGENT_NVRTC_PCH=0 TILEAGENT_NVRTC_CACHE=1``:
no precompiled header, NVRTC's own cache on), "after" with them (the default), and prints both summaries. The CUDA
driver's compute cache, where NVRTC 12.9+ keeps its own cache, is pointed at a fresh directory
(``CUDA_CACHE_PATH``) unless set, so that no earlier run hits it.

``--options`` (space-separated NVRTC options) adds them to every compile; with ``--ab`` the two sides are instead
"default" (as the runtime compiles) and "options" (with them), alternating as above: what an option would save.
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

SIDES = {"before": {"TILEAGENT_NVRTC_PCH": "0", "TILEAGENT_NVRTC_CACHE": "1"},
         "after": {"TILEAGENT_NVRTC_PCH": "1", "TILEAGENT_NVRTC_CACHE": "0"}}


def compile_once(factory, arch: str, C: int, load: bool, dtype: str | None = None) -> dict:
    """One cold compile of ``factory`` for row length C: seconds in total, per pass, and NVRTC's CPU seconds."""
    from tileagent.compiler.jit import JITImpl
    from tileagent.compiler.runtime import nvrtc, ptxas

    fresh = JITImpl(factory.fn, factory.out_idx, f"cuda:{arch}", factory.pass_configs)
    t0 = time.perf_counter()
    kernel = fresh(None, C, **({"dtype": dtype} if dtype else {}))
    if load:
        kernel.backend.load()
    total = time.perf_counter() - t0
    timings = kernel.pass_timings()
    last = ptxas.last_compile if timings.get("ptxas", 0.0) > timings.get("nvrtc", 0.0) else nvrtc.last_compile
    return dict(total=total, passes=timings, nvrtc_cpu=last["cpu_s"])


def summary(runs: list[dict], label: str, kernel: str, arch: str, per_pass: bool = True) -> str:
    names = list(runs[0]["passes"])
    medians = {n: statistics.median(r["passes"].get(n, 0.0) for r in runs) for n in names}
    lines = []
    if per_pass:
        lines.append(f"{kernel} on cuda:{arch}, {len(runs)} distinct sources{label}, median seconds per pass:")
        lines += [f"  {n:<16} {m:8.4f}" for n, m in medians.items()]
    ours = sum(m for n, m in medians.items() if n not in ("nvrtc", "ptxas"))
    nvrtc = medians.get("nvrtc", 0.0) + medians.get("ptxas", 0.0)
    total = statistics.median(r["total"] for r in runs)
    cpu = statistics.median(r["nvrtc_cpu"] for r in runs)
    tool = "ptxas" if medians.get("ptxas", 0.0) > medians.get("nvrtc", 0.0) else "NVRTC"
    lines.append(f"cold compile median{label} {total:.3f} s: our passes {ours:.3f} s, {tool} {nvrtc:.3f} s "
                 f"(CPU {cpu:.3f} s), other (frontend, load) {max(0.0, total - ours - nvrtc):.3f} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    from bench.memory_bound import load

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--kernel", default="rmsnorm_silu")
    ap.add_argument("--dtype", help="the factory's dtype argument (default: its own)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--load", action="store_true", help="also load the module on the GPU (needs one)")
    ap.add_argument("--ab", action="store_true", help="before/after the NVRTC compile-time options, interleaved")
    ap.add_argument("--options", help="extra NVRTC options (space-separated) for every compile, or, with --ab, "
                                      "for the 'options' side")
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    factory = getattr(load(a.kernel), a.kernel)
    label = f"{a.kernel}" + (f" ({a.dtype})" if a.dtype else "")
    extra = tuple((a.options or "").split())
    sides_env = ({"default": {}, "options": {}} if extra and a.ab else SIDES)
    from tileagent.compiler.runtime import nvrtc

    plain_options = nvrtc.base_options
    with_extra = lambda arch, options=(): plain_options(arch, (*options, *extra))  # noqa: E731
    saved = {k: os.environ.get(k) for k in ("TILEAGENT_CACHE_DIR", "CUDA_CACHE_PATH", *SIDES["before"])}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ.setdefault("CUDA_CACHE_PATH", os.path.join(tmp, "cuda-compute-cache"))
            sides = list(sides_env) if a.ab else [None]
            runs: dict = {s: [] for s in sides}
            for k in range(a.runs):
                C = 160 + 64 * k
                for side in (sides if k % 2 == 0 else sides[::-1]):
                    os.environ["TILEAGENT_CACHE_DIR"] = os.path.join(tmp, side or "cache")
                    os.environ.update(sides_env.get(side, {}))
                    use_extra = bool(extra) and (side == "options" or not a.ab)
                    nvrtc.base_options = with_extra if use_extra else plain_options
                    runs[side].append(compile_once(factory, a.arch, C, a.load, a.dtype))
        if a.ab:
            for side in sides:
                print(summary(runs[side], f" ({side})", label, a.arch))
            for side in sides:
                print(summary(runs[side], f" ({side})", label, a.arch, per_pass=False))
        else:
            print(summary(runs[None], "", label, a.arch))
    finally:
        nvrtc.base_options = plain_options
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
