"""The built-in drafter's suite kernels as ptxas builds them for sm_90a, read without a GPU: how many bytes of global
loads each thread keeps in flight.

Usage (no GPU; NVRTC on the CPU, nvdisasm from the pip package ``nvidia-cuda-nvdisasm``):
    python bench/fusion_sass.py [--ops a,b,...] [--nvdisasm PATH] [--knob NAME=VALUE ...] [--ptx]

For each op of bench/suite/ (the built-in drafter's first draft, as bench/fusion_suite.py times it) and each of its
configs, the draft's forward runs on ``meta`` tensors under ``compiler.resources.dry_run("sm_90a")``: every kernel it
launches is compiled by NVRTC as the GPU would build it, and its cubin is disassembled. One line per launch: grid,
threads, registers, blocks per SM, the widest access per tensor, and ``inflight``: the most global-load bytes one
thread has issued and not yet used at any point of the machine code (``loads_in_flight``). A memory-bound kernel
needs about 32-64 KB in flight per SM on an H100/H200 (inflight x threads x resident blocks); the H200 measured
frobenius_norm's reduction at 16 bytes a thread (59% of a copy) and sum_dim's column sums at 128 (103%).
``--ptx``: each kernel through our PTX emitter and ptxas (``TILEAGENT_PTX=1``'s path) instead of NVRTC, to
compare the two builds' registers and loads in flight. What the figure does not see: the order in which ptxas retires loads across a loop's back edge, and the memory
system (strip widths, L2 reuse); it reads the straight-line code of each function once.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_FUNCTION = re.compile(r"\.text\.(\w+):")
_INSTRUCTION = re.compile(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?);")
_REGISTER = re.compile(r"\bR(\d+)\b")


def _width(opcode: str) -> int:
    """Bytes one LDG of ``opcode`` loads per thread."""
    for suffix, n in ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1), (".S8", 1)):
        if suffix in opcode:
            return n
    return 4


def loads_in_flight(sass: str) -> dict[str, int]:
    """Function name -> the most bytes of global loads (LDG) a thread has issued and not yet read, over its code
    in listing order. A load stops counting when an instruction reads one of its destination registers (the
    scoreboard waits for it there); EXIT and block barriers end every load; branches are not followed."""
    out: dict[str, int] = {}
    name, pending, best = None, {}, 0
    for line in sass.splitlines():
        m = _FUNCTION.search(line)
        if m:
            if name is not None:
                out[name] = best
            name, pending, best = m.group(1), {}, 0
            continue
        m = _INSTRUCTION.search(line)
        if not m or name is None:
            continue
        opcode, operands = m.group(1), m.group(2)
        regs = [int(r) for r in _REGISTER.findall(operands)]
        if opcode.startswith(("EXIT", "BAR")):
            pending = {}
            continue
        is_load = opcode.startswith("LDG")
        if is_load:  # reads only its address
            reads = [int(r) for r in re.findall(r"\[R(\d+)", operands)]
        elif opcode.startswith("ST") or not operands.lstrip().startswith("R"):  # no register destination
            reads = regs
        else:  # the first register is written
            reads = regs[1:]
        for base, width in list(pending.items()):
            if any(base <= r < base + max(1, width // 4) for r in reads):
                del pending[base]
        if is_load and regs:
            pending[regs[0]] = _width(opcode)
            best = max(best, sum(pending.values()))
    if name is not None:
        out[name] = best
    return out


def disassemble(cubin: bytes, nvdisasm: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        done = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True)
    return done.stdout


def find_nvdisasm(given: str) -> str:
    """The nvdisasm to run: --nvdisasm, $NVDISASM, PATH, or the pip package's copy."""
    for candidate in (given, os.environ.get("NVDISASM", ""), shutil.which("nvdisasm") or ""):
        if candidate and Path(candidate).is_file():
            return candidate
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in Path(root).glob("**/bin/nvdisasm"):
            return str(path)
    raise SystemExit("nvdisasm not found: pip install nvidia-cuda-nvdisasm, or pass --nvdisasm PATH")


def op_lines(path: Path, nvdisasm: str, knobs: list[str], ptx: bool = False) -> list[str]:
    """One line per launch of the op's first draft at each of its configs."""
    from bench.fusion_suite import set_knobs
    from tileagent.drafters.base import DraftTask, DrafterUnavailable
    from tileagent.drafters.builtin import BuiltinDrafter

    try:
        draft = BuiltinDrafter().draft(DraftTask(task_name=path.stem, reference_path=str(path),
                                                 reference_source=path.read_text(), configs=[], turn=1))[0]
    except DrafterUnavailable as e:
        return [f"{path.stem:22s} DECLINED {str(e)[:200]}"]
    source, missing = set_knobs(draft.source, knobs)
    with tempfile.TemporaryDirectory() as tmp:  # the DSL parses its kernels from a source file
        candidate = Path(tmp) / f"{path.stem}_candidate.py"
        candidate.write_text(source)
        loaded = importlib.util.spec_from_file_location(candidate.stem, candidate)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        return _launches(path, module, nvdisasm, [f"{path.stem:22s} (no knob {m})" for m in missing], ptx)


def _launches(path: Path, module, nvdisasm: str, lines: list[str], ptx: bool = False) -> list[str]:
    import torch

    import tileagent.compiler.runtime.nvrtc as nvrtc
    from tileagent.compiler import passes
    from tileagent.compiler.resources import dry_run
    from tileagent.compiler.runtime.ptxas import ptx_to_cubin
    from tileagent.compiler.targets.ptx import PtxUnsupported, generate
    from tileagent.evaluator.spec import load_spec

    spec = load_spec(path)
    compile_to_cubin, run_passes, cubins, units = nvrtc.compile_to_cubin, passes.run, [], []

    def keep(source, arch, options=(), **kwargs):
        unit = units[-1] if units and units[-1].source == source else None
        if ptx and unit is not None:  # the module compiler.resources just lowered, through our PTX when covered
            try:
                cubins.append(ptx_to_cubin(generate(unit.module, arch, fast_math="--use_fast_math" in options),
                                           arch))
                return cubins[-1]
            except PtxUnsupported:
                pass
        cubins.append(compile_to_cubin(source, arch, options, **kwargs))
        return cubins[-1]

    def remember(*args, **kwargs):
        units.append(run_passes(*args, **kwargs))
        return units[-1]

    nvrtc.compile_to_cubin, passes.run = keep, remember  # compiler.resources imports both at each call
    try:
        for config in spec.configs:
            model = module.ModelNew(*spec.init_inputs(config)).to("meta")
            inputs = [t.to(spec._input_dtype(k, t)) for k, t in enumerate(spec.sample_inputs(config, 0, "meta"))]
            cubins.clear()
            with dry_run("sm_90a") as run, torch.no_grad():
                model(*inputs)
            found = [loads_in_flight(disassemble(cubin, nvdisasm)) for cubin in cubins]  # one per compile, in order
            cfg = " ".join(f"{k}={v}" for k, v in config.items())
            at = 0
            for launch in run.launches:  # in launch order: the first compile from ``at`` on that has the function
                d = launch.to_dict()
                while at < len(found) and d["kernel"] not in found[at]:
                    at += 1
                inflight = found[at] if at < len(found) else {}
                lines.append(f"{path.stem:22s} {cfg:30s} {d['kernel']:14s} grid={tuple(d['grid'])} "
                             f"threads={d['threads']} regs={d['registers']} blocks/SM={d['blocks_per_sm']} "
                             f"inflight={inflight.get(d['kernel'], '?')}B access={d['access_bytes']}")
    finally:
        nvrtc.compile_to_cubin, passes.run = compile_to_cubin, run_passes
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="", help="comma-separated op names (default: every file in bench/suite)")
    ap.add_argument("--nvdisasm", default="")
    ap.add_argument("--knob", action="append", default=[], help="NAME=VALUE: set a knob of every draft (repeatable)")
    ap.add_argument("--ptx", action="store_true", help="build through our PTX emitter and ptxas, not NVRTC")
    args = ap.parse_args()
    nvdisasm = find_nvdisasm(args.nvdisasm)
    paths = sorted(p for p in (REPO / "bench" / "suite").glob("*.py"))
    if args.ops:
        wanted = set(args.ops.split(","))
        paths = [p for p in paths if p.stem in wanted]
    for path in paths:
        for line in op_lines(path, nvdisasm, args.knob, args.ptx):
            print(line, flush=True)


if __name__ == "__main__":
    main()
