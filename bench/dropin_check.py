"""Check an exported drop-in module on a GPU the way a user would use it (issues 6 and 15's GPU acceptance).

Usage (CUDA machine, from the repository root):

    python bench/dropin_check.py --candidate prompts/examples/candidate_rmsnorm_silu.py tasks/rmsnorm_silu.py
    python bench/dropin_check.py RUN_DIR/<name>_tileagent.py tasks/<name>.py [--grid KEY=v1,v2 ...]

With ``--candidate`` the module is exported first (``tileagent.export``, the candidate's default tunables, every
config of the grid) into a temporary folder; else MODULE is an existing export (``tileagent generate``/``batch``).
Configs: the spec's grid, or with --grid the product of the axes over its first config (as ``tileagent batch``).

Checks, each printed as a line ``PASS``/``FAIL``:

1. isolation: in a subprocess that cannot import tileagent (``python -I`` and an import blocker), the module imports,
   runs its kernel on CUDA at the first config without falling back, and matches the reference;
2. per config, in this process: the output matches the reference (the evaluator's tolerance) with no fallback;
   a non-contiguous input (a transposed view) gives the same result; ``torch.library.opcheck`` passes all its
   tests on CUDA (inputs requiring grad); ``torch.compile(model, fullgraph=True)`` (inductor) in training mode gives
   gradients equal to the eager drop-in's (which are the reference's own autograd: checked exactly) and close to the
   reference's; under ``torch.no_grad`` and ``torch.inference_mode`` the compiled module matches the eager one;
3. with ``--timing``: times of the drop-in, eager reference and torch.compile of the reference (``bench.memory_bound
   .bench``); the drop-in must beat torch.compile at each config.

Exit 0 when every check passed. ``--json out.json`` writes the rows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DEV = "cuda"  # --device (cpu only to try this script without a GPU: the forward checks then fail by design)

ISOLATED = textwrap.dedent("""
    import importlib.abc, importlib.util, json, sys, warnings

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("tileagent", "compiler", "evaluator"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked: the module must not need it)")

    sys.meta_path.insert(0, Block())
    path, init, shapes, dev = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
    atol, rtol = float(sys.argv[5]), float(sys.argv[6])
    spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[-1][:-3], path)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    import torch
    torch.manual_seed(0)
    model = ex.Model(*init).to(dev)
    ref = ex._EXPORT.reference.Model(*init).to(dev)
    ref.load_state_dict(model.state_dict())
    inputs = [torch.randn(s, device=dev).to(getattr(torch, d)) for s, d in shapes]
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        got, want = model(*inputs), ref(*inputs)
        if dev == "cuda":
            torch.cuda.synchronize()
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    err = max(float((g.float() - w.float()).abs().max()) for g, w in zip(got, want))
    close = all(torch.allclose(g.float(), w.float(), atol=atol, rtol=rtol) for g, w in zip(got, want))
    print(json.dumps({"close": close, "fallbacks": ex._EXPORT.fallbacks, "warnings": [str(w.message) for w in caught],
                      "max_abs_err": err, "tileagent": sorted(m for m in sys.modules if m.startswith("tileagent"))}))
""")


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Report:
    def __init__(self):
        self.ok, self.rows = True, []

    def check(self, what: str, passed: bool, detail: str = "") -> bool:
        self.ok = self.ok and passed
        print(f"{'PASS' if passed else 'FAIL'}  {what}{': ' + detail if detail else ''}", flush=True)
        self.rows.append({"check": what, "passed": passed, "detail": detail})
        return passed


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _max_err(got, want) -> float:
    return max(float((g.float() - w.float()).abs().max()) for g, w in zip(_tuple(got), _tuple(want)))


def check_config(dropin, spec, config: dict, report: Report, timing: bool, trials: int) -> dict:
    name = " ".join(f"{k}={v}" for k, v in config.items())
    ref = spec.make_model(config, device=DEV, seed=0)
    ours = dropin.Model(*spec.init_inputs(config)).to(DEV)
    ours.load_state_dict(ref.state_dict())
    if isinstance(spec.dtypes, torch.dtype):
        ours = ours.to(spec.dtypes)
    inputs = spec.make_inputs(config, seed=1, device=DEV)
    before = dict(dropin._EXPORT.fallbacks)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = spec.run_reference(ref, inputs, config)
        got = _tuple(ours(*inputs))
        tol = spec.tolerance(want[0].dtype)
        close = all(torch.allclose(g.float(), w.float(), atol=tol.atol, rtol=tol.rtol) for g, w in zip(got, want))
        report.check(f"[{name}] forward matches the reference on the kernel path",
                     close and dropin._EXPORT.fallbacks == before,
                     f"max abs err {_max_err(got, want):.2e}; fallbacks {[str(w.message) for w in caught]}")
        strided = [t.t().contiguous().t() if t.dim() == 2 else t for t in inputs]  # same values, column-major
        got_s = _tuple(ours(*strided))
        report.check(f"[{name}] non-contiguous input", all(torch.equal(a, b) for a, b in zip(got_s, got))
                     and dropin._EXPORT.fallbacks == before)
    # opcheck on CUDA: schema, autograd registration, fake tensor, AOT dispatch (static and dynamic)
    op = getattr(torch.ops.tileagent, dropin.OP_NAME).default
    args = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    args += [p.detach().clone().requires_grad_(p.is_floating_point()) for p in
             [dict(ours.named_parameters(), **dict(ours.named_buffers()))[n] for n in dropin.STATE_NAMES]]
    args += list(ours._tileagent_init)
    try:
        t0 = time.perf_counter()
        torch.library.opcheck(op, tuple(args))
        report.check(f"[{name}] torch.library.opcheck (all tests, CUDA)", True, f"{time.perf_counter() - t0:.1f} s")
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        report.check(f"[{name}] torch.library.opcheck (all tests, CUDA)", False, f"{type(e).__name__}: {e}"[:500])
    # torch.compile(fullgraph=True) in training mode: gradients vs the eager drop-in's and the reference's
    torch._dynamo.reset()
    compiled = torch.compile(ours, fullgraph=True)
    floats = [i for i, t in enumerate(inputs) if t.is_floating_point()]
    weights = [torch.randn(w.shape, device=DEV) for w in want]  # a loss linear in the outputs

    def grads(module):
        xs = [t.detach().clone().requires_grad_(i in floats) for i, t in enumerate(inputs)]
        module.zero_grad(set_to_none=True)
        out = _tuple(module(*xs))
        sum((o.float() * w).sum() for o, w in zip(out, weights)).backward()
        return [xs[i].grad for i in floats] + [p.grad for p in module.parameters() if p.grad is not None]

    try:
        t0 = time.perf_counter()
        g_compiled = grads(compiled)
        t_compile = time.perf_counter() - t0
        g_eager = grads(ours)
        g_ref = grads(ref)
        exact = all(torch.equal(a, b) for a, b in zip(g_eager, g_ref)) and len(g_eager) == len(g_ref)
        report.check(f"[{name}] eager drop-in gradients == the reference's (exact)", exact)
        errs = [_max_err(a, b) for a, b in zip(g_compiled, g_ref)]
        tol = spec.tolerance(want[0].dtype)
        close = len(g_compiled) == len(g_ref) and all(
            torch.allclose(a.float(), b.float(), atol=tol.atol, rtol=tol.rtol) for a, b in zip(g_compiled, g_ref))
        report.check(f"[{name}] torch.compile(fullgraph=True) training: gradients close to the reference's", close,
                     f"max abs errs {[f'{e:.1e}' for e in errs]}; compile+run {t_compile:.1f} s")
        with torch.no_grad():
            a = _tuple(compiled(*inputs))
        with torch.inference_mode():
            b = _tuple(compiled(*inputs))
        same = all(torch.allclose(x.float(), y.float(), atol=tol.atol, rtol=tol.rtol) for x, y in zip(a, got)) and \
            all(torch.allclose(x.float(), y.float(), atol=tol.atol, rtol=tol.rtol) for x, y in zip(b, got))
        report.check(f"[{name}] torch.compile(fullgraph=True) under no_grad and inference_mode", same)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        report.check(f"[{name}] torch.compile(fullgraph=True)", False, f"{type(e).__name__}: {e}"[:800])
    row = {"config": config}
    if timing:
        from bench.memory_bound import bench

        with torch.no_grad():
            comp_ref = torch.compile(ref)
            row["ms"] = bench(lambda: ours(*inputs), trials=trials)[0]
            row["eager_ms"] = bench(lambda: ref(*inputs), trials=trials)[0]
            row["compile_ms"] = bench(lambda: comp_ref(*inputs), trials=trials)[0]
        report.check(f"[{name}] drop-in faster than torch.compile of the reference", row["ms"] < row["compile_ms"],
                     f"drop-in {row['ms']:.4f} ms, eager {row['eager_ms']:.4f} ms, torch.compile "
                     f"{row['compile_ms']:.4f} ms (x{row['compile_ms'] / row['ms']:.2f})")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="MODULE REFERENCE, or REFERENCE with --candidate")
    ap.add_argument("--candidate", type=Path, help="export this candidate (ModelNew) first, at every config")
    ap.add_argument("--grid", action="append", default=[], help="KEY=v1,v2: replace the grid's values of KEY")
    ap.add_argument("--configs", type=int, default=None, help="check only the first N configs")
    ap.add_argument("--timing", action="store_true", help="also time drop-in, eager and torch.compile")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global DEV
    DEV = args.device
    if DEV == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from tileagent.configs import grid
    from tileagent.evaluator.spec import load_spec
    from tileagent.export import ExportEntry, export_module

    if args.candidate is not None:
        (reference,) = args.paths
    else:
        module_path, reference = args.paths
    spec = load_spec(reference)
    configs = grid(spec.configs[0], args.grid) if args.grid else [dict(c) for c in spec.configs]
    configs = [dict(t) for t in dict.fromkeys(tuple(sorted(c.items())) for c in configs)]
    configs = [{k: c[k] for k in spec.configs[0] if k in c} for c in configs][:args.configs]
    if args.candidate is not None:
        source = args.candidate.read_text()
        out = Path(tempfile.mkdtemp(prefix="dropin_check_"))
        t0 = time.perf_counter()
        module_path = export_module(reference, [ExportEntry(config=c, source=source) for c in configs], out)
        print(f"exported {len(configs)} config(s) to {module_path} in {time.perf_counter() - t0:.1f} s")
    report = Report()
    first = configs[0]
    shapes = [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in spec.make_inputs(first, seed=1)]
    tol = spec.tolerance(spec.make_inputs(first, seed=1)[0].dtype)
    proc = subprocess.run([sys.executable, "-I", "-c", ISOLATED, str(module_path), json.dumps(spec.init_inputs(first)),
                           json.dumps(shapes), DEV, str(tol.atol), str(tol.rtol)], capture_output=True, text=True,
                          timeout=300, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        report.check("isolation: imports and runs on CUDA without tileagent", False, proc.stderr[-1500:])
    else:
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        report.check("isolation: imports and runs on CUDA without tileagent",
                     res["close"] and not res["fallbacks"] and not res["tileagent"],
                     f"max abs err {res['max_abs_err']:.2e}, fallbacks {res['fallbacks']}")
    dropin = load_module(Path(module_path))
    rows = [check_config(dropin, spec, c, report, args.timing, args.trials) for c in configs]
    print(f"{'all checks passed' if report.ok else 'SOME CHECKS FAILED'} ({len(configs)} config(s), "
          f"{sum(r['passed'] for r in report.rows)}/{len(report.rows)} checks)")
    if args.json:
        args.json.write_text(json.dumps({"checks": report.rows, "timings": rows}, indent=1, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
