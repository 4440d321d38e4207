"""Schedules of the shared flash_attn_fwd example (the kernel text as written, its parameters varied) next to SDPA.

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/flash_attn_sweep.py [--causal]
                                                                        [--schedule 128,32,2,128 ...]
Each schedule is checked against the example's reference at seq_len 1000 before it is timed at B8 H32 S4096 D128.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.tensor_core import load  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--schedule", action="append", default=[],
                    help="block_M,block_N,num_stages,threads (repeatable; default: a grid of 36)")
    args = ap.parse_args()
    grid = [tuple(int(x) for x in s.split(",")) for s in args.schedule] or \
        list(itertools.product((64, 128), (32, 64, 128), (1, 2, 3), (128, 256)))
    fa = load("flash_attn_fwd")
    B, H, S, D = 8, 32, 4096, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    flops = 4 * B * H * S * S * D // (2 if args.causal else 1)
    sdpa = bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal),
                 trials=10)[0]
    rows = []
    for bm, bn, stages, threads in grid:
        name = f"block_M={bm} block_N={bn} num_stages={stages} threads={threads}"
        try:
            small = fa.flash_attn_fwd(1, 2, 1000, D, args.causal, block_M=bm, block_N=bn, num_stages=stages,
                                      threads=threads)
            xs = [torch.randn(1, 1000, 2, D, device="cuda", dtype=torch.float16) for _ in range(3)]
            torch.testing.assert_close(small(*xs), fa.reference(*xs, args.causal), rtol=1e-2, atol=1e-2)
            kernel = fa.flash_attn_fwd(B, H, S, D, args.causal, block_M=bm, block_N=bn, num_stages=stages,
                                       threads=threads)
            ms = bench(lambda: kernel(q, k, v), trials=10)[0]
            rows.append((flops / ms / 1e9, name))
            print(f"{name}: {flops / ms / 1e9:.1f} TFLOP/s", flush=True)
        except Exception as e:  # noqa: BLE001 -- a schedule that does not build or fit is reported and skipped
            print(f"{name}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:120]})", flush=True)
    print(f"\nSDPA: {flops / sdpa / 1e9:.1f} TFLOP/s")
    for tf, name in sorted(rows, reverse=True)[:5]:
        print(f"{tf:7.1f} TFLOP/s  {100 * tf / (flops / sdpa / 1e9):5.1f}% of SDPA  {name}")


if __name__ == "__main__":
    main()
