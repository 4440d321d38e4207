"""The evaluator's isolation and timing stability on a GPU (issue 5's GPU acceptance).

Usage (on a CUDA machine): python bench/evaluator_isolation.py [--check-m 16384] [--ms 262144] [--cs 96,320,1024]
                                                              [--json out.json]

One EvalWorker evaluates, in order, against tasks/rmsnorm_silu.py at M = --check-m:
1. ``illegal_access``: a DSL kernel that reads shared memory at a run-time offset of 2^28 elements (the lowering
   guards global accesses only; the H200 reports "an illegal instruction was encountered") -> status "crash", the
   worker restarted;
2. ``endless``: a DSL kernel whose inner ``T.serial(1 << 30)`` loops never finish -> "timeout" after --run-timeout
   (plus the compile allowance of the first config), restarted;
3. ``oom``: a forward that allocates 2^40 bytes -> "crash" (out of memory), restarted;
4. ``honest``: the verified RMSNorm+SiLU kernel -> "ok", by the same EvalWorker object.
Then the honest kernel is timed at M = --ms in 3 separate evaluations (a fresh worker each; checked on one seed of
the normal distribution only, since the spec draws inputs on the host, which takes seconds per 2^28 elements) and
the spread of the candidate's median per config, (max - min) / median, is printed (target < 3%). A table at the end;
exit status 0 when everything is as expected. The two parts take a few minutes each; --skip-isolation and
--skip-timing run one of them (e.g. to stay within a 10-minute command limit).

``--cheats-only`` (issue 18) runs instead: the timing cheats of ``TIMING_CHEATS`` (a content cache probed on the
host, torch with the dispatch mode popped (returned, or copied into an output allocated under the guard), the kernel
on a side stream, a CUDA graph replay, work launched by a
thread after forward returned), each checked and timed the new way with the static checks off (in its own process:
the guard, the CUDA kernel accounting and fresh inputs every trial) and expected to be rejected (the content cache may
instead be neutralized: accepted, but no faster than the honest kernel, the control run first, since fresh inputs
never hit it); then the honest kernel timed old way against new way in the same run (alternating rounds), expected
within 2%.

``--evaluate-fn`` picks what the worker runs (default: the real ``evaluator.worker:evaluate``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

COMMON = '''
import torch
import tileagent
import tileagent.language as T
'''


def model_new(kernel: str, returns: str) -> str:
    """The faulty candidates' ModelNew (the reference's constructor): builds ``kernel`` (an expression of C) and
    returns ``returns`` from forward(x)."""
    return f'''

class ModelNew(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(C, dtype=torch.float16))
        self.kernel = {kernel}

    def forward(self, x):
        return {returns}
'''

HONEST = COMMON + '''

def schedule(C):
    threads = 256 if C >= 2048 else 128
    per_thread = 16 if C in (256, 512, 1024) else 32
    block_m = 1
    while block_m * 2 * C <= threads * per_thread and block_m < 128:
        block_m *= 2
    return block_m, threads


@tileagent.jit(out_idx=[2], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def rmsnorm_silu(C, eps=1e-5):
    block_m, threads = schedule(C)
    M = T.dynamic("M")
    log2e = 1.4426950408889634

    @T.prim_func
    def main(X: T.Tensor((M, C), "float16"), gamma: T.Tensor((C,), "float16"), Y: T.Tensor((M, C), "float16")):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, C), "float32")
            g = T.alloc_fragment((C,), "float32")
            sq = T.alloc_fragment((block_m, C), "float32")
            rinv = T.alloc_fragment((block_m,), "float32")
            T.copy(X[bm * block_m, 0], x)
            T.copy(gamma, g)
            for i, j in T.Parallel(block_m, C):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, rinv, dim=1)
            for i in T.Parallel(block_m):
                rinv[i] = T.rsqrt(rinv[i] / C + eps)
            for i, j in T.Parallel(block_m, C):
                v = x[i, j] * rinv[i] * g[j]
                x[i, j] = v / (1.0 + T.exp2(v * -log2e))
            T.copy(x, Y[bm * block_m, 0])

    return main


class ModelNew(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(C, dtype=torch.float16))
        self.kernel = rmsnorm_silu(C, eps)

    def forward(self, x):
        return self.kernel(x, self.gamma.detach())
'''

ILLEGAL_ACCESS = COMMON + '''

@tileagent.jit(out_idx=[2])
def far_read(C):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, C), "float16"), offset: T.int32, Y: T.Tensor((M, C), "float16")):
        with T.Kernel(M, threads=128) as bm:
            row = T.alloc_shared((C,), "float16")
            T.copy(X[bm, 0], row)
            for j in T.Parallel(C):
                Y[bm, j] = row[j + offset]  # shared memory is not bounds-guarded: 2^28 elements away faults

    return main
''' + model_new("far_read(C)", "self.kernel(x, 1 << 28)")

ENDLESS = COMMON + '''

@tileagent.jit(out_idx=[1])
def spin(C):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, C), "float16"), Y: T.Tensor((M, C), "float16")):
        with T.Kernel(T.ceildiv(M, 4), threads=128) as bm:
            x = T.alloc_fragment((4, C), "float32")
            T.copy(X[bm * 4, 0], x)
            for _ in T.serial(1 << 30):
                for _ in T.serial(1 << 30):
                    for i, j in T.Parallel(4, C):
                        x[i, j] = x[i, j] * 0.999999 + 1e-7
            T.copy(x, Y[bm * 4, 0])

    return main
''' + model_new("spin(C)", "self.kernel(x)")

OOM = COMMON + '''

@tileagent.jit(out_idx=[1])
def copy(C):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, C), "float16"), Y: T.Tensor((M, C), "float16")):
        with T.Kernel(M, threads=128) as bm:
            T.copy(X[bm, 0], Y[bm, 0])

    return main
''' + model_new("copy(C)", "torch.empty(1 << 40, dtype=torch.uint8, device=x.device)  # 1 TiB")


# -- timing cheats (issue 18): each must be rejected with the run-time defences alone (static checks off) ----------

CHEAT_KERNELS = HONEST.replace("class ModelNew(torch.nn.Module):", "class _Honest(torch.nn.Module):") + '''

@tileagent.jit(out_idx=[1])
def copy_rows(C):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, C), "float16"), Y: T.Tensor((M, C), "float16")):
        with T.Kernel(M, threads=128) as bm:
            for j in T.Parallel(C):
                Y[bm, j] = X[bm, j]

    return main
'''

TIMING_CHEATS = {
    # a cache keyed on the input's values: a host-side probe of a few elements decides (the fixed timing sets of the
    # old evaluator made every timed call a hit)
    "content_cache": CHEAT_KERNELS + '''

class ModelNew(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(C, dtype=torch.float16))
        self.kernel, self.copy, self.cache = rmsnorm_silu(C, eps), copy_rows(C), []

    def forward(self, x):
        probe = tuple(x[0, :4].tolist())
        for key, y in self.cache:
            if key == probe:
                return self.copy(y)
        y = self.kernel(x, self.gamma.detach())
        self.cache.append((probe, y))
        return self.copy(y)
''',
    # cuBLAS/torch while the dispatch mode is popped: only the CUDA kernel accounting (CUPTI) sees it
    "torch_with_mode_popped": CHEAT_KERNELS + '''
from torch.utils._python_dispatch import _pop_mode_temporarily


class ModelNew(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(C, dtype=torch.float16))
        self.copy, self.eps = copy_rows(C), eps

    def forward(self, x):
        self.copy(x)
        with _pop_mode_temporarily():
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.gamma.float()
            return torch.nn.functional.silu(y).to(x.dtype)
''',
    # the same, its result copied into an output allocated under the guard (so the output's memory passes the
    # output-provenance rule): on the CPU only the static rules catch this one; here the kernel accounting must
    "torch_popped_into_allocation": CHEAT_KERNELS + '''
from torch.utils._python_dispatch import _pop_mode_temporarily


class ModelNew(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(C, dtype=torch.float16))
        self.copy, self.eps = copy_rows(C), eps

    def forward(self, x):
        out = self.copy(x)
        with _pop_mode_temporarily():
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.gamma.float()
            out.copy_(torch.nn.functional.silu(y).to(x.dtype))
        return out
''',
    # the compiled kernel on a side stream: the timed stream's end event does not wait for it
    "side_stream": CHEAT_KERNELS + '''

class ModelNew(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(C, dtype=torch.float16))
        self.kernel, self.side = rmsnorm_silu(C, eps), torch.cuda.Stream()

    def forward(self, x):
        with torch.cuda.stream(self.side):
            return self.kernel(x, self.gamma.detach())
''',
    # a CUDA graph of the compiled kernel, captured on the first call and replayed after (no launch of ours)
    "cuda_graph_replay": CHEAT_KERNELS + '''

class ModelNew(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(C, dtype=torch.float16))
        self.kernel, self.copy, self.graphs = rmsnorm_silu(C, eps), copy_rows(C), {}

    def forward(self, x):
        key = tuple(x.shape)
        if key not in self.graphs:
            static_in = self.copy(x)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = self.kernel(static_in, self.gamma.detach())
            self.graphs[key] = (graph, static_in, static_out)
        graph, static_in, static_out = self.graphs[key]
        self.copy(x)
        graph.replay()
        return self.copy(static_out)
''',
    # the work is launched by a thread after forward has returned
    "work_after_return": CHEAT_KERNELS + '''
import threading
import time


class ModelNew(torch.nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(C, dtype=torch.float16))
        self.kernel, self.copy = rmsnorm_silu(C, eps), copy_rows(C)

    def forward(self, x):
        y = self.copy(x)

        def later():
            time.sleep(0.002)
            self.kernel(x, self.gamma.detach())

        threading.Thread(target=later, daemon=True).start()
        return y
''',
}


def timing_cheats(reference: Path, tmp: Path, config: dict) -> tuple[list, list]:
    """Each timing cheat checked and timed the new way (its own process, static checks off): (rows, report)."""
    import torch

    from tileagent.evaluator.correctness import check_candidate, timed_calls
    from tileagent.evaluator.errors import EvalError
    from tileagent.evaluator.sandbox import Sandbox
    from tileagent.evaluator.spec import load_spec

    spec = load_spec(reference)
    rows, report, medians = [], [], {}
    for name, text in {"honest (control)": HONEST, **TIMING_CHEATS}.items():
        path = tmp / f"{name.split()[0]}_cheat_run.py"
        path.write_text(text)
        t0, outcome = time.time(), "accepted"
        try:
            with Sandbox(path, "cuda") as sandbox:
                check_candidate(spec, path, device="cuda", configs=[config], seeds=1, distributions=["normal"],
                                static_checks=False, sandbox=sandbox)
                times = timed_calls(spec, sandbox, config, "cuda", trials=20)
                medians[name] = sorted(times)[len(times) // 2]
                outcome = f"accepted ({medians[name]:.4f} ms)"
        except EvalError as e:
            outcome = f"rejected: {e.kind} {e.details.get('rule') or ''}: {e.message[:160]}"
        torch.cuda.synchronize()
        honest = medians.get("honest (control)")
        if name == "content_cache" and name in medians and honest and medians[name] >= 0.9 * honest:
            outcome = f"neutralized: {outcome}, no faster than the honest kernel ({honest:.4f} ms)"
        rows.append((name, outcome, time.time() - t0))
        report.append({"cheat": name, "outcome": outcome})
        print(f"{name}: {outcome} ({time.time() - t0:.1f} s)", flush=True)
    return rows, report


def isolation_ab(reference: Path, tmp: Path, config: dict, rounds: int = 3, trials: int = 50) -> dict:
    """The honest kernel's median time, old way (in this process, no guard, three fixed input sets rotated) against
    new (its own process, the guard and CUDA kernel accounting on, fresh inputs every trial), alternating."""
    import statistics

    import torch

    from tileagent.evaluator.candidate import build_models, load_candidate
    from tileagent.evaluator.correctness import timed_calls
    from tileagent.evaluator.sandbox import Sandbox
    from tileagent.evaluator.spec import load_spec
    from tileagent.evaluator.timing import bench, derived_sets

    spec = load_spec(reference)
    path = tmp / "honest.py"
    _, model = build_models(spec, load_candidate(path), config, "cuda")
    sets = derived_sets(list(spec.make_inputs(config, 10_000, "normal", "cuda")))
    old, new = [], []
    with Sandbox(path, "cuda") as sandbox, torch.no_grad():
        for _ in range(rounds):
            old.append(statistics.median(bench(model, sets, trials, device="cuda")[0]))
            new.append(statistics.median(timed_calls(spec, sandbox, config, "cuda", trials=trials)))
    a, b = statistics.median(old), statistics.median(new)
    return {"config": config, "old_ms": old, "new_ms": new, "old_median": a, "new_median": b,
            "diff_pct": 100 * (b - a) / a}



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-m", type=int, default=16384, help="M (rows) of the isolation runs")
    ap.add_argument("--ms", default="262144", help="M (rows) of the timed configs")
    ap.add_argument("--cs", default="96,320,1024", help="C of the timed configs")
    ap.add_argument("--evaluate-fn", default=None)
    ap.add_argument("--run-timeout", type=float, default=30.0, help="run limit of the endless kernel's request")
    ap.add_argument("--skip-isolation", action="store_true", help="only the 3 timed evaluations")
    ap.add_argument("--skip-timing", action="store_true", help="only the isolation runs")
    ap.add_argument("--cheats-only", action="store_true", help="only the timing cheats and the isolation A/B "
                    "(issue 18): each cheat must be rejected, the honest kernel's time the same within 2%%")
    ap.add_argument("--cheat-m", type=int, default=4096, help="M of the timing cheats' config (C = 1024)")
    ap.add_argument("--ab-m", type=int, default=131072, help="M of the A/B config (C = 1024)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch

    from tileagent.evaluator.records import EvalRequest
    from tileagent.evaluator.worker import EvalWorker

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    fn = args.evaluate_fn or "tileagent.evaluator.worker:evaluate"
    print(f"worker runs {fn} on {torch.cuda.get_device_name()}", flush=True)
    reference = str(REPO / "tasks" / "rmsnorm_silu.py")
    cs = [int(c) for c in args.cs.split(",")]
    check_configs = [{"M": args.check_m, "C": c} for c in cs]
    timed_configs = [{"M": int(m), "C": c} for m in args.ms.split(",") for c in cs]
    tmp = Path(tempfile.mkdtemp(prefix="tileagent_isolation_"))
    paths = {}
    for name, text in (("illegal_access", ILLEGAL_ACCESS), ("endless", ENDLESS), ("oom", OOM), ("honest", HONEST)):
        paths[name] = tmp / f"{name}.py"
        paths[name].write_text(text)

    def request(name, timing):
        quick = {"seeds": 1, "distributions": ["normal"]} if timing else {}  # inputs are drawn on the host: slow
        return EvalRequest(kernel_path=str(paths[name]), reference_path=reference, device="cuda", timing=timing,
                           configs=timed_configs if timing else check_configs, **quick,
                           run_timeout_s=args.run_timeout if name == "endless" else 600,
                           compile_timeout_s=20 if name == "endless" else 120)

    rows, report = [], {"gpu": torch.cuda.get_device_name(), "evaluate_fn": fn, "runs": []}
    if args.cheats_only:
        cheat_rows, report["timing_cheats"] = timing_cheats(Path(reference), tmp, {"M": args.cheat_m, "C": 1024})
        ab = report["isolation_ab"] = isolation_ab(Path(reference), tmp, {"M": args.ab_m, "C": 1024})
        print(f"\n{'timing cheat':<24} {'seconds':>8}  outcome")
        for name, outcome, seconds in cheat_rows:
            print(f"{name:<24} {seconds:>8.1f}  {outcome}")
        print(f"\nisolation A/B at {ab['config']}: old {ab['old_median']:.4f} ms {ab['old_ms']}, new "
              f"{ab['new_median']:.4f} ms {ab['new_ms']}: {ab['diff_pct']:+.2f}% (target within 2%)")
        ok = cheat_rows[0][1].startswith("accepted") and abs(ab["diff_pct"]) <= 2.0 and \
            all(o.startswith(("rejected", "neutralized")) for _, o, _ in cheat_rows[1:])
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        sys.exit(0 if ok else 1)
    worker = EvalWorker("cuda:0", evaluate_fn=fn)
    runs = () if args.skip_isolation else (("illegal_access", "crash"), ("endless", "timeout"), ("oom", "crash"),
                                           ("honest", "ok"))
    for name, want in runs:
        before, t0 = worker.restarts, time.time()
        result = worker.evaluate(request(name, timing=False))
        rows.append((name, want, result.status, worker.restarts - before, time.time() - t0, result.message))
        report["runs"].append({"candidate": name, "expected": want, **result.model_dump(mode="json")})
        print(f"{name}: {result.status} ({time.time() - t0:.1f} s) {result.message[:300]}", flush=True)
    worker.close()

    medians: dict[str, list[float]] = {}
    for k in range(0 if args.skip_timing else 3):
        with EvalWorker("cuda:0", evaluate_fn=fn) as fresh:
            result = fresh.evaluate(request("honest", timing=True))
        print(f"timing run {k + 1}: {result.status} {result.message[:200]}", flush=True)
        report["runs"].append({"candidate": f"honest timed #{k + 1}", **result.model_dump(mode="json")})
        for c in result.configs:
            if c.candidate is not None:
                medians.setdefault(f"M={c.config['M']} C={c.config['C']}", []).append(c.candidate.median_ms)
                print(f"  {c.config}: {c.candidate.median_ms:.4f} ms ±{c.candidate.iqr_ms:.4f} "
                      f"(outliers {c.candidate.outliers}), eager {c.eager.median_ms:.4f}, compile "
                      f"{c.compiled.median_ms if c.compiled else float('nan'):.4f}, x eager {c.speedup_eager:.2f}, "
                      f"x compile {c.speedup_compiled or float('nan'):.2f}, {c.roofline_pct:.0f}% {c.bound} roofline",
                      flush=True)

    print(f"\n{'candidate':<16} {'expected':<9} {'status':<9} {'restarts':>8} {'seconds':>8}")
    for name, want, got, restarts, seconds, _ in rows:
        mark = "" if got == want else "  <-- unexpected"
        print(f"{name:<16} {want:<9} {got:<9} {restarts:>8} {seconds:>8.1f}{mark}")
    print(f"\n{'config':<20} {'run 1 ms':>9} {'run 2 ms':>9} {'run 3 ms':>9} {'spread':>7}")
    spreads = []
    for key, ms in medians.items():
        spread = 100 * (max(ms) - min(ms)) / sorted(ms)[len(ms) // 2]
        spreads.append(spread)
        print(f"{key:<20} " + " ".join(f"{m:>9.4f}" for m in ms) + f" {spread:>6.2f}%")
    ok = all(want == got for _, want, got, *_ in rows) and (args.skip_timing or (spreads and max(spreads) < 3.0))
    report["spreads_pct"] = dict(zip(medians, spreads))
    print(f"\nisolation {'as expected' if all(w == g for _, w, g, *_ in rows) else 'NOT as expected'}; "
          f"largest median-to-median spread {max(spreads) if spreads else float('nan'):.2f}% (target < 3%)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
