"""The tensor-core acceptance programs as written (``../shared/examples/gemm_relu.py``, ``flash_attn_fwd.py``),
compiled by TileAgent and by real TileLang, each next to its baseline (cuBLAS / SDPA) timed in the same process.

Usage (H200): TILEAGENT_SHARED=/path/to/shared python bench/examples_vs_tilelang.py --tilelang-site /tmp/tl
The same kernels run on both sides: for TileLang the program text changes only as ``TILELANG_TEXT`` says (the package name
and two spellings TileLang 0.1.15 does not read). Each side runs in its own process (``--impl`` is the child's
mode), checks its output against an fp32 torch reference on fresh random inputs with the output poisoned before the
call, and times with ``bench.memory_bound.bench`` (CUDA events, L2 flushed, medians). A ratio of a side to its own
process's baseline is what compares across the two processes; absolute times drift between them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.tensor_core import SHARED  # noqa: E402

GEMM_SIZES = (4096, 8192)
# what TileLang 0.1.15 needs changed in our program text (the kernels stay the same): its package name, the
# swizzle order spelled "column" (ours also reads the seed article's "col"), and a Tensor shape written out (its
# parser does not see the factory's local ``shape`` from inside the prim_func: NameError)
TILELANG_TEXT = (("import tileagent as tilelang", "import tilelang"),
                 ("import tileagent.language as T", "import tilelang.language as T"),
                 ('order="col"', 'order="column"'),
                 ("T.Tensor(shape, dtype)", "T.Tensor([batch, seq_len, heads, dim], dtype)"))
FA_SHAPE = (8, 32, 4096, 128)  # B, H, S, D


def load_example(name: str, impl: str) -> types.ModuleType:
    """``name``'s module from the shared examples, importing ``impl`` (``tileagent`` or ``tilelang``)."""
    path = SHARED / f"{name}.py"
    source = path.read_text()
    if impl == "tilelang":
        for ours, theirs in TILELANG_TEXT:
            source = source.replace(ours, theirs)
        path = Path(tempfile.mkdtemp()) / f"{name}.py"  # TileLang's parser reads a prim_func's text from its file
        path.write_text(source)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 -- our own acceptance programs
    return module


def child(impl: str, trials: int) -> None:
    """Check and time every case in this process; one JSON line per case on stdout."""
    import torch
    import torch.nn.functional as F

    from bench.memory_bound import bench

    def report(**row):
        print(json.dumps(row), flush=True)

    torch.manual_seed(0)
    gemm = load_example("gemm_relu", impl)
    for dtype in ("float16", "bfloat16"):
        tdt = getattr(torch, dtype)
        for n in GEMM_SIZES:
            case = f"gemm_relu {n}^3 {dtype} 128/128/64"
            try:
                kernel = gemm.matmul(n, n, n, 128, 128, 64, dtype=dtype)
                a, b = (torch.randn(n, n, device="cuda", dtype=tdt) for _ in range(2))
                c = torch.full((n, n), float("nan"), device="cuda", dtype=tdt)
                kernel(a, b, c)
                ok = torch.allclose(c.float(), torch.relu(a.float() @ b.float()), rtol=2e-2, atol=2e-2 * n ** 0.5 / 8)
                flops = 2 * n ** 3
                ms = bench(lambda: kernel(a, b, c), trials=trials)[0] if ok else float("nan")
                base = bench(lambda: torch.matmul(a, b), trials=trials)[0]
                report(case=case, ok=bool(ok), tflops=flops / ms / 1e9, baseline="cuBLAS",
                       base_tflops=flops / base / 1e9)
            except Exception as e:  # noqa: BLE001 -- one case's failure is a table cell
                report(case=case, ok=False, error=f"{type(e).__name__}: {str(e)[:200]}")
    fa = load_example("flash_attn_fwd", impl)
    B, H, S, D = FA_SHAPE
    for causal in (False, True):
        case = f"flash_attn_fwd B{B} H{H} S{S} D{D}{' causal' if causal else ''} 128/64/2/256"
        try:
            kernel = fa.flash_attn_fwd(B, H, S, D, causal)
            q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            out = kernel(q, k, v)
            ref = F.scaled_dot_product_attention(qt[:1].float(), kt[:1].float(), vt[:1].float(), is_causal=causal)
            ok = torch.allclose(out[:1].float(), ref.transpose(1, 2), rtol=2e-2, atol=2e-2)
            flops = 4 * B * H * S * S * D // (2 if causal else 1)
            ms = bench(lambda: kernel(q, k, v), trials=trials)[0] if ok else float("nan")
            base = min(bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal), trials=trials)[0]
                       for _ in range(3))  # SDPA's fastest of three medians: it drifts by ~10%
            report(case=case, ok=bool(ok), tflops=flops / ms / 1e9, baseline="SDPA", base_tflops=flops / base / 1e9)
        except Exception as e:  # noqa: BLE001
            report(case=case, ok=False, error=f"{type(e).__name__}: {str(e)[:200]}")


def run_side(impl: str, pythonpath: str, trials: int, timeout: float) -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    try:
        proc = subprocess.run([sys.executable, __file__, "--impl", impl, "--trials", str(trials)], env=env,
                              capture_output=True, text=True, timeout=timeout)
        out, err = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        out, err = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out"
    rows = {}
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["case"]] = row
    if not rows:
        rows["(no case ran)"] = {"ok": False, "error": err.strip().splitlines()[-1] if err.strip() else "no output"}
    return rows


def cell(row: dict | None) -> str:
    if row is None:
        return "- | - "
    if not row.get("ok"):
        return f"FAIL ({row.get('error', 'wrong output')}) | - "
    ratio = row["tflops"] / row["base_tflops"]
    return f"{row['tflops']:.1f} | {ratio:.2f} x {row['baseline']} ({row['base_tflops']:.1f})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["tileagent", "tilelang"], help="(child mode) run one side in this process")
    ap.add_argument("--tilelang-site", help="directory holding real TileLang (../shared/tools/tilelang-on-device.sh)")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    if args.impl:
        child(args.impl, args.trials)
        return 0
    base_path = os.environ.get("PYTHONPATH", "")
    ours = run_side("tileagent", os.pathsep.join(p for p in (str(REPO), base_path) if p), args.trials, args.timeout)
    theirs = (run_side("tilelang", os.pathsep.join(p for p in (args.tilelang_site, base_path) if p), args.trials,
                       args.timeout) if args.tilelang_site else {})
    print("| program as written | TileAgent TFLOP/s | x baseline (TFLOP/s) | TileLang TFLOP/s | x baseline (TFLOP/s) |")
    print("|---|---|---|---|---|")
    for case in dict.fromkeys([*ours, *theirs]):
        print(f"| {case} | {cell(ours.get(case))}| {cell(theirs.get(case))}|")
    return 0 if all(r.get("ok") for r in ours.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
