"""Same-run A/B of the example kernels: the kernel as built now (A) against B, in compile time and on the GPU.

Usage:
    python bench/cubin_ab.py --options=--Ofast-compile=min [--only LABEL,...] [--trials 30] [--dims M=16384,B=4]
    python bench/cubin_ab.py --old DIR [--only ...]      # B: DIR/<arch>/<label>.cu (bench/codegen_golden.py --dump)
    python bench/cubin_ab.py --options=... --compile-only [--arch sm_90a]    # no GPU: NVRTC CPU seconds only
    python bench/cubin_ab.py --ptx [--only ...]          # A: NVRTC's cubin, B: compiler.targets.ptx + ptxas

The kernels: bench/codegen_golden.py's (every example at its check() config), dynamic dimensions set by ``--dims``
(default M=16384, B=4, S=2048). B is the same source compiled with extra NVRTC options (``--options``, e.g.
``--Ofast-compile=min``), or the source of a ``--dump`` folder made at another commit (``--old``: only the labels whose
source differs from A's, and only when both sources declare the same kernels, signatures, grid, block and shared
memory, i.e. the same launch; others are skipped with the reason), or (``--ptx``) A is the CUDA C++ compiled by NVRTC
and B the module's PTX (``compiler.targets.ptx``, nvJitLink's ptxas; kernels it does not cover are skipped with the
reason; "cpu s" of B is the emitter's plus ptxas's). For each kernel: NVRTC CPU seconds of a fresh
compile of each side, then (with a GPU) the outputs of both on the same random inputs (bit for bit, or the largest
difference) and the median GPU time of each over ``--trials`` trials that alternate A and B (L2 flushed, host
overhead hidden as in bench/memory_bound.py), and B/A. The last line is the summary (median B/A of compile CPU and of
GPU time).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_DIMS = "M=16384,B=4,S=2048"
_KERNEL = re.compile(r'^// kernel .*$|^extern "C" __global__[^{]*\{$', re.M)  # launch comment, signature


def compile_cpu(source: str, arch: str, options: tuple) -> tuple[bytes, float]:
    """(cubin, NVRTC CPU seconds) of a fresh compile (no cache)."""
    from tileagent.compiler.runtime.nvrtc import compile_to_cubin

    t0 = time.process_time()
    cubin = compile_to_cubin(source, arch, options, cache=False)
    return cubin, time.process_time() - t0


def side_b(label: str, source: str, arch: str, options: tuple, a) -> tuple[str, tuple] | str:
    """(source, options) of side B, or why this label is skipped."""
    if a.options is not None:
        return source, (*options, *a.options.split())
    path = Path(a.old) / arch / (label.replace("/", "__") + ".cu")
    if not path.is_file():
        return f"no {path}"
    old = path.read_text()
    if old == source:
        return "same source"
    if _KERNEL.findall(old) != _KERNEL.findall(source):
        return "another launch (kernels, signature, grid, block or shared memory differ)"
    return old, options


def side_ptx(kernel, arch: str, options: tuple) -> tuple[str, tuple, tuple[bytes, float]] | str:
    """(PTX, options, (cubin, CPU seconds of the emitter and ptxas)) of side B with ``--ptx``, or why not."""
    from tileagent.compiler import passes
    from tileagent.compiler.runtime import register_target
    from tileagent.compiler.target import for_arch
    from tileagent.compiler.targets.ptx import PtxUnsupported, generate

    module = kernel.unit.module
    if module is None or kernel.target.arch != arch:
        module = passes.run(kernel.func, for_arch(arch, "sim"), kernel.options, until="lower_tile_ops").module
    t0 = time.process_time()
    try:
        ptx = generate(module, arch, fast_math="--use_fast_math" in options)
    except PtxUnsupported as e:
        return f"not covered by the PTX emitter: {e}"
    cubin = register_target.assemble(ptx, for_arch(arch), module.kernels)
    return ptx, options, (cubin, time.process_time() - t0)


def with_cubin(kernel, source: str, arch: str, options: tuple, cubin: bytes):
    """``kernel`` (a JITKernel) launching ``cubin``, compiled from ``source`` with ``options``, instead of its own."""
    from tileagent.compiler.backends import CudaBackend
    from tileagent.compiler.jit import JITKernel

    return JITKernel(kernel.func, kernel.out_idx, kernel.target, kernel.pass_configs, options=kernel.options,
                     backend=CudaBackend(kernel.unit.module, kernel.func, source, arch, options, cubin=cubin))


def random_inputs(func, out_idx, dims: dict):
    import torch

    from tileagent.compiler.ir.expr import Var

    args = []
    for k, p in enumerate(func.params):
        if k in out_idx or k in func.hidden:
            continue
        shape = [dims[d.name] if isinstance(d, Var) else int(d) for d in p.shape]
        dt = getattr(torch, str(p.dtype))
        t = torch.randn(shape, device="cuda").to(dt) if dt.is_floating_point else \
            torch.randint(0, 7, shape, device="cuda", dtype=dt)
        args.append(t)
    return args


def interleaved(fns, trials: int) -> list[float]:
    """Median GPU ms of each of ``fns`` over ``trials`` rounds that alternate their order."""
    import torch

    from bench.memory_bound import flush_l2

    for fn in fns:
        for _ in range(3):
            fn()
    times = [[] for _ in fns]
    for t in range(trials):
        order = list(range(len(fns))) if t % 2 == 0 else list(range(len(fns)))[::-1]
        for i in order:
            flush_l2()
            torch.cuda._sleep(1_000_000)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[i]()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end))
    return [statistics.median(x) for x in times]


def agreement(xs, ys) -> str:
    import torch

    worst = 0.0
    for x, y in zip(xs, ys):
        if torch.equal(x, y) or (x.is_floating_point() and torch.equal(torch.nan_to_num(x), torch.nan_to_num(y))):
            continue
        worst = max(worst, float((x.double() - y.double()).abs().nan_to_num(float("inf")).max()))
    return "identical" if worst == 0.0 else f"max |A-B| {worst:.3g}"


def main(argv=None) -> int:
    from bench import codegen_golden as G

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    side = ap.add_mutually_exclusive_group(required=True)
    side.add_argument("--options", help="extra NVRTC options of side B")
    side.add_argument("--old", help="a bench/codegen_golden.py --dump folder: side B's sources")
    side.add_argument("--ptx", action="store_true", help="side B: the PTX emitter and ptxas instead of NVRTC")
    ap.add_argument("--only", help="comma-separated labels (default: all)")
    ap.add_argument("--dims", default=DEFAULT_DIMS, help="values of dynamic dimensions, NAME=INT,...")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--compile-only", action="store_true", help="no GPU: compile times only")
    ap.add_argument("--arch", default="sm_90a", help="with --compile-only (else the GPU's)")
    a = ap.parse_args(argv)
    dims = {k: int(v) for k, v in (kv.split("=") for kv in a.dims.split(","))}
    labels = a.only.split(",") if a.only else list(G.KERNELS)
    unknown = [x for x in labels if x not in G.KERNELS]
    if unknown:
        ap.error(f"unknown labels {unknown}; known: {', '.join(G.KERNELS)}")

    import tileagent
    from tileagent.compiler.jit import nvrtc_options

    target = f"cpu:{a.arch}" if a.compile_only else "cuda"
    cpu_ratios, gpu_ratios = [], []
    print(f"{'kernel':34} {'A cpu s':>8} {'B cpu s':>8} {'A ms':>9} {'B ms':>9} {'B/A':>6}  outputs")
    for label in labels:
        where, stem, factory, args, kwargs = G.KERNELS[label]
        impl = getattr(G._load(where, stem), factory)
        func = impl.fn(*args, **kwargs)
        kernel = tileagent.compile(func, out_idx=impl.out_idx, target=target, pass_configs=impl.pass_configs)
        arch = a.arch if a.compile_only else kernel.target.arch
        source, options = kernel.get_kernel_source(), nvrtc_options(kernel.pass_configs)
        b = side_ptx(kernel, arch, options) if a.ptx else side_b(label, source, arch, options, a)
        if isinstance(b, str):
            print(f"{label:34} skipped: {b}", flush=True)
            continue
        cubin_a, cpu_a = compile_cpu(source, arch, options)
        cubin_b, cpu_b = b[2] if a.ptx else compile_cpu(b[0], arch, b[1])
        cpu_ratios.append(cpu_b / cpu_a)
        row = f"{label:34} {cpu_a:8.3f} {cpu_b:8.3f}"
        if a.compile_only:
            print(row + ("  (identical cubins)" if cubin_a == cubin_b else ""), flush=True)
            continue
        ka, kb = with_cubin(kernel, source, arch, options, cubin_a), with_cubin(kernel, b[0], arch, b[1], cubin_b)
        inputs = random_inputs(func, kernel.out_idx, dims)
        ins_a, ins_b = [t.clone() for t in inputs], [t.clone() for t in inputs]
        out_a, out_b = ka(*ins_a), kb(*ins_b)
        outs = lambda o: [] if o is None else list(o) if isinstance(o, tuple) else [o]  # noqa: E731
        same = agreement(ins_a + outs(out_a), ins_b + outs(out_b))
        ms_a, ms_b = interleaved([lambda: ka(*ins_a), lambda: kb(*ins_b)], a.trials)
        gpu_ratios.append(ms_b / ms_a)
        print(f"{row} {ms_a:9.4f} {ms_b:9.4f} {ms_b / ms_a:6.3f}  {same}", flush=True)
    if cpu_ratios:
        gpu = f", GPU time B/A median {statistics.median(gpu_ratios):.3f} (min {min(gpu_ratios):.3f}, max " \
              f"{max(gpu_ratios):.3f})" if gpu_ratios else ""
        print(f"{len(cpu_ratios)} kernels: NVRTC CPU B/A median {statistics.median(cpu_ratios):.3f}{gpu}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
