"""Memory-bound kernels on the GPU: correctness sweep, bandwidth against a device copy, torch.compile, compile times.

Usage (on a CUDA machine): python bench/memory_bound.py [--quick] [--json out.json]
1. RMSNorm+SiLU (prompts/examples/rmsnorm_silu.py, one kernel per C with a dynamic M) correct for every C multiple of
   32 in [32, 8192] and M in {1, 7, 1000, 16384, 262144} (fresh random inputs, output poisoned with NaN).
2. At M = 262144 and M = 16384, fp16, C in {96, ..., 4096}: median kernel time (CUDA events, L2 flushed before every
   trial), the same bytes through ``torch.Tensor.copy_``, eager and torch.compile of the reference, all in this run.
3. Softmax 16384 x 4096 fp16 against the same-size copy.
4. Compile time of rmsnorm_silu from DSL source to a loaded module: cold (empty cache dir, distinct sources) and warm.
Prints a table per part; the last lines are the summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def load(name: str, directory: Path = REPO / "prompts" / "examples"):
    """Import ``directory/<name>.py`` as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_flush = None


def flush_l2():
    global _flush
    if _flush is None:
        _flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    _flush.zero_()


def bench(fn, trials: int = 30, warmup: int = 5) -> tuple[float, float]:
    """(median ms, IQR ms) of the GPU time of one call over ``trials``, L2 flushed before each.

    Before each trial the stream is kept busy (``torch.cuda._sleep``) while the host enqueues the start event, the
    call and the end event, so host-side launch overhead (Python argument checks, torch.compile guards) is left out
    for every contender alike; copies stay SM copies (a CUDA graph would turn ``copy_`` into a copy-engine node)."""
    if os.environ.get("TILEAGENT_MBAR_SPIN_LIMIT"):  # a test setting (shown once: warnings' default filter)
        warnings.warn("TILEAGENT_MBAR_SPIN_LIMIT is set: mbarrier waits carry a clock64 deadline, which costs registers "
                      "(the example GEMM's wgmmas are then serialized: 157 instead of 580 TFLOP/s on an H200); unset "
                      "it for timings", RuntimeWarning, stacklevel=2)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(trials):
        flush_l2()
        torch.cuda._sleep(1_000_000)  # ~0.5 ms of GPU time: longer than any host-side overhead
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    q = statistics.quantiles(times, n=4)
    return statistics.median(times), q[2] - q[0]


def host_overhead_us(fn, calls: int = 200) -> float:
    """Median wall time of one call from Python, synchronizing after each (launch overhead + GPU time)."""
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def sweep_correctness(rms, quick: bool) -> list[str]:
    failures = []
    cs = range(32, 8193, 32) if not quick else (32, 96, 160, 4096, 8192)
    ms = (1, 7, 1000, 16384, 262144)
    for C in cs:
        kernel = rms.rmsnorm_silu(None, C)
        g = torch.randn(C, device="cuda", dtype=torch.float16)
        for M in ms:
            x = torch.randn(M, C, device="cuda", dtype=torch.float16)
            y = kernel(x, g)
            ref = rms.reference(x, g)
            bad = ~torch.isclose(y.float(), ref.float(), rtol=2e-2, atol=2e-2) | torch.isnan(y)
            if bad.any():
                failures.append(f"C={C} M={M}: {int(bad.sum())} mismatches")
        del kernel
    return failures


def bandwidth_rows(rms, M: int, cs) -> list[dict]:
    rows = []
    for C in cs:
        kernel = rms.rmsnorm_silu(None, C)
        x = torch.randn(M, C, device="cuda", dtype=torch.float16)
        g = torch.randn(C, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        bytes_moved = 2 * x.numel() * x.element_size() + g.numel() * g.element_size()
        ours = bench(lambda: kernel(x, g))
        copy = bench(lambda: y.copy_(x))
        eager = bench(lambda: rms.reference(x, g))
        torch._dynamo.reset()
        comp = torch.compile(rms.reference, dynamic=False)
        comp(x, g)
        tc = bench(lambda: comp(x, g))
        rows.append(dict(M=M, C=C, ours_ms=ours[0], ours_iqr=ours[1], copy_ms=copy[0], eager_ms=eager[0],
                         compile_ms=tc[0], ours_gbs=bytes_moved / ours[0] / 1e6, copy_gbs=bytes_moved / copy[0] / 1e6,
                         pct_copy=100 * copy[0] / ours[0], vs_compile=tc[0] / ours[0]))
    return rows


def compile_times(rms) -> dict:
    """Cold and warm compile of rmsnorm_silu as its decorator declares it (fast math included, as the timed rows)."""
    from tileagent.compiler.jit import JITImpl

    factory = rms.rmsnorm_silu
    fresh_jit = lambda: JITImpl(factory.fn, factory.out_idx, "cuda", factory.pass_configs)  # noqa: E731
    cold, warm = [], []
    old = os.environ.get("TILEAGENT_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TILEAGENT_CACHE_DIR"] = tmp
        for k, C in enumerate((160, 224, 288, 352, 416, 480, 544)):
            fresh = fresh_jit()
            t0 = time.perf_counter()
            kernel = fresh(None, C)
            kernel.backend.load()
            cold.append(time.perf_counter() - t0)
        for _ in range(7):
            fresh = fresh_jit()
            t0 = time.perf_counter()
            kernel = fresh(None, 160)
            kernel.backend.load()
            warm.append(time.perf_counter() - t0)
    if old is None:
        os.environ.pop("TILEAGENT_CACHE_DIR", None)
    else:
        os.environ["TILEAGENT_CACHE_DIR"] = old
    return dict(cold_median_s=statistics.median(cold), warm_median_ms=1e3 * statistics.median(warm))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--sweep-only", action="store_true", help="compile times and the correctness sweep, no timings")
    ap.add_argument("--cs", default="96,160,192,256,320,384,512,640,1024,4096", help="C values of the timed rows")
    ap.add_argument("--ms", default="262144,16384", help="M values of the timed rows")
    args = ap.parse_args()
    torch.manual_seed(0)
    rms, sm = load("rmsnorm_silu"), load("softmax")
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    report["compile"] = compile_times(rms)
    print(f"compile rmsnorm_silu: cold median {report['compile']['cold_median_s']:.3f} s, "
          f"warm median {report['compile']['warm_median_ms']:.1f} ms", flush=True)
    if not args.skip_sweep:
        t0 = time.time()
        report["sweep_failures"] = sweep_correctness(rms, args.quick)
        print(f"correctness sweep: {len(report['sweep_failures'])} failures in {time.time() - t0:.0f} s", flush=True)
        for f in report["sweep_failures"][:20]:
            print("  ", f)
    if args.sweep_only:
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return
    cs = [int(c) for c in args.cs.split(",")]
    report["rows"] = []
    for M in [int(m) for m in args.ms.split(",")]:
        report["rows"] += bandwidth_rows(rms, M, cs)
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.float16) * 4
    sk = sm.softmax(None, 4096)
    y = torch.empty_like(x)
    torch.testing.assert_close(sk(x), sm.reference(x), rtol=1e-2, atol=1e-3)
    s_ours, s_copy = bench(lambda: sk(x))[0], bench(lambda: y.copy_(x))[0]
    report["softmax"] = dict(ours_ms=s_ours, copy_ms=s_copy, pct_copy=100 * s_copy / s_ours)
    print(f"\n{'M':>7} {'C':>5} {'ours ms':>9} {'GB/s':>7} {'copy GB/s':>9} {'%copy':>6} {'eager ms':>9} "
          f"{'compile ms':>10} {'x compile':>9}")
    for r in report["rows"]:
        print(f"{r['M']:>7} {r['C']:>5} {r['ours_ms']:>9.4f} {r['ours_gbs']:>7.0f} {r['copy_gbs']:>9.0f} "
              f"{r['pct_copy']:>6.1f} {r['eager_ms']:>9.4f} {r['compile_ms']:>10.4f} {r['vs_compile']:>9.2f}")
    print(f"softmax 16384x4096 fp16: ours {s_ours:.4f} ms, copy {s_copy:.4f} ms, {report['softmax']['pct_copy']:.1f}% "
          f"of copy bandwidth")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
