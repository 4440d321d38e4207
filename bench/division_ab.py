"""Same-run A/B of float division runs (compiler.targets.cuda_division): A as built, B with
``TILEAGENT_DIVISION_RUNS=0`` (every division as written, IEEE ``div.rn.f32`` each).

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/division_ab.py [--trials 20] [--rounds 3]
The shared examples whose epilogues divide: flash attention B8 H32 S4096 D128 fp16 (non-causal and causal, the tuned
128/128/2/256 schedule and the example's default), MLA decode B64 H128 ctx8192 (shared and fragment), softmax
16384 x 8192 fp16. Each side is compiled in this process into its own module-cache folder (the switch is not part of
the cache key); their outputs on the same inputs must be identical (the quotients are bitwise the same); then the
sides are timed in alternating rounds (CUDA events, L2 flushed, medians; bench.memory_bound.bench), SDPA beside flash
attention. Prints TFLOP/s (GB/s for softmax) of A and B, B's time over A's, and SDPA.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.tensor_core import TUNED_FA, load  # noqa: E402


def compiled(jitted, *args, out_idx=None, **kwargs):
    """A fresh compile of a ``tilelang.jit`` factory's program (the factory's own calls are memoized in-process)."""
    import tileagent

    return tileagent.compile(jitted.fn(*args, **kwargs), out_idx=jitted.out_idx if out_idx is None else out_idx)


def both_sides(build):
    """(A, B): ``build()`` compiled with division runs and without, each in a fresh module cache; None when A has
    no run (the kernel is past ``cuda_division.MAX_SITES`` or has no shared divisors)."""
    sides = []
    for runs in ("1", "0"):
        os.environ["TILEAGENT_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"division_ab{runs}_")
        os.environ["TILEAGENT_DIVISION_RUNS"] = runs
        kernel = build()
        grouped = "tl_div_by_rcp(" in kernel.get_kernel_source()
        if runs == "0" and grouped:
            raise SystemExit("TILEAGENT_DIVISION_RUNS=0: the source still has division runs")
        sides.append(kernel if grouped or runs == "0" else None)
    os.environ.pop("TILEAGENT_DIVISION_RUNS")
    return None if sides[0] is None else sides


def cases():
    """(label, build, args, work, unit, baseline or None): work is FLOPs or bytes moved."""
    fa, mla, softmax = load("flash_attn_fwd"), load("mla_decode"), load("softmax")
    B, H, S, D = 8, 32, 4096, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    for causal in (False, True):
        for sched in (TUNED_FA[0], {}):
            label = f"flash_attn{' causal' if causal else ''} {'/'.join(map(str, sched.values())) or 'default'}"
            sdpa = (lambda c=causal: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=c))
            yield (label, lambda c=causal, s=sched: compiled(fa.flash_attn_fwd, B, H, S, D, c, **s), (q, k, v),
                   4 * B * H * S * S * D // (2 if causal else 1), "TFLOP/s", sdpa)
    Bm, Hm, ctx = 64, 128, 8192
    mla_in = (torch.randn(Bm, Hm, 512, device="cuda", dtype=torch.float16),
              torch.randn(Bm, Hm, 64, device="cuda", dtype=torch.float16),
              torch.randn(Bm, ctx, 1, 512, device="cuda", dtype=torch.float16),
              torch.randn(Bm, ctx, 1, 64, device="cuda", dtype=torch.float16))
    for variant in ("shared", "fragment"):
        yield (f"mla_decode {variant}", lambda v=variant: compiled(mla.mla_decode, Bm, Hm, ctx, variant=v), mla_in,
               2 * Bm * Hm * ctx * (512 + 64) + 2 * Bm * Hm * ctx * 512, "TFLOP/s", None)
    M, N = 16384, 8192
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    moved = 4 * x.numel() * 1e3  # bytes read and written, x 1e3: GB/s on the scale of FLOPs to TFLOP/s
    yield "softmax 16384x8192", lambda: compiled(softmax.softmax, M, N, out_idx=[1]), (x,), moved, "GB/s", None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    print(f"{'kernel':34} {'A':>8} {'B':>8} {'B/A time':>9} {'baseline':>9}  unit, outputs", flush=True)
    for label, build, args, work, unit, baseline in cases():
        sides = both_sides(build)
        if sides is None:
            print(f"{label:34} no division run", flush=True)
            continue
        outs = [kern(*args) for kern in sides]
        torch.cuda.synchronize()
        same = "identical" if torch.equal(outs[0], outs[1]) else \
            f"DIFFER: max |A-B| {(outs[0].float() - outs[1].float()).abs().max():.3g}"
        times = [[], []]
        for _ in range(a.rounds):  # alternate the sides
            for n, kern in enumerate(sides):
                times[n].append(bench(lambda: kern(*args), trials=a.trials)[0])
        ta, tb = (statistics.median(t) for t in times)
        base = "" if baseline is None else f"{work / bench(baseline, trials=a.trials)[0] / 1e9:9.1f}"
        print(f"{label:34} {work / ta / 1e9:8.1f} {work / tb / 1e9:8.1f} {tb / ta:9.3f} {base:>9}  {unit}, {same}",
              flush=True)


if __name__ == "__main__":
    main()
