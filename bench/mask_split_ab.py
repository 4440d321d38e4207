"""Same-run A/B/C of the causal-attention levers on flash attention, the shared example as written: A as built now;
B without split masks (compiler.desugar.split_masks: the per-element select on every tile); C without heavy-first
block order (compiler.lower.heavy_first: bx = blockIdx.x, the heaviest causal row blocks last).

Usage (H200): TILEAGENT_SHARED=/path/to/shared python bench/mask_split_ab.py [--trials 20]
For causal and non-causal flash_attn_fwd at B8 H32 S4096 D128 (the schedule bench/tensor_core.py times, 128/64/2/128,
and the example's default), the sides are compiled in this process (each into its own module-cache folder, since
neither lever is part of the cache key), their outputs compared element for element on the same inputs (they must be
identical: both keep every value), then timed in alternating trials (CUDA events, L2 flushed, medians;
bench.memory_bound.bench) next to SDPA. Prints TFLOP/s of A, B, C, SDPA and the time ratios B/A, C/A.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.tensor_core import TUNED_FA, load  # noqa: E402


def compiled(fa, args, split: bool = True, heavy: bool = True):
    """The kernel of ``fa.flash_attn_fwd.fn(*args)`` with masks split or not, heavy-first order or not, in a fresh
    module cache."""
    import tileagent
    from tileagent.compiler import desugar, lower

    os.environ["TILEAGENT_CACHE_DIR"] = tempfile.mkdtemp(prefix="mask_ab_")
    real = desugar.split_masks, lower.heavy_first
    if not split:
        desugar.split_masks = lambda func: func
    if not heavy:
        lower.heavy_first = lambda k: False
    try:
        kernel = tileagent.compile(fa.flash_attn_fwd.fn(*args), out_idx=[3])
        ir = kernel.get_ir("thread")  # (the cpu target lowers here, on demand)
    finally:
        desugar.split_masks, lower.heavy_first = real
    if split != (">= 0:" in ir) or (heavy and args[4]) != ("heaviest first" in ir):
        raise SystemExit(f"split={split} heavy={heavy}: the IR does not show what was asked")
    return kernel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    a = ap.parse_args()
    torch.manual_seed(0)
    fa = load("flash_attn_fwd")
    B, H, S, D = 8, 32, 4096, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    print(f"{'kernel':46} {'A TF/s':>7} {'B TF/s':>7} {'C TF/s':>7} {'SDPA':>7} {'B/A':>6} {'C/A':>6}  outputs")
    for causal in (True, False):
        flops = 4 * B * H * S * S * D // (2 if causal else 1)
        sdpa = min(bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                         trials=a.trials)[0] for _ in range(2))
        for schedule in (TUNED_FA, {}):
            sched = tuple(schedule.get(x, d) for x, d in
                          (("block_M", 128), ("block_N", 64), ("num_stages", 2), ("threads", 256)))
            args = (B, H, S, D, causal) + sched
            sides = [compiled(fa, args), compiled(fa, args, split=False)] + \
                ([compiled(fa, args, heavy=False)] if causal else [])
            outs = [kern(q, k, v) for kern in sides]
            torch.cuda.synchronize()
            same = ", ".join("identical" if torch.equal(outs[0], o) else
                             f"max |A-{n}| {(outs[0].float() - o.float()).abs().max():.3g}"
                             for n, o in zip("BC", outs[1:]))
            times = [[] for _ in sides]
            for _ in range(3):  # alternate the sides
                for n, kern in enumerate(sides):
                    times[n].append(bench(lambda: kern(q, k, v), trials=a.trials)[0])
            t = [sorted(x)[1] for x in times] + [float("nan")] * (3 - len(sides))
            label = f"flash_attn{' causal' if causal else ''} {'/'.join(map(str, sched))}"
            print(f"{label:46} {flops / t[0] / 1e9:7.1f} {flops / t[1] / 1e9:7.1f} {flops / t[2] / 1e9:7.1f} "
                  f"{flops / sdpa / 1e9:7.1f} {t[1] / t[0]:6.3f} {t[2] / t[0]:6.3f}  {same}", flush=True)


if __name__ == "__main__":
    main()
