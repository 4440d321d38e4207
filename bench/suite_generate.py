"""`tileagent generate` on every op of the fusion suite, as a user runs it: wall time, exit code and what it reached.

Usage (on a CUDA machine): python bench/suite_generate.py [--ops a,b,...] [--part K/N] [--timeout 300]
    [--limit 180] [--jobs 1] [--json out.json] [--keep DIR] [-- extra generate flags]
Each op runs `python -m tileagent generate bench/suite/<op>.py --out <scratch>/<op>` with default flags (plus any
given after `--`) in its own process under `--timeout` seconds. Per op: the wall time of that process (start-up,
loop, export, report), its exit code (0 target met, 3 correct but not faster, 4 no correct kernel, 5 not drafted,
124 killed at the timeout), and from its report.json the best kernel's speedup over torch.compile per config (the
loop's own timing of the kernel it keeps: after autotuning, fully checked). Prints one line per op and a summary:
how many finished within `--limit` seconds (issue 14: 180) and how many met the target. `--part K/N` runs the K-th
of N slices of the op list, for several machines or calls. `--jobs N` runs N ops at a time on the one GPU: each op's
wall time is then an upper bound of its own (the runs share the GPU and the host), and its speedups are not to be
read (the timings of the runs overlap). `--keep DIR` keeps each op's run directory's report.json
and events.jsonl (timestamped loop events: where the wall time went) as DIR/<op>/.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "bench" / "suite"


def run_generate(op: str, out: Path, timeout: float, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "tileagent", "generate", str(SUITE / f"{op}.py"), "--out", str(out), *extra]
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    row = {"op": op, "rc": rc, "wall_s": time.perf_counter() - t0, "x_compile": []}
    report = out / "report.json"
    if report.exists():
        r = json.loads(report.read_text())
        row["outcome"] = r.get("outcome")
        row["x_compile"] = [c.get("speedup_compiled") for c in r.get("configs", [])]
    return row


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="", help="comma-separated op names (default: every file in bench/suite)")
    ap.add_argument("--part", default="1/1", help="K/N: the K-th of N equal slices of the op list")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before an op's run is killed")
    ap.add_argument("--limit", type=float, default=180.0, help="the wall time an op's run should stay within")
    ap.add_argument("--jobs", type=int, default=1, help="ops run at a time (wall times then upper bounds)")
    ap.add_argument("--json", default="")
    ap.add_argument("--keep", default="", help="a directory to keep each op's report.json and events.jsonl in")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    ops = sorted(p.stem for p in SUITE.glob("*.py"))
    if args.ops:
        ops = [o for o in ops if o in set(args.ops.split(","))]
    k, n = (int(v) for v in args.part.split("/"))
    ops = ops[(k - 1) * len(ops) // n: k * len(ops) // n]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        runs = {pool.submit(run_generate, op, Path(tmp) / op, args.timeout, extra): op for op in ops}
        for done in concurrent.futures.as_completed(runs):
            op, row = runs[done], done.result()
            rows.append(row)
            if args.keep:
                keep = Path(args.keep) / op
                keep.mkdir(parents=True, exist_ok=True)
                for name in ("report.json", "events.jsonl"):
                    for found in (Path(tmp) / op).rglob(name):
                        shutil.copy(found, keep / name)
            speed = " / ".join("-" if x is None else f"{x:.2f}" for x in row["x_compile"]) or "-"
            print(f"{op:24s} exit {row['rc']:3d}  {row['wall_s']:6.1f} s  x compile {speed}", flush=True)
    within = [r["op"] for r in rows if r["wall_s"] <= args.limit and r["rc"] != 124]
    met = [r["op"] for r in rows if r["rc"] == 0]
    print(f"\n{len(rows)} ops: finished within {args.limit:.0f} s {len(within)}; target met (exit 0) {len(met)}; "
          f"over the limit: {', '.join(r['op'] for r in rows if r['op'] not in within) or '-'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
