"""TileLang's own example programs, run unchanged through ``tileagent tilelang`` and (optionally) real TileLang.

In: the programs under ``bench/tilelang_examples/`` (copied from TileLang's repository, MIT, attributed), each with
the command-line arguments listed in ``PROGRAMS``; optionally ``--tilelang-site DIR``, a folder on which
``import tilelang`` finds a real TileLang (``../shared/tools/tilelang-on-device.sh`` packs 0.1.15).
Out: one table row per program: pass/fail on each side (the program's own checks: exit status 0), the latency in ms
and TFLOP/s the program printed for its TileLang kernel, and the ratio TileLang time / TileAgent time (> 1: TileAgent
faster). ``--markdown`` prints the table in BENCHMARKS.md's format; the table is always printed last, after a
summary line. ``--budget SECONDS`` bounds the whole run (one device call): programs run in ``PROGRAMS`` order while
time is left, and the ones it had no time for are rows marked "not run (budget)".
Guarantees: every run is a separate process (``python -m tileagent.tilelang PROGRAM ARGS`` with this checkout first
on PYTHONPATH; ``python PROGRAM ARGS`` with DIR first on PYTHONPATH for real TileLang; nothing named ``tilelang``
is importable from this checkout, so DIR's wins), in the program's folder, with a time limit;
a failure's reason is the diagnostic code it printed (``E701``...) or the last line of its error output (a program
that exits 0 but prints a failed check, a line with "❌", fails too); a program
whose extra imports (einops, triton) are missing here is skipped on both sides with that reason. The two
sides of one program run one after the other, never at once, so they do not share the GPU.

    python bench/tilelang_examples.py                       # TileAgent only, the curated set
    python bench/tilelang_examples.py --tilelang-site /tmp/tl --budget 500 --timeout 60 --markdown
    python bench/tilelang_examples.py --only rms_norm,layernorm --timeout 120
    python bench/tilelang_examples.py --only gemm --ab TILEAGENT_STAGE_EPILOGUE=0   # a switch's A/B, same call

The whole examples folder (issue 13's full table; several device calls): ``--folder DIR`` runs the programs of a
TileLang ``examples/`` folder with their default arguments instead, those a ``bench/tilelang_survey.py --tsv FILE``
found building for sm_90a when ``--survey FILE`` is given, and ``--done FILE`` makes the run resumable: programs
with a row there are skipped, and each finished program's row is appended at once (a tab-separated table row), so
a device call cut short keeps what finished and the next call goes on from there:

    python bench/tilelang_examples.py --folder /tmp/tilelang/examples --survey bench/tilelang_examples/survey.tsv \
        --done bench/tilelang_examples/folder_done.tsv --tilelang-site /tmp/tl --timeout 60 --budget 540 --warm 12

``--warm N`` first runs the selected programs once on each side, N processes at a time, for at most half the budget,
and discards those runs: the timed runs, one at a time as always, then load their kernels from the compile caches.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "bench" / "tilelang_examples"

# name -> (program under EXAMPLES, arguments, in the curated default set, modules it imports besides torch/tilelang).
# The curated set (issue 13's named folders first: the order in which a --budget run gets to them) holds programs that
# build on the CPU survey (bench/tilelang_survey.py), with sizes chosen to keep one side of one program to about 10 s
# on an H200 (compile, the program's torch reference, its checks and its do_bench); measured on the H200 (BENCHMARKS.md,
# round 2 session 8): about 28 s a program for both sides, so one 9-minute call runs about 15 of them.
PROGRAMS: dict[str, tuple[str, list[str], bool, tuple[str, ...]]] = {
    "rms_norm": ("norm/rms_norm.py", [], True, ()),
    "layernorm": ("norm/layernorm.py", [], True, ()),
    "gemm": ("gemm/example_gemm.py", [], True, ()),
    "mha_fwd_bshd": ("flash_attention/example_mha_fwd_bshd.py",
                     ["--batch", "8", "--heads", "32", "--seq_len", "4096", "--dim", "128"], True, ()),
    "mha_fwd_bhsd": ("flash_attention/example_mha_fwd_bhsd.py",
                     ["--batch", "8", "--heads", "32", "--seq_q", "2048", "--seq_kv", "2048", "--dim", "128"],
                     True, ()),
    "gqa_fwd_bshd": ("flash_attention/example_gqa_fwd_bshd.py",
                     ["--batch", "1", "--heads", "64", "--seq_len", "4096", "--dim", "128", "--groups", "16"],
                     True, ()),
    "mha_bwd_bshd": ("flash_attention/example_mha_bwd_bshd.py",
                     ["--batch", "8", "--h", "32", "--n_ctx", "1024", "--d_head", "64"], True, ()),
    "gqa_decode": ("flash_decoding/example_gqa_decode.py", [], True, ("einops",)),
    "mha_inference": ("flash_decoding/example_mha_inference.py", [], True, ()),
    "mla_decode": ("deepseek_mla/example_mla_decode.py", ["--batch", "64", "--kv_ctx", "4096"], True, ("einops",)),
    "mla_decode_ws": ("deepseek_mla/example_mla_decode_ws.py", ["--batch", "64", "--kv_ctx", "4096"], False,
                      ("einops",)),
    "sparse_mla_fwd": ("deepseek_v32/sparse_mla_fwd.py", [], False, ("triton",)),
    "sparse_mla_fwd_pipelined": ("deepseek_v32/sparse_mla_fwd_pipelined.py", ["--test_correctness"], False, ()),
    "sparse_mla_fwd_seesaw": ("deepseek_v32/sparse_mla_fwd_seesaw.py", ["--test_correctness"], False, ()),
    "flashmla_ws": ("warp_specialize/example_warp_specialize_flashmla.py", ["--batch", "64", "--kv_ctx", "4096"],
                    False, ("einops",)),
    "mla_decode_persistent": ("deepseek_mla/example_mla_decode_persistent.py", ["--batch", "64", "--kv_ctx", "4096"],
                              True, ("einops",)),
    "dequant_gemm_fp4": ("dequantize_gemm/example_dequant_gemm_fp4_hopper.py",
                         ["--m", "4096", "--n", "4096", "--k", "4096"], True, ()),
    "dequant_gemm_bf16_fp4": ("dequantize_gemm/example_dequant_gemm_bf16_fp4_hopper.py", [], True, ()),  # T.call_extern
    "dequant_gemv_fp16xint4": ("dequantize_gemm/example_dequant_gemv_fp16xint4.py", [], True, ()),  # + thread allreduce
    "dequant_gemm_w4a8": ("dequantize_gemm/example_dequant_gemm_w4a8.py", ["--m", "2048", "--n", "2048", "--k", "2048"],
                          True, ()),
    "retention_fwd": ("linear_attention/example_retention_fwd.py",
                      ["--B", "4", "--S", "2048", "--H", "32", "--D", "128"], True, ()),
    "gemm_splitk": ("gemm_splitk/example_tilelang_gemm_splitk.py", [], True, ()),
    "gemm_fp8": ("gemm_fp8/example_tilelang_gemm_fp8.py", [], True, ()),
    "elementwise_add": ("elementwise/example_elementwise_add.py", ["--m", "4096", "--n", "4096"], True, ()),
    "mha_sink_fwd_bhsd": ("attention_sink/example_mha_sink_fwd_bhsd.py",
                          ["--batch", "4", "--heads", "32", "--seq_q", "2048", "--seq_kv", "2048"], True, ()),
    "mha_sink_bwd_bhsd": ("attention_sink/example_mha_sink_bwd_bhsd.py",  # its [heads] fragment grown to block_M;
                          ["--batch", "1", "--h", "64", "--n_ctx", "4096", "--d_head", "128"], False, ()),  # --only
    "gqa_sink_bwd_bhsd": ("attention_sink/example_gqa_sink_bwd_bhsd.py",
                          ["--batch", "1", "--h", "64", "--n_ctx", "4096", "--d_head", "128", "--groups", "8"],
                          False, ()),
    "block_sparse_attn": ("blocksparse_attention/example_tilelang_block_sparse_attn.py", [], True, ()),
    "grouped_gemm_fwd": ("grouped_gemm/example_grouped_gemm_fwd.py", ["--batch_sizes", "64,128,256,512", "--profile"],
                         True, ()),
    "grouped_gemm_fwd_ptr": ("grouped_gemm/example_grouped_gemm_fwd_ptr.py",
                             ["--batch_sizes", "64,128,256,512", "--profile"], False, ()),  # --only
    "blocksparse_gemm": ("blocksparse_gemm/example_blocksparse_gemm.py", [], True, ()),
    "gemm_sp": ("gemm_sp/example_gemm_sp.py", [], False, ()),  # T.gemm_sp at dense speed; --only
    "gemm_int4": ("gemm_int4/example_tilelang_gemm_int4.py", [], False, ()),  # int4 tiles, m16n8k64; --only
    "convolution": ("convolution/example_convolution.py", [], True, ()),
    "online_softmax": ("online_softmax/online_softmax.py", [], True, ()),
    # not in the default set (autotuning, 16384-sized GEMMs, or long references); --all or --only runs them
    "topk": ("topk/example_topk.py", [], False, ()),
    # gemv: its main autotunes two kernels after its checks (720 configs for the alloc_reducer one): past 40 s a side
    "gemv": ("gemv/example_gemv.py", [], False, ("tvm",)),
    "mha_sink_fwd_bhsd_window": ("attention_sink/example_mha_sink_fwd_bhsd.py", ["--window_size", "1024"], False, ()),
    "dynamic_shape": ("dynamic_shape/example_dynamic.py", [], False, ()),
    "per_token_cast_fp8": ("cast/example_per_token_cast_to_fp8.py", [], False, ("triton",)),
    "convolution_autotune": ("convolution/example_convolution_autotune.py", [], False, ()),
    "gemm_streamk": ("gemm_streamk/example_tilelang_gemm_streamk.py", [], False, ()),
    "ws_copy_0_gemm_1": ("warp_specialize/example_warp_specialize_gemm_copy_0_gemm_1.py", [], False, ()),
    "ws_barrierpipe_stage2": ("warp_specialize/example_warp_specialize_gemm_barrierpipe_stage2.py", [], False, ()),
    "dsa_fp8_block_mean_pooling": ("dsa_hisa/fp8_block_mean_pooling.py", [], False, ()),
    "dsa_clean_and_maintain_logits": ("dsa_hisa/clean_and_maintain_logits.py", [], False, ()),
    "hadamard": ("hadamard_transform/example_hadamard.py", [], False, ("scipy",)),  # warp shuffles, T.Layout swizzle
    "gemm_intrinsics": ("gemm/example_gemm_intrinsics.py", [], False, ()),  # TensorCoreIntrinEmitter: mma.sync by hand
}

FOLDER: dict[str, tuple[str, list[str], bool, tuple[str, ...]]] = {}  # --folder's programs, as PROGRAMS' entries

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_MS = re.compile(r"(?i)tile-?lang[^\n]*?:\s*" + _NUM + r"\s*ms")
_MS_BARE = re.compile(r"(?i)^\s*(?:tile-?lang\s+)?(?:latency|average time):\s*" + _NUM)  # "Average time:": DSA
_MS_ONLY = re.compile(r"^\s*" + _NUM + r"\s*ms\s*$")  # "0.1234 ms" alone on a line: the last one is the kernel's
_TFLOPS = re.compile(r"(?i)tile-?lang[^\n]*?:\s*" + _NUM + r"\s*tflops")
_TFLOPS_ALT = re.compile(r"(?i)(?:tile-?lang\s+tflops:|^\s*fwd tflops\s*=)\s*" + _NUM)
_CODE = re.compile(r"error\[([EL]\d{3}|I000)\]: ([^\n]*)")


@dataclass
class Outcome:
    ok: bool
    seconds: float
    ms: float | None = None
    tflops: float | None = None
    reason: str = ""
    output: list[str] = field(default_factory=list)


def parse_metrics(stdout: str) -> tuple[float | None, float | None]:
    """(ms, TFLOP/s) of the TileLang kernel as the program printed them (the first such lines), or None."""
    ms = tflops = None
    for line in stdout.splitlines():
        if ms is None and (m := _MS.search(line) or _MS_BARE.search(line)):
            ms = float(m.group(1))
        if tflops is None and (m := _TFLOPS.search(line) or _TFLOPS_ALT.search(line)):
            tflops = float(m.group(1))
    if ms is None:
        bare = [float(m.group(1)) for line in stdout.splitlines() if (m := _MS_ONLY.search(line))]
        ms = bare[-1] if bare else None
    return ms, tflops


def failure_reason(stdout: str, stderr: str, code: int | None) -> str:
    if code is None:
        return "timed out"
    if m := _CODE.search(stderr) or _CODE.search(stdout):
        return f"{m.group(1)}: {m.group(2)[:90]}"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return (lines[-1] if lines else f"exit status {code}")[:120]


def run(command: list[str], cwd: Path, env: dict, timeout: float) -> Outcome:
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return Outcome(False, time.perf_counter() - start, *parse_metrics(out), reason="timed out")
    seconds = time.perf_counter() - start
    ms, tflops = parse_metrics(proc.stdout)
    ok = proc.returncode == 0 and not printed_mismatch(proc.stdout)
    reason = "" if ok else failure_reason(proc.stdout, proc.stderr, proc.returncode) if proc.returncode else \
        f"exit 0 but printed: {printed_mismatch(proc.stdout)}"
    return Outcome(ok, seconds, ms, tflops, reason, proc.stdout.splitlines()[-5:] + proc.stderr.splitlines()[-15:])


def printed_mismatch(stdout: str) -> str:
    """The first line where a program that exits 0 either way reports a failed check (TileLang's grouped GEMM prints
    "❌ Tilelang and Torch mismatch"), or ""."""
    return next((ln.strip()[:90] for ln in stdout.splitlines() if "\u274c" in ln), "")


def _env(pythonpath: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = pythonpath
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _cell(o: Outcome | None) -> list[str]:
    if o is None:
        return ["-", "-", "-"]
    result = "pass" if o.ok else f"FAIL ({o.reason})"
    return [result, f"{o.ms:.4g}" if o.ms is not None else "-", f"{o.tflops:.4g}" if o.tflops is not None else "-"]


def _missing(name: str) -> list[str]:
    """The modules program ``name`` imports for its baseline or helpers that are not installed here."""
    needs = _entry(name)[3]
    return [m for m in needs if m != "tvm" and importlib.util.find_spec(m) is None]


def run_program(name: str, ours_env: dict, theirs_env: dict | None, timeout: float,
                ab_env: dict | None = None) -> tuple[list[str], str]:
    """One program on both sides, one after the other: its table row and a progress line. With ``ab_env`` (ours
    with switches set), ours runs that way first, and the row ends with that run's ms and default / switched."""
    extra = _entry(name)[1]
    args = " ".join(extra) or "defaults"
    if missing := _missing(name):  # a module the program imports for its baseline or helpers is not installed here
        skipped = Outcome(False, 0.0, reason=f"needs {', '.join(missing)}")
        return ([name, args, *_cell(skipped), *_cell(skipped if theirs_env else None), "-"]
                + (["-", "-"] if ab_env else []), f"[{name}] skipped: {skipped.reason} is not installed")
    (command, cwd, _), *other = _commands(name, ours_env, theirs_env)
    switched = run(command, cwd, ab_env, timeout) if ab_env else None
    ours = run(command, cwd, ours_env, timeout)
    theirs = run(*other[0], timeout) if other else None
    ratio = "-"
    if ours.ok and theirs is not None and theirs.ok and ours.ms and theirs.ms:
        ratio = f"{theirs.ms / ours.ms:.2f}"
    line = (f"[{name}] TileAgent: {_cell(ours)[0]} in {ours.seconds:.0f} s"
            + (f"; TileLang: {_cell(theirs)[0]} in {theirs.seconds:.0f} s" if theirs else ""))
    for o, who in ((ours, "TileAgent"), (theirs, "TileLang")):
        if o is not None and not o.ok:
            line += f"\n  --- {who} output (end) ---\n  " + "\n  ".join(o.output)
    row = [name, args, *_cell(ours), *_cell(theirs), ratio]
    if switched is not None:
        x = f"{switched.ms / ours.ms:.3f}" if switched.ok and ours.ok and switched.ms and ours.ms else "-"
        row += [_cell(switched)[1] if switched.ok else _cell(switched)[0], x]
        line += f"; switched: {_cell(switched)[0]} in {switched.seconds:.0f} s"
    return row, line


def _entry(name: str) -> tuple:
    """Program ``name``'s (path, arguments, ...) row: the folder's, else the curated list's."""
    return FOLDER.get(name) or PROGRAMS[name]


def _path(name: str) -> Path:
    """Program ``name``'s file (a folder's program has an absolute path, which ``EXAMPLES /`` keeps)."""
    return EXAMPLES / _entry(name)[0]


def _commands(name: str, ours_env: dict, theirs_env: dict | None) -> list[tuple[list[str], Path, dict]]:
    """(command, folder, environment) of each side of program ``name``, as ``run_program`` runs them."""
    path, extra = _path(name), _entry(name)[1]
    out = [([sys.executable, "-m", "tileagent.tilelang", path.name, *extra], path.parent, ours_env)]
    return out + ([([sys.executable, path.name, *extra], path.parent, theirs_env)] if theirs_env else [])


def warm(names: list[str], ours_env: dict, theirs_env: dict | None, timeout: float, workers: int,
         seconds: float) -> str:
    """Run each program of ``names`` once on each side, ``workers`` processes at a time, in order, for at most
    ``seconds`` (no run starts later), and discard the results: the timed runs that follow find their kernels in the
    compile caches (ours under TILEAGENT_CACHE_DIR; TileLang's) instead of compiling them (TileLang's JIT took more
    than 60 s on three programs of the folder, session 46). Programs whose source mentions ``autotune`` are left out:
    their tuners would cache choices timed on a shared GPU. A summary line."""
    from concurrent.futures import ThreadPoolExecutor

    start = time.perf_counter()
    tuned = [n for n in names if "autotune" in _path(n).read_text()]
    jobs = [job for n in names if n not in tuned for job in _commands(n, ours_env, theirs_env)]

    def one(job) -> bool:  # whether it started
        left = seconds - (time.perf_counter() - start)
        if left > 1:
            run(*job, min(timeout, left))
        return left > 1

    with ThreadPoolExecutor(max(1, workers)) as pool:
        ran = sum(pool.map(one, jobs))
    return (f"warmed {ran} of {len(jobs)} runs ({len(names) - len(tuned)} programs, {workers} at a time) in "
            f"{time.perf_counter() - start:.0f} s; {len(tuned)} that autotune left cold")


def folder_programs(folder: Path, survey: Path | None) -> list[str]:
    """The programs of a TileLang examples folder as PROGRAMS entries (default arguments, relative paths as names):
    those ``survey`` (a ``bench/tilelang_survey.py --tsv`` file) found building, else every .py file."""
    if survey is not None:
        built = [line.split("\t")[0] for line in survey.read_text().splitlines()
                 if re.match(r"[^\t]+\t(launch|ended kernels=[1-9])", line)]
    else:
        built = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.py"))
    FOLDER.update({name: (str(folder.resolve() / name), [], False, ()) for name in built})
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated program names (default: the curated set; with --folder, paths "
                                       "in the folder)")
    parser.add_argument("--all", action="store_true", help="every program in PROGRAMS")
    parser.add_argument("--tilelang-site", help="a folder holding a real TileLang (also run the programs on it)")
    parser.add_argument("--timeout", type=float, default=90, help="seconds per program and side")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole run: a program starts only while the time left is at least the "
                             "median time a program took so far (both sides; at least 15 s), each side's limit is cut "
                             "to its share of the time left (a side stopped by that says 'timed out (budget)'), and "
                             "the programs never started are rows 'not run (budget)'")
    parser.add_argument("--ab", action="append", default=[], metavar="NAME=VALUE",
                        help="also run ours with this environment variable set (repeatable), before the default run: "
                             "the table's last columns give that run's ms and its ms / the default's")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--verbose", "-v", action="store_true", help="print the end of each failing run's output")
    parser.add_argument("--folder", help="a TileLang examples/ folder: run its programs (default arguments) instead")
    parser.add_argument("--survey", help="with --folder: bench/tilelang_survey.py's --tsv file; only the programs it "
                                         "found building for sm_90a")
    parser.add_argument("--done", help="a file of finished rows (tab-separated): their programs are skipped, and "
                                       "each program finished now is appended")
    parser.add_argument("--warm", type=int, default=0, metavar="N",
                        help="first run every program once on each side, N at a time, results discarded, for at most "
                             "half the budget: the timed runs then find their kernels compiled (programs that "
                             "autotune are left out)")
    args = parser.parse_args(argv)
    if args.folder:
        names = folder_programs(Path(args.folder), Path(args.survey) if args.survey else None)
        if args.only:  # some of the folder's programs, by their paths in it
            only = [n.strip() for n in args.only.split(",") if n.strip()]
            if unknown := [n for n in only if n not in names]:
                parser.error(f"program(s) {unknown} are not among the folder's ({len(names)} programs)")
            names = only
    elif args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in PROGRAMS]
        if unknown:
            parser.error(f"unknown program(s) {unknown}; known: {', '.join(PROGRAMS)}")
    else:
        names = [n for n, (_, _, default, _) in PROGRAMS.items() if default or args.all]
    done = Path(args.done) if args.done else None
    if done is not None and done.exists():
        finished = {line.split("\t")[0] for line in done.read_text().splitlines() if line.strip()}
        names = [n for n in names if n not in finished]
    ours_env = _env(os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                                   else [])))
    theirs_env = _env(os.pathsep.join([args.tilelang_site] + ([os.environ["PYTHONPATH"]]
                                                              if os.environ.get("PYTHONPATH") else []))) \
        if args.tilelang_site else None  # DIR first: its tilelang wins; the rest (einops...) stays reachable
    ab_env = {**ours_env, **dict(kv.split("=", 1) for kv in args.ab)} if args.ab else None
    rows, start, took = [], time.perf_counter(), []
    if args.warm:
        print(warm([n for n in names if not _missing(n)], ours_env, theirs_env, args.timeout, args.warm,
                   args.budget / 2 if args.budget is not None else float("inf")), flush=True)
    for name in names:
        left = args.budget - (time.perf_counter() - start) if args.budget is not None else float("inf")
        if left < max(15.0, statistics.median(took) if took else 0.0):
            extra = _entry(name)[1]
            rows.append([name, " ".join(extra) or "defaults", "not run (budget)", "-", "-",
                         *(["not run (budget)", "-", "-"] if theirs_env else ["-", "-", "-"]), "-"]
                        + (["-", "-"] if ab_env else []))
            continue
        began = time.perf_counter()
        sides = 1 + bool(theirs_env) + bool(ab_env)
        row, line = run_program(name, ours_env, theirs_env, min(args.timeout, left / sides), ab_env)
        took.append(time.perf_counter() - began)
        if left / sides < args.timeout:
            row = [c.replace("FAIL (timed out)", "FAIL (timed out (budget))") for c in row]
        rows.append(row)
        if done is not None and "timed out (budget)" not in " ".join(row):
            with done.open("a") as f:
                f.write("\t".join(row) + "\n")
        print(line if args.verbose else line.split("\n")[0], flush=True)
    header = ["program", "args", "TileAgent", "ms", "TFLOP/s", "TileLang", "ms", "TFLOP/s", "TileLang ms / ours"]
    if ab_env:
        header += [f"ours ms, {' '.join(args.ab)}", "that / default"]
    ran = [r for r in rows if r[2] != "not run (budget)"]
    print(f"TileAgent passed {sum(1 for r in ran if r[2] == 'pass')} of {len(ran)}"
          + (f"; TileLang passed {sum(1 for r in ran if r[5] == 'pass')}" if theirs_env else "")
          + (f"; {len(rows) - len(ran)} not run (budget {args.budget:.0f} s)" if len(ran) < len(rows) else "")
          + f"; {time.perf_counter() - start:.0f} s", flush=True)
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
    else:
        widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
        for r in [header] + rows:
            print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
