"""Host time of one kernel call from Python: TileAgent next to real TileLang and torch, on the same program.

Usage (on a CUDA machine):
    python bench/host_overhead.py                        # TileAgent (``import tilelang`` resolved to it)
    PYTHONPATH=/tmp/tl python bench/host_overhead.py --impl tilelang   # real TileLang (tools/tilelang-on-device.sh)
    [--profile]  also print the 15 costliest functions of 2000 TileAgent calls (cProfile)

The program is TileLang's own LayerNorm forward (bench/tilelang_examples/norm/layernorm.py, ``_layernorm_fwd``) at
N=4096, D=8192 bf16 as its example runs it, and a one-row copy kernel (the smallest launch). Per program:
- ``host_us``: the stream kept busy (``torch.cuda._sleep``), the wall time of 300 calls from Python divided by 300:
  what a call costs the host, GPU time excluded;
- ``factory_us``: the same for ``factory(N, D, ...)(x, ...)`` as the example calls it each time (the @jit cache
  lookup included);
- ``gpu_ms``: median GPU time (L2 flushed, host overhead excluded, ``bench/memory_bound.bench``);
- ``loop_ms``: wall time per call of 200 calls back to back, synchronized at the end: what TileLang's
  ``do_bench(backend="event")`` sees, the larger of host and GPU time per call.
torch's ``F.layer_norm`` is timed the same way for reference. One JSON line per program; a table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def per_call_host_us(fn, calls: int = 300) -> float:
    """Wall microseconds per call while the GPU is busy with a long sleep (the calls only enqueue)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9))  # ~1 s of GPU time: longer than the calls take to enqueue
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def loop_ms(fn, calls: int = 200) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e3


def load_example():
    path = REPO / "bench" / "tilelang_examples" / "norm" / "layernorm.py"
    spec = importlib.util.spec_from_file_location("tl_layernorm_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_factory(T, jit):
    @jit(out_idx=[1])
    def row_copy(D, dtype="float16"):
        @T.prim_func
        def main(X: T.Tensor((1, D), dtype), Y: T.Tensor((1, D), dtype)):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_fragment((1, D), dtype)
                T.copy(X[bx, 0], s)
                T.copy(s, Y[bx, 0])

        return main

    return row_copy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=("tileagent", "tilelang"), default="tileagent")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.impl == "tileagent":
        from tileagent import compat

        compat.install()
    import tilelang
    import tilelang.language as T

    from bench.memory_bound import bench

    example = load_example()
    rows = []
    N, D, eps = 4096, 8192, 1e-5
    x = torch.randn(N, D, dtype=torch.bfloat16, device="cuda")
    g = torch.randn(D, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(D, dtype=torch.bfloat16, device="cuda")
    fwd = example._layernorm_fwd
    kernel = fwd(N, D, eps=eps, in_dtype="bfloat16", out_dtype="bfloat16")
    y = kernel(x, g, b)[0]
    ref = torch.nn.functional.layer_norm(x.float(), (D,), g.float(), b.float(), eps).to(x.dtype)
    torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)
    cases = [("layernorm_fwd 4096x8192", lambda: kernel(x, g, b),
              lambda: fwd(N, D, eps=eps, in_dtype="bfloat16", out_dtype="bfloat16")(x, g, b))]
    row_copy = copy_factory(T, tilelang.jit)
    small = torch.randn(1, 1024, dtype=torch.float16, device="cuda")
    ck = row_copy(1024)
    assert torch.equal(ck(small), small)
    cases.append(("row copy 1x1024", lambda: ck(small), lambda: row_copy(1024)(small)))
    for name, call, factory_call in cases:
        row = dict(impl=args.impl, program=name, host_us=per_call_host_us(call),
                   factory_us=per_call_host_us(factory_call), gpu_ms=bench(call)[0], loop_ms=loop_ms(call))
        rows.append(row)
        print(json.dumps(row), flush=True)
    torch_ln = lambda: torch.nn.functional.layer_norm(x, (D,), g, b, eps)  # noqa: E731
    rows.append(dict(impl="torch", program="F.layer_norm 4096x8192", host_us=per_call_host_us(torch_ln),
                     factory_us=float("nan"), gpu_ms=bench(torch_ln)[0], loop_ms=loop_ms(torch_ln)))
    print(json.dumps(rows[-1]), flush=True)
    if args.profile and args.impl == "tileagent":
        import cProfile
        import pstats

        prof = cProfile.Profile()
        torch.cuda._sleep(int(4e9))
        prof.enable()
        for _ in range(2000):
            fwd(N, D, eps=eps, in_dtype="bfloat16", out_dtype="bfloat16")(x, g, b)
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    print(f"\n| impl | program | host us/call | factory+call us | GPU ms | loop ms/call |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['impl']} | {r['program']} | {r['host_us']:.1f} | {r['factory_us']:.1f} | {r['gpu_ms']:.4f} | "
              f"{r['loop_ms']:.4f} |")


if __name__ == "__main__":
    main()
