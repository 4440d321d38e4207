"""Thread-block clusters on or off, side by side in one process (issue 12): the tensor-core acceptance kernels that
``compiler.lower.cluster`` pairs by default (warp-specialized, even static grid along x), and flash attention, which it
leaves single (paired here through the CUDA post-processing hook, to see whether it should).

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/cluster_ab.py [--rounds 3]
Each kernel is compiled twice from the same program, with ``TILEAGENT_ENABLE_CLUSTERS=0`` (single blocks) and as by
default; both are checked against torch (the GEMM against fp32 ``relu(a @ b)``, MLA decode against the example's
``reference``) on fresh inputs with poisoned outputs, then timed in alternation for ``--rounds`` rounds (L2 flushed,
medians; ``bench/memory_bound.bench``) with the baselines in each round: cuBLAS and relu(a@b) for the GEMMs, SDPA
for attention (checked against it too).
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


def pair_blocks(source: str, target=None) -> str:
    """A kernel's CUDA launched in 2-block clusters along x (nothing shared): for kernels the default leaves single."""
    return source.replace('extern "C" __global__ void ', 'extern "C" __global__ void __cluster_dims__(2, 1, 1) ', 1)


def both(fn):
    """(single blocks, 2-block clusters, how) kernels of the PrimFunc ``fn()`` for this GPU: clusters as by default,
    or, where the default leaves the kernel single, through the CUDA post-processing hook (``pair_blocks``)."""
    import tileagent
    from tileagent.compiler.runtime.hooks import set_cuda_postproc

    def build():
        return tileagent.compile(fn(), out_idx=getattr(fn, "out_idx", None), target="cuda")

    os.environ[ENV] = "0"
    single = build()
    os.environ.pop(ENV, None)
    paired = build()
    if "clusters of" in paired.get_ir("thread"):
        return single, paired, "default"
    set_cuda_postproc(pair_blocks)
    try:
        return single, build(), "hook"
    finally:
        set_cuda_postproc(None)


def relu_gemm_case(label: str, fn, n: int, dtype: str) -> tuple:
    """(label, fn, check, call, flops, baselines) for a kernel built from ``fn()`` that writes relu(A @ B) into its
    third argument at n^3: checked against fp32 on fresh inputs with a NaN-poisoned output; cuBLAS and relu(a@b)."""
    t = getattr(torch, dtype)
    a = torch.randn(n, n, device="cuda", dtype=t)
    b = torch.randn(n, n, device="cuda", dtype=t)
    c = torch.full((n, n), float("nan"), device="cuda", dtype=t)
    ref = torch.relu(a.float() @ b.float())

    def check(k):
        c.fill_(float("nan"))
        k(a, b, c)
        torch.testing.assert_close(c.float(), ref, rtol=2e-2, atol=0.5)

    baselines = {"cuBLAS": lambda: torch.matmul(a, b), "relu(a@b)": lambda: torch.relu(a @ b)}
    return label, fn, check, lambda k: k(a, b, c), 2 * n ** 3, baselines


def gemm_cases(gemm, sizes, dtypes):
    for dtype in dtypes:
        for n in sizes:
            yield relu_gemm_case(f"gemm_relu {n}^3 {dtype}",
                                 lambda n=n, dtype=dtype: gemm.matmul.fn(n, n, n, 128, 128, 64, dtype=dtype), n, dtype)


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


FA_SCHEDULES = ((False, {}), (False, {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 128}),
                (True, {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 128}))
# the H200's best in bench/flash_attn_sweep.py since the deferred P @ V (compiler/lower/defer_gemm.py)
FA_BEST = tuple((causal, {"block_M": 128, "block_N": 128, "num_stages": 3, "threads": 256}) for causal in (False, True))


def fa_cases(fa, B=8, H=32, S=4096, D=128, schedules=FA_SCHEDULES):
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    for causal, schedule in schedules:
        def fn(causal=causal, schedule=schedule):
            return fa.flash_attn_fwd.fn(B, H, S, D, causal, **schedule)
        fn.out_idx = fa.flash_attn_fwd.out_idx
        ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)

        def check(kern, ref=ref):
            torch.testing.assert_close(kern(q, k, v), ref, rtol=2e-2, atol=2e-2)

        label = "/".join(str(x) for x in schedule.values()) or "example schedule"
        sdpa = {"SDPA": lambda causal=causal: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt,
                                                                                              is_causal=causal)}
        yield (f"flash_attn{' causal' if causal else ''} {label}", fn, check, lambda kern: kern(q, k, v),
               4 * B * H * S * S * D // (2 if causal else 1), sdpa)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    args = ap.parse_args()
    torch.manual_seed(0)
    gemm, mla, fa = load("gemm_relu"), load("mla_decode"), load("flash_attn_fwd")
    table = []
    for name, fn, check, call, flops, baselines in [*gemm_cases(gemm, args.sizes, args.dtypes), *mla_cases(mla),
                                                    *fa_cases(fa)]:
        *kernels, how = both(fn)
        for k in kernels:
            check(k)
        times = {"single blocks": [], "2-block clusters": [], **{b: [] for b in baselines}}
        for _ in range(args.rounds):
            for label, k in zip(("single blocks", "2-block clusters"), kernels):
                times[label].append(bench(lambda k=k: call(k), trials=20)[0])
            for b, f in baselines.items():
                times[b].append(bench(f, trials=20)[0])
        med = {label: statistics.median(ts) for label, ts in times.items()}
        print(f"{name}: clusters {how}; " + ", ".join(
            f"{label} {' / '.join(f'{flops / t / 1e9:.1f}' for t in ts)}" for label, ts in times.items()), flush=True)
        table.append((name, how, {label: flops / t / 1e9 for label, t in med.items()},
                      med["single blocks"] / med["2-block clusters"]))
    print("\n| kernel | single blocks | 2-block clusters | clusters by | x single | cuBLAS | relu(a@b) | SDPA |\n"
          "|---|---|---|---|---|---|---|---|")
    for name, how, tf, ratio in table:
        cells = [f"{tf[k]:.1f}" if k in tf else "-" for k in ("single blocks", "2-block clusters", "cuBLAS",
                                                               "relu(a@b)", "SDPA")]
        print(f"| {name} | {cells[0]} | {cells[1]} | {how} | {ratio:.3f} | {' | '.join(cells[2:])} |")


if __name__ == "__main__":
    main()
