"""Check an exported drop-in module (``tileagent generate``/``batch`` output) the way a user would use it: import it in
a fresh process, run its ``Model`` on the GPU at each config, compare with the reference, and time it next to eager
PyTorch and torch.compile of the reference, all in this process (issue 6's GPU acceptance).

Usage (CUDA machine): python bench/dropin_check.py RUN_DIR/<name>_tileagent.py tasks/<name>.py
                                                  [--grid KEY=v1,v2 ...] [--trials 30] [--json out.json]
Configs: the spec's grid, or with --grid the product of the axes over its first config (``tileagent.configs.grid``,
as ``tileagent batch`` builds them).
Prints a table; exit 0 when the module imported without the agent or the evaluator, every config matched the
reference and the drop-in beat torch.compile at each config.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("module", type=Path)
    ap.add_argument("reference", type=Path)
    ap.add_argument("--grid", action="append", default=[], help="KEY=v1,v2: replace the grid's values of KEY")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    dropin = load_module(args.module)  # first, so that we see what importing it pulls in
    agent_free = not any(m == "evaluator" or m.startswith(("evaluator.", "tileagent.loop", "tileagent.drafters"))
                         for m in sys.modules)
    sys.path.insert(0, str(REPO))
    from bench.memory_bound import bench
    from tileagent.evaluator.spec import load_spec
    from tileagent.configs import grid

    spec = load_spec(args.reference)
    configs = grid(spec.configs[0], args.grid) if args.grid else [dict(c) for c in spec.configs]
    configs = [dict(t) for t in dict.fromkeys(tuple(sorted(c.items())) for c in configs)]
    rows, ok = [], agent_free
    for config in configs:
        ref = spec.make_model(config, device="cuda", seed=0)
        ours = dropin.Model(*spec.init_inputs(config)).to("cuda").eval()
        ours.load_state_dict(ref.state_dict())
        if isinstance(spec.dtypes, torch.dtype):
            ours = ours.to(spec.dtypes)
        inputs = spec.make_inputs(config, seed=1, device="cuda")
        with torch.no_grad():
            want = spec.run_reference(ref, inputs, config)
            got = ours(*inputs)
            got = got if isinstance(got, tuple) else (got,)
            tol = spec.tolerance(want[0].dtype)
            err = max(float((g.float() - w.float()).abs().max()) for g, w in zip(got, want))
            close = all(torch.allclose(g.float(), w.float(), atol=tol.atol, rtol=tol.rtol) for g, w in zip(got, want))
            compiled = torch.compile(ref)
            t_ours = bench(lambda: ours(*inputs), trials=args.trials)[0]
            t_eager = bench(lambda: ref(*inputs), trials=args.trials)[0]
            t_comp = bench(lambda: compiled(*inputs), trials=args.trials)[0]
        beat = t_ours < t_comp
        ok = ok and close and beat
        rows.append({"config": config, "correct": close, "max_abs_err": err, "ms": t_ours, "eager_ms": t_eager,
                     "compile_ms": t_comp, "x_eager": t_eager / t_ours, "x_compile": t_comp / t_ours})
    print(f"module {args.module.name}: imported without the agent/evaluator: {agent_free}")
    print(f"{'config':<34} {'ok':>3} {'max err':>9} {'ours ms':>9} {'eager ms':>9} {'compile ms':>10} "
          f"{'x eager':>8} {'x compile':>9}")
    for r in rows:
        print(f"{str(r['config']):<34} {'yes' if r['correct'] else 'NO':>3} {r['max_abs_err']:>9.2e} {r['ms']:>9.4f} "
              f"{r['eager_ms']:>9.4f} {r['compile_ms']:>10.4f} {r['x_eager']:>8.2f} {r['x_compile']:>9.2f}")
    if args.json:
        args.json.write_text(json.dumps({"agent_free": agent_free, "rows": rows}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
