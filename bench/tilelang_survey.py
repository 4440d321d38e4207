"""How far each of TileLang's example programs gets on TileAgent without a GPU: a survey of the compatibility gaps.

In: a folder of TileLang example programs (``examples/`` of a TileLang checkout: ``git archive`` the repository, or
the ``fetch`` mirror), optionally ``--only`` sub-folders, a time limit per program and a number of parallel jobs.
Out: one line per program and a count per outcome: ``launch`` (every kernel built before the program's first kernel
launch compiled and passed the GPU lowering, for sm_90a), a TileAgent diagnostic (``E701 T.ptr``...), a missing
Python package, or another exception; ``--tsv FILE`` keeps the lines.
How: each program runs in its own process, under ``tileagent.compat`` (``import tilelang`` is TileAgent), with
torch's ``device="cuda"`` tensors and the profiler's generated inputs made ``meta`` tensors (``--device cpu``: CPU
tensors, for programs that read data on the host; a reference the profiler runs before the kernel then computes on
the CPU), ``torch.cuda`` answering as one sm_90 device (an H200's properties: 132 SMs), kernels built for the CPU
target with ``lowering_check=True`` (``--nvrtc``: also compiled by NVRTC; ``--dump DIR``: each kernel's CUDA
written to DIR), and the first kernel launch stopping the program.
Guarantees: nothing is timed and no result is checked: "launch" means the program's kernels build for the GPU, not
that they compute the right values (``bench/tilelang_examples.py`` runs programs for real on a GPU, and CI runs a
subset on the CPU). Programs that need data-dependent host work (``.item()`` on a fake tensor) run again with CPU
tensors (their line ends ``[again with --device cpu]``; ``--no-cpu-retry``: they report the harness limit); at full
size on the CPU such a run may time out.

    python bench/tilelang_survey.py /tmp/tilelang/examples --only flash_attention,norm --jobs 2
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = r'''
import importlib, os, runpy, sys, types
import torch

DEVICE = os.environ["SURVEY_DEVICE"]


def _dev(kw):
    if "cuda" in str(kw.get("device", "")):
        kw["device"] = DEVICE
    return kw


for _name in ("randn", "rand", "randint", "zeros", "ones", "empty", "full", "tensor", "arange", "randn_like",
              "rand_like", "zeros_like", "ones_like", "empty_like", "full_like", "linspace", "eye", "randperm",
              "empty_strided", "as_tensor", "normal"):
    _f = getattr(torch, _name)
    setattr(torch, _name, lambda *a, __f=_f, **kw: __f(*a, **_dev(kw)))
torch.Tensor.cuda = lambda self, *a, **k: self.to(DEVICE)
_Generator = torch.Generator


class _SurveyGenerator(_Generator):  # a device="cuda" generator draws on the CPU (fused MoE's inputs)
    def __new__(cls, device="cpu"):
        return _Generator("cpu" if "cuda" in str(device) else device)


torch.Generator = _SurveyGenerator
_to = torch.Tensor.to
torch.Tensor.to = lambda self, *a, **kw: _to(self, *(DEVICE if isinstance(x, (str, torch.device)) and "cuda" in str(x)
                                                    else x for x in a), **_dev(kw))
torch.cuda.is_available = lambda: True
torch.cuda.get_device_capability = lambda *a: (9, 0)
torch.cuda.current_device = lambda: 0
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_name = lambda *a: "survey (no GPU)"
torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(  # an H200's, for driver.get_num_sms()
    name="survey (no GPU)", major=9, minor=0, multi_processor_count=132, shared_memory_per_block=48 * 1024,
    shared_memory_per_block_optin=227 * 1024, shared_memory_per_multiprocessor=228 * 1024,
    regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, L2_cache_size=60 * 1024 * 1024,
    total_memory=141 * 2**30)
for _name in ("synchronize", "manual_seed", "manual_seed_all", "empty_cache"):
    setattr(torch.cuda, _name, lambda *a, **k: None)

target = importlib.import_module("tileagent.compiler.target")
target.device_target = lambda: target.for_arch("sm_90a", "cpu")
jit = importlib.import_module("tileagent.compiler.jit")
jit.set_compile_defaults(lowering_check=True)
built = [0]
_init = jit.JITKernel.__init__


def _counting_init(self, *a, **kw):
    _init(self, *a, **kw)
    built[0] += 1
    if os.environ.get("SURVEY_NVRTC"):
        self.cubin("sm_90a")
    if os.environ.get("SURVEY_DUMP"):  # --dump: the kernel's CUDA for sm_90a
        name = f"{os.path.splitext(os.path.basename(sys.argv[0]))[0]}.{built[0]}.cu"
        with open(os.path.join(os.environ["SURVEY_DUMP"], name), "w") as f:
            f.write(self.get_kernel_source())


class Launch(BaseException):
    pass


def _launch(self, *a):
    raise Launch()


jit.JITKernel.__init__ = _counting_init
profiler = importlib.import_module("tileagent.compiler.profiler")  # its inputs on the survey's device too (the
_supply = profiler.supply_tensor  # reference of assert_allclose runs before the launch: not on real CPU tensors)
profiler.supply_tensor = lambda shape, dtype, supply_type, device: _supply(shape, dtype, supply_type, DEVICE)
jit.JITKernel.__call__ = _launch
from tileagent import compat
from tileagent.compiler.diagnostics import CompileError

compat.install()
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
try:
    runpy.run_path(script, run_name="__main__")
    print(f"SURVEY ended kernels={built[0]}")
except Launch:
    print(f"SURVEY launch kernels={built[0]}")
except SystemExit as e:
    print(f"SURVEY exit-{e.code} kernels={built[0]}")
except CompileError as e:
    print(f"SURVEY {e.code} kernels={built[0]}: {e.message.splitlines()[0][:160]}")
except BaseException as e:  # noqa: BLE001 -- the survey reports whatever stopped the program
    print(f"SURVEY {type(e).__name__} kernels={built[0]}: {str(e).splitlines()[0][:160] if str(e) else ''}")
'''


def survey_one(path: Path, timeout: float, device: str, nvrtc: bool, dump: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(REPO), SURVEY_DEVICE=device, PYTHONUNBUFFERED="1")
    if nvrtc:
        env["SURVEY_NVRTC"] = "1"
    if dump is not None:
        env["SURVEY_DUMP"] = str(dump.resolve())
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, path.name], cwd=path.parent, env=env, text=True,
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout:.0f} s"
    found = [ln[len("SURVEY "):] for ln in proc.stdout.splitlines() if ln.startswith("SURVEY ")]
    if found:
        return found[-1]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return f"crashed (exit {proc.returncode}): {lines[-1][:160] if lines else ''}"


SURVEY_LIMIT = "survey limit: data-dependent host work on a fake device (retry with --device cpu)"
CPU_RETRY = "again with --device cpu"


def outcome(result: str) -> str:
    """The group a result line counts under."""
    if result.startswith("launch") or re.match(r"ended kernels=[1-9]", result):
        return "builds for sm_90a (up to its first kernel launch)"
    if result.startswith("ended kernels=0") or result.startswith("exit-0"):
        return "no kernel built (a helper module, or nothing runs under __main__)"
    if m := re.search(r"No module named '([^'.]+)", result):
        return f"needs Python package {m.group(1)}"
    if "meta tensor" in result.lower() or "register_meta" in result or "CUDA generator" in result:
        return SURVEY_LIMIT
    if m := re.match(r"(E701) kernels=\d+: (?:T\.(\w+)|module '([\w.]+)'|(tilelang\.\w+))", result):
        return f"E701 unsupported: {'T.' + m.group(2) if m.group(2) else m.group(3) or m.group(4)}"
    if m := re.match(r"([EL]\d{3}|I000) kernels=\d+: (.{0,70})", result):
        return f"{m.group(1)}: {m.group(2)}"
    return result.split(":")[0][:60]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("examples", help="TileLang's examples/ folder")
    parser.add_argument("--only", help="comma-separated sub-folders (default: all)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per program")
    parser.add_argument("--jobs", type=int, default=1, help="programs surveyed at once")
    parser.add_argument("--device", choices=("meta", "cpu"), default="meta", help="what device='cuda' tensors become")
    parser.add_argument("--no-cpu-retry", action="store_true",
                        help="keep the survey-limit result of a program that needs host work on real tensors (by "
                             "default it runs again with --device cpu, and its line says so)")
    parser.add_argument("--nvrtc", action="store_true", help="also compile every kernel built with NVRTC")
    parser.add_argument("--tsv", help="write 'program<TAB>result' lines to this file")
    parser.add_argument("--dump", type=Path, help="write each kernel's CUDA (sm_90a) here as <program>.<n>.cu")
    args = parser.parse_args(argv)
    root = Path(args.examples)
    folders = [root / f.strip() for f in args.only.split(",")] if args.only else [root]
    programs = sorted(p for f in folders for p in f.rglob("*.py") if not p.name.startswith("test_"))
    if args.dump is not None:
        args.dump.mkdir(parents=True, exist_ok=True)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda p: survey_one(p, args.timeout, args.device, args.nvrtc, args.dump), programs))
        if args.device == "meta" and not args.no_cpu_retry:  # host work on fake tensors: again on CPU tensors
            again = [k for k, r in enumerate(results) if outcome(r) == SURVEY_LIMIT]
            retried = pool.map(lambda k: survey_one(programs[k], args.timeout, "cpu", args.nvrtc, args.dump), again)
            for k, r in zip(again, retried):
                results[k] = f"{r} [{CPU_RETRY}]"
    groups = collections.defaultdict(list)
    lines = []
    for p, r in zip(programs, results):
        rel = str(p.relative_to(root))
        lines.append(f"{rel}\t{r}")
        groups[outcome(r)].append(rel)
        print(f"{rel}: {r}", flush=True)
    if args.tsv:
        Path(args.tsv).write_text("\n".join(lines) + "\n")
    print(f"\n{len(programs)} programs")
    for name, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(members):4d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
