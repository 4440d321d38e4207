"""Tensor-core examples on the GPU: correctness at the sizes of each example's check(), then TFLOP/s next to
cuBLAS (torch.matmul), relu(a @ b), and SDPA, all timed in this run.

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/tensor_core.py [--quick]
The acceptance programs are read from $TILEAGENT_SHARED/examples (the device machine gets a carried copy).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.memory_bound import load as load_from

SHARED = Path(os.environ.get("TILEAGENT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "examples"


def load(name: str):
    return load_from(name, SHARED)


# the best schedules of bench/flash_attn_sweep.py (block_M, block_N, num_stages, threads; BENCHMARKS.md): 128 x 128
# tiles with P @ V deferred past the next Q @ K^T on two split stages (non-causal; 3 stages before round 2 session
# 34), and the 128/64/2/128 of the mma.sync path
TUNED_FA = ({"block_M": 128, "block_N": 128, "num_stages": 2, "threads": 256},
            {"block_M": 128, "block_N": 128, "num_stages": 3, "threads": 256},
            {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 128})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller timing sizes")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    gemm, fa, mla = load("gemm_relu"), load("flash_attn_fwd"), load("mla_decode")
    checks = [("gemm_relu", lambda: gemm.check()), ("flash_attn_fwd", lambda: fa.check(seq_len=1000)),
              ("flash_attn_fwd causal", lambda: fa.check(seq_len=1000, is_causal=True)),
              ("mla_decode shared", lambda: mla.check()), ("mla_decode fragment", lambda: mla.check(variant="fragment"))]
    for name, fn in checks:
        try:
            fn()
            print(f"check {name}: ok", flush=True)
        except Exception as e:  # noqa: BLE001 -- report and go on to the next example
            print(f"check {name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
    for n, dtype in itertools.product((2048,) if args.quick else (4096, 8192), (torch.float16, torch.bfloat16)):
        kernel = gemm.matmul(n, n, n, block_M=128, block_N=128, block_K=64, dtype=str(dtype).split(".")[1])
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        c = torch.full((n, n), float("nan"), device="cuda", dtype=dtype)  # poisoned: every element must be written
        kernel(a, b, c)
        torch.testing.assert_close(c, torch.relu(a.float() @ b.float()).to(dtype), rtol=2e-2, atol=2e-1)
        flops = 2 * n ** 3
        ours = bench(lambda: kernel(a, b, c), trials=10)[0]
        cublas = bench(lambda: torch.matmul(a, b), trials=10)[0]
        relu = bench(lambda: torch.relu(a @ b), trials=10)[0]
        rows.append((f"gemm_relu {n}^3 {str(dtype)[6:]}", flops / ours / 1e9, flops / cublas / 1e9, flops / relu / 1e9,
                     "cuBLAS"))
    B, H, S, D = (2, 8, 2048, 128) if args.quick else (8, 32, 4096, 128)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    for causal, schedule in ((False, {}), *((c, s) for c in (False, True) for s in TUNED_FA)):
        small = fa.flash_attn_fwd(1, 2, 1000, D, causal, **schedule)  # each schedule checked before it is timed
        xs = [torch.randn(1, 1000, 2, D, device="cuda", dtype=torch.float16) for _ in range(3)]
        torch.testing.assert_close(small(*xs), fa.reference(*xs, causal), rtol=1e-2, atol=1e-2)
        kernel = fa.flash_attn_fwd(B, H, S, D, causal, **schedule)
        flops = 4 * B * H * S * S * D // (2 if causal else 1)
        ours = bench(lambda: kernel(q, k, v), trials=10)[0]
        sdpa = min(bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                         trials=10)[0] for _ in range(3))  # its fastest of three medians: SDPA drifts by ~10%
        label = "/".join(str(x) for x in schedule.values()) if schedule else "default"
        rows.append((f"flash_attn{' causal' if causal else ''} B{B} H{H} S{S} D{D} {label}", flops / ours / 1e9,
                     flops / sdpa / 1e9, None, "SDPA"))
    B, Hh, ctx = (8, 128, 2048) if args.quick else (64, 128, 8192)
    for variant in ("shared", "fragment"):
        kernel = mla.mla_decode(B, Hh, ctx, variant=variant)
        q = torch.randn(B, Hh, 512, device="cuda", dtype=torch.float16)
        q_pe = torch.randn(B, Hh, 64, device="cuda", dtype=torch.float16)
        kv = torch.randn(B, ctx, 1, 512, device="cuda", dtype=torch.float16)
        k_pe = torch.randn(B, ctx, 1, 64, device="cuda", dtype=torch.float16)
        flops = 2 * B * Hh * ctx * (512 + 64) + 2 * B * Hh * ctx * 512
        ours = bench(lambda: kernel(q, q_pe, kv, k_pe), trials=10)[0]
        rows.append((f"mla_decode {variant} B{B} H{Hh} ctx{ctx}", flops / ours / 1e9, None, None, "-"))
    print(f"\n{'case':<52} {'ours TFLOP/s':>12} {'baseline':>10} {'relu(a@b)':>10} {'ours/base':>9}  baseline")
    for name, ours, base, relu, label in rows:
        ratio = "" if base is None else f"{100 * ours / base:.1f}%"
        print(f"{name:<52} {ours:>12.1f} {base if base is None else round(base, 1)!s:>10} "
              f"{relu if relu is None else round(relu, 1)!s:>10} {ratio:>9}  {label}")


if __name__ == "__main__":
    main()
