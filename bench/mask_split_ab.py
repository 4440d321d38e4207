"""Same-run A/B of split masks (compiler.desugar.split_masks) on flash attention: the shared example as written, with
the mask tested once per tile (A, the default) and with the per-element select on every tile (B, the rewrite off).

Usage (H200): TILEAGENT_SHARED=/path/to/shared python bench/mask_split_ab.py [--trials 20]
For causal and non-causal flash_attn_fwd at B8 H32 S4096 D128 (the schedule bench/tensor_core.py times, 128/64/2/128,
and the example's default), both sides are compiled in this process (each into its own module-cache folder, since
the rewrite is not part of the cache key), their outputs compared element for element on the same inputs (they must
be identical: the rewrite keeps every value), then timed in alternating trials (CUDA events, L2 flushed, medians;
bench.memory_bound.bench) next to SDPA. Prints TFLOP/s of A, B, SDPA and B/A time.
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


def compiled(fa, args, split: bool):
    """The kernel of ``fa.flash_attn_fwd.fn(*args)`` with masks split (A) or not (B), in a fresh module cache."""
    import tileagent
    from tileagent.compiler import desugar

    os.environ["TILEAGENT_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"mask_ab_{'a' if split else 'b'}_")
    real = desugar.split_masks
    if not split:
        desugar.split_masks = lambda func: func
    try:
        kernel = tileagent.compile(fa.flash_attn_fwd.fn(*args), out_idx=[3])
        tests = kernel.get_ir("thread").count(">= 0:")  # (the cpu target lowers here, on demand)
    finally:
        desugar.split_masks = real
    if split != bool(tests):
        raise SystemExit(f"side {'A' if split else 'B'}: expected {'a' if split else 'no'} split mask in the IR")
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
    print(f"{'kernel':52} {'A TF/s':>8} {'B TF/s':>8} {'SDPA':>8} {'B/A time':>9}  outputs")
    for causal in (True, False):
        flops = 4 * B * H * S * S * D // (2 if causal else 1)
        sdpa = min(bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                         trials=a.trials)[0] for _ in range(2))
        for schedule in (TUNED_FA, {}):
            sched = tuple(schedule.get(x, d) for x, d in
                          (("block_M", 128), ("block_N", 64), ("num_stages", 2), ("threads", 256)))
            args = (B, H, S, D, causal) + sched
            ka, kb = compiled(fa, args, True), compiled(fa, args, False)
            oa, ob = ka(q, k, v), kb(q, k, v)
            torch.cuda.synchronize()
            same = "identical" if torch.equal(oa, ob) else f"max |A-B| {(oa.float() - ob.float()).abs().max():.3g}"
            ta, tb = [], []
            for _ in range(3):  # alternate the sides
                ta.append(bench(lambda: ka(q, k, v), trials=a.trials)[0])
                tb.append(bench(lambda: kb(q, k, v), trials=a.trials)[0])
            ta, tb = sorted(ta)[1], sorted(tb)[1]
            label = f"flash_attn{' causal' if causal else ''} {'/'.join(map(str, sched))}"
            print(f"{label:52} {flops / ta / 1e9:8.1f} {flops / tb / 1e9:8.1f} {flops / sdpa / 1e9:8.1f} "
                  f"{tb / ta:9.3f}  {same}", flush=True)


if __name__ == "__main__":
    main()
