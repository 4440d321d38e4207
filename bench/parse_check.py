"""Time the frontend (parse) and the semantic checks on the acceptance programs; target: flash_attn_fwd < 50 ms.

Usage: python bench/parse_check.py [--repeats 50] [--shared ../shared]
Prints a table of median / min per program; runs on the CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

from tileagent.compiler.check import check

CASES = {
    "flash_attn_fwd": ("flash_attn_fwd", dict(batch=8, heads=32, seq_len=4096, dim=128, is_causal=True)),
    "mla_decode": ("mla_decode", dict(batch=64, heads=128, seqlen_kv=8192, variant="fragment")),
    "gemm_relu": ("matmul", dict(M=4096, N=4096, K=4096, block_M=128, block_N=128, block_K=64)),
    "rmsnorm_silu": ("rmsnorm_silu", dict(M=262144, C=320)),
    "softmax": ("softmax", dict(M=16384, N=4096)),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = ap.parse_args()
    rows = []
    for name, (factory, kwargs) in CASES.items():
        spec = importlib.util.spec_from_file_location(name, args.shared / "examples" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        build = getattr(module, factory).fn  # the undecorated factory: parse every time, no jit cache
        parse_ms, check_ms = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            func = build(**kwargs)
            t1 = time.perf_counter()
            check(func)
            t2 = time.perf_counter()
            parse_ms.append((t1 - t0) * 1e3)
            check_ms.append((t2 - t1) * 1e3)
        total = [p + c for p, c in zip(parse_ms, check_ms)]
        rows.append((name, statistics.median(parse_ms), statistics.median(check_ms), statistics.median(total),
                     min(total)))
    print(f"{'program':<16}{'parse ms':>10}{'check ms':>10}{'total ms':>10}{'min ms':>9}   (median of {args.repeats})")
    for name, p, c, t, m in rows:
        print(f"{name:<16}{p:>10.2f}{c:>10.2f}{t:>10.2f}{m:>9.2f}")


if __name__ == "__main__":
    main()
