"""Variants of the RMSNorm+SiLU DSL program, timed side by side with a device copy (what the example should be).

Usage (CUDA machine): python bench/rmsnorm_variants.py [--cs 96,320,1024,4096] [--m 262144]
Variants: "example" (the schedule of prompts/examples/rmsnorm_silu.py, SiLU through exp2), "sigmoid" (T.sigmoid),
"gamma_global" (gamma read in the loop, no fragment), "rows_half" / "rows_x2" (half / twice the rows per block),
"threads256" (256 threads, the same values per thread), "fast_math" (the example with tl.enable_fast_math). Also times each compile stage of the example (frontend+lowering+codegen, NVRTC, module load).
"""



import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileagent  # noqa: E402
import tileagent.language as T  # noqa: E402
from bench.memory_bound import bench, load  # noqa: E402



def program(C, block_m, threads, gamma_fragment=True, use_exp2=False, dtype="float16", eps=1e-5):
    M = T.dynamic("M")
    log2e = 1.4426950408889634

    @T.prim_func
    def main(X: T.Tensor((M, C), dtype), gamma: T.Tensor((C,), dtype), Y: T.Tensor((M, C), dtype)):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, C), "float32")
            g = T.alloc_fragment((C,), "float32")
            sq = T.alloc_fragment((block_m, C), "float32")
            rinv = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)
            if gamma_fragment:
                T.copy(gamma, g)
            for i, j in T.Parallel(block_m, C):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, rinv, dim=1)
            for i in T.Parallel(block_m):
                rinv[i] = T.rsqrt(rinv[i] / C + eps)
            for i, j in T.Parallel(block_m, C):
                gj = g[j] if gamma_fragment else T.cast(gamma[j], "float32")
                v = x[i, j] * rinv[i] * gj
                x[i, j] = v / (1.0 + T.exp2(-v * log2e)) if use_exp2 else v * T.sigmoid(v)
            T.copy(x, Y[bm * block_m, 0])

    return main


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cs", default="96,320,1024,4096")
    ap.add_argument("--m", type=int, default=262144)
    ap.add_argument("--fast", action="store_true", help="tl.enable_fast_math for every variant")
    args = ap.parse_args()
    rms = load("rmsnorm_silu")
    rows = []
    for C in [int(c) for c in args.cs.split(",")]:
        bm, th = rms.schedule(C)
        variants = {
            "example": dict(block_m=bm, threads=th, use_exp2=True),
            "sigmoid": dict(block_m=bm, threads=th),
            "gamma_global": dict(block_m=bm, threads=th, gamma_fragment=False, use_exp2=True),
            "rows_half": dict(block_m=max(1, bm // 2), threads=th, use_exp2=True),
            "rows_x2": dict(block_m=bm * 2, threads=th, use_exp2=True),
            "threads256": dict(block_m=bm * 2 if th == 128 else bm, threads=256, use_exp2=True),
            "threads64": dict(block_m=max(1, bm // 2), threads=64, use_exp2=True),
            "rows_x4": dict(block_m=bm * 4, threads=th, use_exp2=True),
            "fast_math": dict(block_m=bm, threads=th, use_exp2=True, fast_math=True),
        }
        x = torch.randn(args.m, C, device="cuda", dtype=torch.float16)
        g = torch.randn(C, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        copy = bench(lambda: y.copy_(x))[0]
        ref = rms.reference(x, g)
        for name, kw in variants.items():
            if name in ("rows_x4", "threads64") and C > 256:
                continue
            configs = {"tl.enable_fast_math": True} if kw.pop("fast_math", False) or args.fast else None
            kernel = tileagent.compile(program(C, **kw), out_idx=[2], pass_configs=configs)
            out = kernel(x, g)
            ok = torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-2)
            ms = bench(lambda: kernel(x, g))[0]
            rows.append((C, name, kw.get("block_m"), kw.get("threads"), ms, 100 * copy / ms, ok))
    stages = []
    for C in (352, 416, 480):
        t0 = time.perf_counter()
        func = program(C, *rms.schedule(C))
        from tileagent.compiler.check import check
        from tileagent.compiler.layout.infer import infer_layouts
        from tileagent.compiler.lower import lower
        from tileagent.compiler.runtime.launch import LoadedModule
        from tileagent.compiler.runtime.nvrtc import compile_to_cubin, device_arch
        from tileagent.compiler.targets.cuda import generate

        check(func)
        module = lower(func, infer_layouts(func))
        source = generate(module)
        t1 = time.perf_counter()
        cubin = compile_to_cubin(source, device_arch(), cache=False)
        t2 = time.perf_counter()
        LoadedModule(cubin)
        t3 = time.perf_counter()
        stages.append((C, t1 - t0, t2 - t1, t3 - t2, len(source.splitlines())))
    print(f"{'C':>5} {'variant':<13} {'block_m':>7} {'thr':>4} {'ms':>8} {'%copy':>6} ok")
    for C, name, bm, th, ms, pct, ok in rows:
        print(f"{C:>5} {name:<13} {bm:>7} {th:>4} {ms:>8.4f} {pct:>6.1f} {ok}")
    for C, a, b, c, n in stages:
        print(f"compile C={C}: python {a * 1e3:.0f} ms, nvrtc {b * 1e3:.0f} ms, load {c * 1e3:.1f} ms, {n} lines")


if __name__ == "__main__":
    main()
