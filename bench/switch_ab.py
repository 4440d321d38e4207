"""A code-generation switch off or on, side by side in one process: the tensor-core acceptance kernels (the example
GEMM as written, the prompt's GEMM at 128 x 256 on two warpgroups, the same persistent, MLA decode, flash attention) compiled twice from
the same program, with ``--env VAR=VALUE`` set and without it (the default).

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/switch_ab.py --env TILEAGENT_STAGE_EPILOGUE=0
    [--rounds 3] [--sizes 4096 8192] [--dtypes float16 bfloat16] [--only gemm]
Both builds are checked against torch first (fresh inputs, NaN-poisoned outputs; ``bench/cluster_ab.py``'s cases),
then timed in alternation for ``--rounds`` rounds (L2 flushed, medians of 20; ``bench/memory_bound.bench``) with the
baselines in each round (cuBLAS and relu(a@b) for the GEMMs, SDPA for attention). The in-process compile caches key
on the switches (``compiler.module_cache.code_switches``, ``feature_switches``), so each build is compiled for its
setting.
Prints TFLOP/s per round and a table of the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cluster_ab import FA_BEST, fa_cases, gemm_cases, mla_cases, relu_gemm_case  # noqa: E402
from bench.memory_bound import bench  # noqa: E402
from bench.memory_bound import load as load_from  # noqa: E402
from bench.tensor_core import load  # noqa: E402


def wide_gemm_cases(sizes, dtypes):
    """The prompt's GEMM (prompts/examples/gemm_relu.py) at 128 x 256 x 64, 4 stages, 256 threads: the built-in
    template's tile."""
    mod = load_from("gemm_relu")
    for dtype in dtypes:
        for n in sizes:
            def fn(n=n, dtype=dtype):
                return mod.gemm_relu.fn(n, n, n, block_M=128, block_N=256, block_K=64, num_stages=4, threads=256,
                                        dtype=dtype)
            fn.out_idx = mod.gemm_relu.out_idx
            t = getattr(torch, dtype)
            a, b = torch.randn(n, n, device="cuda", dtype=t), torch.randn(n, n, device="cuda", dtype=t)
            ref = torch.relu(a.float() @ b.float())

            def check(k, a=a, b=b, ref=ref):
                torch.testing.assert_close(k(a, b).float(), ref, rtol=2e-2, atol=0.5)

            baselines = {"cuBLAS": lambda a=a, b=b: torch.matmul(a, b),
                         "relu(a@b)": lambda a=a, b=b: torch.relu(a @ b)}
            yield f"prompt gemm 128x256 {n}^3 {dtype}", fn, check, lambda k, a=a, b=b: k(a, b), 2 * n ** 3, baselines


def persistent_gemm(n: int, dtype: str, blocks: int):
    """relu(A @ B) on 128 x 256 x 64 tiles, 4 stages, 256 threads, ``blocks`` blocks walking the tiles
    (T.Persistent, panels of 8 along M): the built-in template's persistent schedule."""
    import tileagent.language as T

    @T.prim_func
    def main(A: T.Tensor((n, n), dtype), B: T.Tensor((n, n), dtype), C: T.Tensor((n, n), dtype)):
        with T.Kernel(blocks, threads=256) as b:
            A_s = T.alloc_shared((128, 64), dtype)
            B_s = T.alloc_shared((64, 256), dtype)
            acc = T.alloc_fragment((128, 256), "float32")
            for by, bx in T.Persistent([T.ceildiv(n, 128), T.ceildiv(n, 256)], blocks, b, group_size=8):
                T.clear(acc)
                for k in T.Pipelined(T.ceildiv(n, 64), num_stages=4):
                    T.copy(A[by * 128, k * 64], A_s)
                    T.copy(B[k * 64, bx * 256], B_s)
                    T.gemm(A_s, B_s, acc)
                for i, j in T.Parallel(128, 256):
                    acc[i, j] = T.max(acc[i, j], 0)
                T.copy(acc, C[by * 128, bx * 256])

    return main


def persistent_cases(sizes, dtypes):
    blocks = torch.cuda.get_device_properties(0).multi_processor_count
    for dtype in dtypes:
        for n in sizes:
            yield relu_gemm_case(f"persistent gemm 128x256 {n}^3 {dtype}",
                                 lambda n=n, dtype=dtype: persistent_gemm(n, dtype, blocks), n, dtype)


def both(fn, var: str, value: str):
    """(the kernel built with ``var=value``, the kernel built by default) from the PrimFunc ``fn()``."""
    import tileagent

    def build():
        return tileagent.compile(fn(), out_idx=getattr(fn, "out_idx", None), target="cuda")

    saved = os.environ.pop(var, None)
    try:
        os.environ[var] = value
        switched = build()
        os.environ.pop(var)
        return switched, build()
    finally:
        if saved is not None:
            os.environ[var] = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", required=True, help="VAR=VALUE: the setting compared with the default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--only", nargs="*", default=["gemm", "prompt", "mla", "flash"],
                    help="case families: gemm (the example), prompt (128 x 256), persistent (128 x 256, one block "
                         "per SM), mla, flash (the example's schedules), flash_best (128/128/3/256)")
    args = ap.parse_args()
    var, _, value = args.env.partition("=")
    torch.manual_seed(0)
    cases = []
    if "gemm" in args.only:
        cases += gemm_cases(load("gemm_relu"), args.sizes, args.dtypes)
    if "prompt" in args.only:
        cases += wide_gemm_cases(args.sizes, args.dtypes)
    if "persistent" in args.only:
        cases += persistent_cases(args.sizes, args.dtypes)
    if "mla" in args.only:
        cases += mla_cases(load("mla_decode"))
    if "flash" in args.only:
        cases += fa_cases(load("flash_attn_fwd"))
    if "flash_best" in args.only:
        cases += fa_cases(load("flash_attn_fwd"), schedules=FA_BEST)
    labels = (args.env, "default")
    table = []
    for name, fn, check, call, flops, baselines in cases:
        kernels = both(fn, var, value)
        for k in kernels:
            check(k)
        times = {**{label: [] for label in labels}, **{b: [] for b in baselines}}
        for _ in range(args.rounds):
            for label, k in zip(labels, kernels):
                times[label].append(bench(lambda k=k: call(k), trials=20)[0])
            for b, f in baselines.items():
                times[b].append(bench(f, trials=20)[0])
        med = {label: statistics.median(ts) for label, ts in times.items()}
        print(f"{name}: " + ", ".join(f"{label} {' / '.join(f'{flops / t / 1e9:.1f}' for t in ts)}"
                                      for label, ts in times.items()), flush=True)
        table.append((name, {label: flops / t / 1e9 for label, t in med.items()}, med[labels[0]] / med[labels[1]]))
    print(f"\n| kernel | {labels[0]} | default | x {labels[0]} | cuBLAS | relu(a@b) | SDPA | default / best baseline |\n"
          "|---|---|---|---|---|---|---|---|")
    for name, tf, ratio in table:
        cells = [f"{tf[k]:.1f}" if k in tf else "-" for k in (*labels, "cuBLAS", "relu(a@b)", "SDPA")]
        best = max(tf[k] for k in ("cuBLAS", "relu(a@b)", "SDPA") if k in tf) if len(tf) > 2 else None
        vs = f"{tf['default'] / best:.3f}" if best else "-"
        print(f"| {name} | {cells[0]} | {cells[1]} | {ratio:.3f} | {' | '.join(cells[2:])} | {vs} |")


if __name__ == "__main__":
    main()
