"""Prove that NVRTC's compile-time options (compiler/runtime/nvrtc.py ``speed_options``) leave every cubin unchanged.

Usage: python bench/nvrtc_identity.py [--arch sm_80 --arch sm_90a] [--label prompts/rmsnorm_silu ...]

For every example kernel of bench/codegen_golden.py (../shared/examples and prompts/examples, lowered without a GPU),
each arch, with and without ``--use_fast_math``, compiles the source three times with the on-disk cache off: without
the options (``TILEAGENT_NVRTC_PCH=0 TILEAGENT_NVRTC_CACHE=1``, the compilation before they existed), with them while
the precompiled header is made, and with them while it is used (sources without ``#include`` lines get no PCH: then
the last two are ``--no-cache`` alone). The three cubins must be byte-identical (the whole
ELF image: code, resource usage, metadata). Prints one line per difference and a count; exit status 1 on any
difference. Also prints the summed NVRTC CPU seconds of each of the three ways.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WAYS = {"plain": {"TILEAGENT_NVRTC_PCH": "0", "TILEAGENT_NVRTC_CACHE": "1"},
        "create-pch": {"TILEAGENT_NVRTC_PCH": "1", "TILEAGENT_NVRTC_CACHE": "0"},
        "use-pch": {"TILEAGENT_NVRTC_PCH": "1", "TILEAGENT_NVRTC_CACHE": "0"}}


def cubins(source: str, arch: str, options: tuple[str, ...]) -> tuple[dict, dict]:
    """{way: cubin} and {way: NVRTC CPU seconds} for one source; its precompiled header (if it gets one) is made anew."""
    from tileagent.compiler.runtime import nvrtc

    out, cpu = {}, {}
    key = nvrtc.pch_key(source, nvrtc.base_options(arch, options))
    if key is not None:
        nvrtc._drop_pch(key)
    saved = {k: os.environ.get(k) for k in WAYS["plain"]}
    try:
        for way, env in WAYS.items():
            os.environ.update(env)
            out[way] = nvrtc.compile_to_cubin(source, arch, options, cache=False)
            cpu[way] = nvrtc.last_compile["cpu_s"]
            if way == "create-pch" and key is not None and key not in nvrtc._PCH:
                raise SystemExit(f"no precompiled header was made for {arch} {' '.join(options)}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return out, cpu


def main(argv=None) -> int:
    from bench.codegen_golden import ARCHS, KERNELS, source_of

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", choices=ARCHS, help="default: all of " + ", ".join(ARCHS))
    ap.add_argument("--label", action="append", choices=sorted(KERNELS), help="default: every example kernel")
    a = ap.parse_args(argv)
    differ = same = 0
    total = dict.fromkeys(WAYS, 0.0)
    for label in a.label or KERNELS:
        for arch in a.arch or ARCHS:
            source = source_of(label, arch)
            for options in ((), ("--use_fast_math",)):
                out, cpu = cubins(source, arch, options)
                for way in WAYS:
                    total[way] += cpu[way]
                bad = [way for way in WAYS if out[way] != out["plain"]]
                same, differ = same + (not bad), differ + bool(bad)
                for way in bad:
                    print(f"different cubin: {label} {arch} {' '.join(options)} ({way} vs plain)")
    print(f"{same} compilations give byte-identical cubins with and without the compile-time options, "
          f"{differ} differ; NVRTC CPU seconds: " + ", ".join(f"{w} {s:.2f}" for w, s in total.items()))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
