"""Thread-block clusters on or off, side by side in one process (issue 12): the tensor-core acceptance kernels that
``compiler.lower.cluster`` pairs by default (warp-specialized, even static grid along x).

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/cluster_ab.py [--rounds 3]
Each kernel is compiled twice from the same program, with ``TILEAGENT_ENABLE_CLUSTERS=0`` (single blocks) and as by
default; both are checked against torch (the GEMM against fp32 ``relu(a @ b)``, MLA decode against the example's
``reference``) on fresh inputs with poisoned outputs, then timed in alternation for ``--rounds`` rounds (L2 flushed,
medians; ``bench/memory_bound.bench``) with the baselines in each round: cuBLAS and relu(a@b) for the GEMMs.
Prints TFLOP/s per round and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.tensor_core import load  # noqa: E402

ENV = "TILEAGENT_ENABLE_CLUSTERS"


def both(fn):
    """(single blocks, as by default) kernels of the PrimFunc ``fn()`` for this GPU."""
    import tileagent

    out = []
    for value in ("0", None):
        if value is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = value
        out.append(tileagent.compile(fn(), out_idx=getattr(fn, "out_idx", None), target="cuda"))
    os.environ.pop(ENV, None)
    return out


def gemm_cases(gemm, sizes, dtypes):
    for dtype in dtypes:
        for n in sizes:
            def fn(n=n, dtype=dtype):
                return gemm.matmul.fn(n, n, n, 128, 128, 64, dtype=dtype)
            t = getattr(torch, dtype)
            a = torch.randn(n, n, device="cuda", dtype=t)
            b = torch.randn(n, n, device="cuda", dtype=t)
            c = torch.full((n, n), float("nan"), device="cuda", dtype=t)
            ref = torch.relu(a.float() @ b.float())

            def check(k, a=a, b=b, c=c, ref=ref):
                c.fill_(float("nan"))
                k(a, b, c)
                torch.testing.assert_close(c.float(), ref, rtol=2e-2, atol=0.5)

            baselines = {"cuBLAS": lambda a=a, b=b: torch.matmul(a, b),
                         "relu(a@b)": lambda a=a, b=b: torch.relu(a @ b)}
            yield (f"gemm_relu {n}^3 {dtype}", fn, check, lambda k, a=a, b=b, c=c: k(a, b, c), 2 * n ** 3,
                   baselines)


def mla_cases(mla, B=64, H=128, ctx=8192):
    q = torch.randn(B, H, 512, device="cuda", dtype=torch.float16)
    q_pe = torch.randn(B, H, 64, device="cuda", dtype=torch.float16)
    kv = torch.randn(B, ctx, 1, 512, device="cuda", dtype=torch.float16)
    k_pe = torch.randn(B, ctx, 1, 64, device="cuda", dtype=torch.float16)
    ref = mla.reference(q, q_pe, kv, k_pe)
    flops = 2 * B * H * ctx * (512 + 64) + 2 * B * H * ctx * 512
    for variant in ("shared", "fragment"):
        def fn(variant=variant):
            return mla.mla_decode.fn(B, H, ctx, variant=variant)
        fn.out_idx = mla.mla_decode.out_idx

        def check(k):
            torch.testing.assert_close(k(q, q_pe, kv, k_pe), ref, rtol=2e-2, atol=2e-2)

        yield (f"mla_decode {variant} B{B} H{H} ctx{ctx}", fn, check, lambda k: k(q, q_pe, kv, k_pe), flops, {})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    args = ap.parse_args()
    torch.manual_seed(0)
    gemm, mla = load("gemm_relu"), load("mla_decode")
    table = []
    for name, fn, check, call, flops, baselines in [*gemm_cases(gemm, args.sizes, args.dtypes), *mla_cases(mla)]:
        kernels = both(fn)
        clustered = ["clusters of" in k.get_ir("thread") for k in kernels]
        for k in kernels:
            check(k)
        times = {"single blocks": [], "clusters (default)": [], **{b: [] for b in baselines}}
        for _ in range(args.rounds):
            for label, k in zip(("single blocks", "clusters (default)"), kernels):
                times[label].append(bench(lambda k=k: call(k), trials=20)[0])
            for b, f in baselines.items():
                times[b].append(bench(f, trials=20)[0])
        med = {label: statistics.median(ts) for label, ts in times.items()}
        print(f"{name}: clustered {clustered}; " + ", ".join(
            f"{label} {' / '.join(f'{flops / t / 1e9:.1f}' for t in ts)}" for label, ts in times.items()), flush=True)
        table.append((name, {label: flops / t / 1e9 for label, t in med.items()},
                      med["single blocks"] / med["clusters (default)"]))
    print("\n| kernel | single blocks | clusters (default) | x single | cuBLAS | relu(a@b) |\n|---|---|---|---|---|---|")
    for name, tf, ratio in table:
        cells = [f"{tf[k]:.1f}" if k in tf else "-" for k in ("single blocks", "clusters (default)")]
        base = [f"{tf[k]:.1f}" if k in tf else "-" for k in ("cuBLAS", "relu(a@b)")]
        print(f"| {name} | {cells[0]} | {cells[1]} | {ratio:.3f} | {base[0]} | {base[1]} |")


if __name__ == "__main__":
    main()
