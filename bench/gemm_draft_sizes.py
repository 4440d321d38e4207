"""The built-in drafter's GEMM first draft across row counts: every SCHEDULE and the per-call pick (SCHEDULE None)
next to eager PyTorch (cuBLAS + the epilogue) and torch.compile, all timed in this run.

Usage (CUDA machine): python bench/gemm_draft_sizes.py [--task tasks/gemm_relu.py] [--rows 16,64,256,1024,4096]
    [--n 4096] [--k 4096] [--dtype float16]
The draft is the drafter's turn-1 candidate for the task (its first variant), written to a temporary module; for each
row count M the same module runs with SCHEDULE set to each value of its TUNABLES list (None: ``pick_schedule``'s
choice, named in the table; SPLIT_K None: ``pick_split``'s), then with the pick's schedule and SPLIT_K set to
each of 1, 2, 4, 8, 16 (``split <n>``; 1: K not split). Each run is checked against the reference in float32 on
fresh inputs, its output poisoned first (a wrong one is reported and not timed; exit status 1). Times:
``bench.memory_bound.bench`` (CUDA events, L2 flushed, medians). The last columns: the pick's time over the fastest
variant's (1.00: the rules picked the fastest) and x torch.compile.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.memory_bound import bench  # noqa: E402


def draft_module(task: Path, tmp: Path):
    """The drafter's first candidate for ``task``, imported as a module."""
    from tileagent.drafters.base import DraftTask
    from tileagent.drafters.builtin import BuiltinDrafter

    draft = BuiltinDrafter().draft(DraftTask(task_name=task.stem, reference_path=str(task),
                                             reference_source=task.read_text(), configs=[], turn=1))[0]
    path = tmp / f"{task.stem}_draft.py"
    path.write_text(draft.source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return draft.label, mod


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default=str(REPO / "tasks" / "gemm_relu.py"))
    ap.add_argument("--rows", default="16,64,256,1024,4096")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--dtype", default="float16")
    a = ap.parse_args()
    task = Path(a.task)
    from tileagent.evaluator.spec import load_spec

    ref = load_spec(task).module
    dtype = getattr(torch, a.dtype)
    failed = False
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        label, mod = draft_module(task, Path(tmp))
        variants = [("SCHEDULE", s) for s in mod.TUNABLES["SCHEDULE"]] + [("SPLIT_K", n) for n in (1, 2, 4, 8, 16)]
        names = [str(v) if knob == "SCHEDULE" else f"split {v}" for knob, v in variants]
        print(f"{task.name}: {label}; N={a.n} K={a.k} {a.dtype}; {torch.cuda.get_device_name()}", flush=True)
        for m in (int(x) for x in a.rows.split(",")):
            torch.manual_seed(m)
            x = torch.randn(m, a.k, device="cuda", dtype=dtype)
            w = torch.randn(a.k, a.n, device="cuda", dtype=dtype) / a.k ** 0.5
            model = ref.Model().cuda()
            want = model(x.float(), w.float())
            eager = bench(lambda: model(x, w))[0]
            compiled = torch.compile(model)
            compiled(x, w)
            comp = bench(lambda: compiled(x, w))[0]
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            times = {}
            cand = mod.ModelNew().cuda()
            for (knob, value), name in zip(variants, names):
                mod.SCHEDULE, mod.SPLIT_K = None, None
                setattr(mod, knob, value)
                got = cand(x, w)
                got.fill_(float("nan"))
                got = cand(x, w)
                torch.cuda.synchronize()
                if not torch.allclose(got.float(), want, atol=2e-2, rtol=2e-2):
                    print(f"M={m} {knob}={value!r}: WRONG (max error {(got.float() - want).abs().max().item():.3g})")
                    failed = True
                    continue
                times[name] = bench(lambda: cand(x, w))[0]
            mod.SCHEDULE, mod.SPLIT_K = None, None
            pick = mod.pick_schedule(m, a.n, sms)
            pick += f", split {mod.pick_split(m, a.n, a.k, pick, mod.BLOCK_K, sms)}"
            best = min((t, s) for s, t in times.items() if s != "None")
            rows.append((m, pick, times, best, eager, comp))
            flops = 2 * m * a.n * a.k
            auto = times.get("None", float("nan"))
            print(f"M={m:6d} pick {pick!r}: {auto:.4f} ms ({flops / auto / 1e9:.1f} TFLOP/s); best {best[1]!r} "
                  f"{best[0]:.4f}; "
                  f"eager {eager:.4f}, torch.compile {comp:.4f}", flush=True)
        print("\n| M | " + " | ".join(names) + " | eager | torch.compile | pick / best | x torch.compile |")
        print("|---" * (len(names) + 5) + "|")
        for m, pick, times, best, eager, comp in rows:
            cells = " | ".join(f"{times[s]:.4f}" if s in times else "WRONG" for s in names)
            auto = times.get("None")
            ratio = f"{auto / best[0]:.2f}" if auto else "-"
            print(f"| {m} ({pick}) | {cells} | {eager:.4f} | {comp:.4f} | {ratio} | "
                  f"{comp / auto if auto else float('nan'):.2f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
