"""How a CUDA source's NVRTC compile splits between NVVM (CUDA C++ -> PTX) and ptxas (PTX -> cubin).

Usage: python bench/nvvm_ptxas_split.py SOURCE.cu [--runs 5] [--arch sm_90a]
The source is compiled to PTX by NVRTC with TileAgent's options (``compute_XXa``), then assembled by the ptxas
program (``compiler.runtime.ptxas.assembler()``); each run appends a distinct comment so nothing is cached. Prints
the minimum seconds of each part over the runs and the PTX's line count. Used for issue 12's cold compile of MLA
decode (BENCHMARKS.md, round 2 session 24): write a kernel's source with ``kernel.get_kernel_source()``, edit it, and
compare.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--arch", default="sm_90a")
    a = ap.parse_args()
    from cuda.bindings import nvrtc

    from tileagent.compiler.runtime import nvrtc as nv
    from tileagent.compiler.runtime.ptxas import assembler

    program = assembler()
    if program is None or not program.startswith("ptxas "):
        sys.exit("no ptxas program found (TILEAGENT_PTXAS, PATH, CUDA_HOME)")
    ptxas = program.split()[1]
    opts = [o.replace(a.arch, a.arch.replace("sm_", "compute_")).encode() for o in nv.base_options(a.arch)]
    src = Path(a.source).read_text()
    times, lines = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(a.runs):
            _, prog = nvrtc.nvrtcCreateProgram((src + f"\n// run {run} {time.time()}\n").encode(), b"k.cu", 0, [], [])
            t0 = time.perf_counter()
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            nvvm = time.perf_counter() - t0
            if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                sys.exit(f"NVRTC failed: {err}")
            _, size = nvrtc.nvrtcGetPTXSize(prog)
            buf = b" " * size
            nvrtc.nvrtcGetPTX(prog, buf)
            ptx = Path(tmp) / "k.ptx"
            ptx.write_bytes(buf.rstrip(b"\0"))
            lines = ptx.read_text().count("\n")
            t0 = time.perf_counter()
            subprocess.run([ptxas, f"-arch={a.arch}", str(ptx), "-o", str(Path(tmp) / "k.cubin")], check=True)
            times.append((nvvm, time.perf_counter() - t0))
    print(f"NVVM {min(t for t, _ in times):.3f} s, ptxas {min(t for _, t in times):.3f} s (min of {a.runs}), "
          f"{lines} PTX lines")


if __name__ == "__main__":
    main()
