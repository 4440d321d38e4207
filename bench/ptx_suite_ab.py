"""Same-run A/B of the PTX target on the built-in drafter's kernels: for every op of bench/suite, each kernel its first
draft's forward launches at the op's first config, NVRTC's cubin (A) against ptxas on our PTX (B).

Usage (on a CUDA machine): python bench/ptx_suite_ab.py [--ops a,b,...] [--trials 30] [--budget SECONDS]

bench/cubin_ab.py --ptx compares the example kernels on random inputs; the drafter's kernels are most of what the PTX
target compiles in practice (24 of the 33 suite ops go through it entirely), so they are compared here on the
arguments their own forward passes them (the reference's inputs at the op's first config, its parameters copied into
ModelNew). Per kernel: outputs of both (bit for bit, or the largest difference) and the median GPU time of each over
``--trials`` trials that alternate A and B (L2 flushed, host overhead hidden: ``cubin_ab.interleaved``), and B/A;
a kernel the emitter does not cover is listed with the reason. The last line: median, min and max of B/A.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SUITE = REPO / "bench" / "suite"


def forward_calls(path: Path, tmp: Path) -> list:
    """[(JITKernel, its arguments)] of each kernel the op's first draft launches in one forward at its first config,
    in launch order, one entry per kernel."""
    import torch

    from bench.memory_bound import load
    from tileagent.compiler.jit import JITKernel
    from tileagent.drafters.base import DraftTask
    from tileagent.drafters.builtin import BuiltinDrafter
    from tileagent.evaluator.spec import load_spec

    draft = BuiltinDrafter().draft(DraftTask(task_name=path.stem, reference_path=str(path),
                                             reference_source=path.read_text(), configs=[], turn=1))[0]
    (tmp / f"{path.stem}_candidate.py").write_text(draft.source)
    module = load(f"{path.stem}_candidate", tmp)
    spec = load_spec(path)
    config = spec.configs[0]
    init = spec.init_inputs(config)
    ref = spec.module.Model(*init).cuda().eval()
    new = module.ModelNew(*init).cuda().eval()
    new.load_state_dict(ref.state_dict(), strict=False)
    inputs = [t.to(spec._input_dtype(k, t)) for k, t in enumerate(spec.sample_inputs(config, 0, "cuda"))]
    calls, launch = {}, JITKernel.__call__

    def record(kernel, *args):  # the arguments as the kernel got them, before it writes any
        calls.setdefault(id(kernel), (kernel, [a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
        return launch(kernel, *args)

    JITKernel.__call__ = record
    try:
        with torch.no_grad():
            new(*inputs)
    finally:
        JITKernel.__call__ = launch
    return list(calls.values())


def ab_kernel(kernel, args: list, trials: int, minncta: int | None = None) -> tuple[str, float] | str:
    """(the row's figures, B/A) of one kernel, or why it is skipped. ``minncta``: a third side C, B's PTX with
    ``.minnctapersm <minncta>`` on every kernel (0: none) instead of compiler.runtime.register_target's choice, and
    its C/A."""
    import torch

    from bench.cubin_ab import agreement, compile_cpu, interleaved, side_ptx, with_cubin
    from tileagent.compiler.jit import nvrtc_options
    from tileagent.compiler.runtime.ptxas import ptx_to_cubin

    arch, options = kernel.target.arch, nvrtc_options(kernel.pass_configs)
    b = side_ptx(kernel, arch, options)
    if isinstance(b, str):
        return b
    source = kernel.get_kernel_source()
    cubin_a, _ = compile_cpu(source, arch, options)
    sides = [with_cubin(kernel, source, arch, options, cubin_a), with_cubin(kernel, b[0], arch, b[1], b[2][0])]
    if minncta is not None:
        ptx_c = re.sub(r"(\n\.maxntid [^\n]*\n)", rf"\1.minnctapersm {minncta}\n" if minncta else r"\1", b[0])
        sides.append(with_cubin(kernel, ptx_c, arch, b[1], ptx_to_cubin(ptx_c, arch, cache=False)))
    clone = lambda: [a.clone() if isinstance(a, torch.Tensor) else a for a in args]  # noqa: E731
    ins = [clone() for _ in sides]
    outs = lambda o: [] if o is None else list(o) if isinstance(o, (tuple, list)) else [o]  # noqa: E731
    results = [[t for t in i if isinstance(t, torch.Tensor)] + outs(k(*i)) for k, i in zip(sides, ins)]
    same = "  ".join(agreement(results[0], r) for r in results[1:])
    ms = interleaved([lambda k=k, i=i: k(*i) for k, i in zip(sides, ins)], trials)
    extra = f" {ms[2]:9.4f} {ms[2] / ms[0]:6.3f}" if minncta is not None else ""
    return f"{ms[0]:9.4f} {ms[1]:9.4f} {ms[1] / ms[0]:6.3f}{extra}  {same}", ms[1] / ms[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="comma-separated op names (default: every file in bench/suite)")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--budget", type=float, default=None, help="seconds; no new op starts after this")
    ap.add_argument("--minncta", type=int, metavar="K", help="a third side: B's PTX with .minnctapersm K on every "
                                                              "kernel (0: none) instead of the per-kernel choice, C/A")
    a = ap.parse_args(argv)
    paths = [SUITE / f"{op}.py" for op in a.ops.split(",")] if a.ops else sorted(SUITE.glob("*.py"))
    missing = [p.stem for p in paths if not p.is_file()]
    if missing:
        ap.error(f"no such suite ops: {missing}")
    t0, ratios, skipped = time.perf_counter(), [], []
    third = f" {'C ms':>9} {'C/A':>6}" if a.minncta is not None else ""
    print(f"{'kernel':28} {'A ms':>9} {'B ms':>9} {'B/A':>6}" + third
          + "  outputs")
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            if a.budget is not None and time.perf_counter() - t0 > a.budget:
                skipped.append(path.stem)
                continue
            try:
                calls = forward_calls(path, Path(tmp))
            except Exception as e:  # noqa: BLE001 - reported per op
                print(f"{path.stem:28} not run: {type(e).__name__}: {str(e)[:160]}", flush=True)
                continue
            for i, (kernel, args) in enumerate(calls):
                try:
                    row = ab_kernel(kernel, args, a.trials, a.minncta)
                except Exception as e:  # noqa: BLE001 - reported per kernel
                    row = f"failed: {type(e).__name__}: {str(e)[:160]}"
                label = f"{path.stem}#{i}"
                print(f"{label:28} " + (f"skipped: {row}" if isinstance(row, str) else row[0]), flush=True)
                if not isinstance(row, str):
                    ratios.append(row[1])
    if skipped:
        print(f"not started (budget): {', '.join(skipped)}")
    if ratios:
        print(f"{len(ratios)} kernels: GPU time B/A median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}); B/A > 1.05 on {sum(r > 1.05 for r in ratios)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
