"""TileLang's CUDA and ours for one kernel factory of a TileLang program, side by side, without a GPU.

Usage (repository root):
    python bench/tilelang_source.py SCRIPT FACTORY 'ARGS' [--out DIR]
        [--tilelang-site DIR --tilelang-python PYTHON]

SCRIPT is a TileLang program (``bench/tilelang_examples/...``), FACTORY its ``@tilelang.jit`` function (through an
``@autotune`` wrapper too), ARGS the factory's arguments as Python (``'8,32,1024,64,False,64,64'``; keywords too:
``'M=1024, N=1024, K=1024, block_M=128, block_N=128, block_K=32'`` for a program's ``T.const`` sizes).
Writes DIR/tileagent.cu and, with real TileLang, DIR/tilelang.cu, and prints each kernel's registers and spills
(ptxas -v through our NVRTC, sm_90a, with the program's fast-math setting; TileLang's source gets the
``tl_templates``, CUTLASS and CCCL headers of its own pack). How round 2 session 30 found what held the attention
backward (scalar dQ atomics), the retention forward (2-byte loads, 178 registers against TileLang's 156) and the
split-KV decode (no producer warpgroup) behind TileLang, before any GPU time.

Real TileLang: the pack of ``../shared/tools/tilelang-on-device.sh`` unpacked (``tar -xJf .tl/tl_site.tar.xz -C
DIR``) and a Python 3.12 (the pack's ABI) with torch, psutil, cloudpickle, ml_dtypes and whatever the program
imports; TileLang lowers for ``{"kind": "cuda", "arch": "sm_90a"}`` without a GPU (``tilelang.lower``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Run by --tilelang-python with the pack on PYTHONPATH: argv = script, factory, args, output file.
_TILELANG = """
import importlib.util, sys
import tilelang
from tilelang import tvm
spec = importlib.util.spec_from_file_location("program", sys.argv[1])
program = importlib.util.module_from_spec(spec)
spec.loader.exec_module(program)
factory = getattr(program, sys.argv[2])
factory = getattr(factory, "jit_impl", factory)  # an @autotune wrapper
args, kwargs = eval("(lambda *a, **k: (a, k))(" + sys.argv[3] + ")")
func = factory.get_tir(*args, **kwargs)
target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
with target:
    open(sys.argv[4], "w").write(tilelang.lower(func, target=target).kernel_source)
"""


def ours(script: Path, factory: str, args: str, out: Path) -> tuple[str, tuple]:
    """(our CUDA source for sm_90a, the NVRTC options the program's pass configs give)."""
    from tileagent.compat.run import load_script
    from tileagent.compiler.jit import nvrtc_options
    import tileagent

    impl = load_script(script)[factory]
    impl = getattr(impl, "jit_impl", impl)
    configs = getattr(impl, "pass_configs", None)
    args, kwargs = eval("(lambda *a, **k: (a, k))(" + args + ")")
    kernel = tileagent.compile(impl.get_tir(*args, **kwargs), target="cuda:sm_90a", pass_configs=configs)
    source = kernel.get_kernel_source()
    out.write_text(source)
    return source, nvrtc_options(kernel.pass_configs)


def tilelang(script: Path, factory: str, args: str, out: Path, site: Path, python: str) -> str | None:
    env = {**os.environ, "PYTHONPATH": str(site), "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda")}
    done = subprocess.run([python, "-c", _TILELANG, str(script), factory, args, str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        print(f"TileLang failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    return out.read_text()


def ptxas_lines(source: str, options: tuple, include: list[str]) -> list[str]:
    from tileagent.compiler.runtime.nvrtc import compile_log

    log = compile_log(source, "sm_90a", ("--ptxas-options=-v", *options, *(f"-I{d}" for d in include)))
    return [line for line in str(log).splitlines() if "Compiling entry" in line or "registers" in line or
            "spill" in line]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("script", type=Path)
    ap.add_argument("factory")
    ap.add_argument("args", help="the factory's arguments, as Python (positional and keyword)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/tilelang_source"))
    ap.add_argument("--tilelang-site", type=Path, help="the unpacked TileLang pack")
    ap.add_argument("--tilelang-python", default="python3.12")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    source, options = ours(a.script, a.factory, a.args, a.out / "tileagent.cu")
    print(f"TileAgent: {a.out / 'tileagent.cu'}")
    print("\n".join(ptxas_lines(source, options, [])))
    if a.tilelang_site is None:
        return 0
    theirs = tilelang(a.script.resolve(), a.factory, a.args, a.out / "tilelang.cu", a.tilelang_site,
                      a.tilelang_python)
    if theirs is None:
        return 1
    import site

    headers = [str(a.tilelang_site / "tilelang/src"), str(a.tilelang_site / "tilelang/3rdparty/cutlass/include")]
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
    headers += [str(cuda / "cccl"), str(cuda)] + [str(Path(p) / "nvidia/cu13/include") for p in site.getsitepackages()]
    print(f"TileLang: {a.out / 'tilelang.cu'}")
    print("\n".join(ptxas_lines("#include <tl_templates/cuda/nvrtc_std.h>\n" + theirs, options + (
        "-default-device", "-std=c++17"), headers)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
