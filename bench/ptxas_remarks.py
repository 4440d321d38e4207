"""The ptxas performance remarks (C75xx) of every tensor-core kernel the benches and checks compile for sm_90a.

Usage (no GPU needed; NVRTC on the CPU): TILEAGENT_SHARED=/path/to/shared python bench/ptxas_remarks.py [--only SUBSTR]

ptxas compiles a wgmma kernel whose accumulator registers are touched while a wgmma is in flight correctly but
serialized, and says so only as an info line of the program log: C7517 / C7519 "warpgroup.wait is injected ...",
C7514 "wgmma.mma_async instructions are serialized ...". This lists, for each kernel of bench/tensor_core.py (its
checks at their own sizes and its timed calls at the issue's sizes) and bench/codegen_golden.py (../shared/examples
and prompts/examples at their check() configs), the gemm instructions chosen (``get_ir("thread")``) and every remark,
compiled for sm_90a exactly as the GPU would (same source, fast math as the program asks). Exit code 1 when any
kernel has a remark.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import codegen_golden as G  # noqa: E402


def kernels():
    """(label, PrimFunc, pass_configs) of every kernel checked: tensor_core.py's, then codegen_golden's."""
    gemm, fa, mla = (G._load(G.SHARED, n) for n in ("gemm_relu", "flash_attn_fwd", "mla_decode"))
    tuned = {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 128}  # bench/tensor_core.py TUNED_FA
    yield "tensor_core gemm_relu check 1024^3", gemm.matmul.fn(1024, 1024, 1024, 128, 128, 64), None
    for n in (4096, 8192):
        yield f"tensor_core gemm_relu {n}^3", gemm.matmul.fn(n, n, n, 128, 128, 64), None
    for causal in (False, True):
        yield f"tensor_core flash_attn check S1000 causal={causal}", fa.flash_attn_fwd.fn(2, 4, 1000, 128, causal), None
    for causal, schedule in ((False, {}), (False, tuned), (True, tuned)):
        label = "/".join(str(x) for x in schedule.values()) or "default"
        yield (f"tensor_core flash_attn B8 H32 S4096 D128 causal={causal} {label}",
               fa.flash_attn_fwd.fn(8, 32, 4096, 128, causal, **schedule), None)
    for variant in ("shared", "fragment"):
        yield f"tensor_core mla_decode check {variant}", mla.mla_decode.fn(4, 128, 1000, variant=variant), None
        yield (f"tensor_core mla_decode B64 H128 ctx8192 {variant}", mla.mla_decode.fn(64, 128, 8192, variant=variant),
               None)
    for label, (where, stem, factory, args, kwargs) in G.KERNELS.items():
        impl = getattr(G._load(where, stem), factory)
        yield f"golden {label}", impl.fn(*args, **kwargs), impl.pass_configs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="only kernels whose label contains this")
    a = ap.parse_args(argv)
    import tileagent
    from tileagent.compiler.jit import nvrtc_options
    from tileagent.compiler.runtime.nvrtc import compile_log, ptxas_remarks

    bad = 0
    for label, func, configs in kernels():
        if a.only and a.only not in label:
            continue
        kernel = tileagent.compile(func, target="cpu:sm_90a", pass_configs=configs, lowering_check=True)
        src = kernel.get_kernel_source()
        gemms = sorted({line.split(": ", 1)[1].split(";")[0] for line in kernel.get_ir("thread").splitlines()
                        if "# T.gemm at line" in line})
        if not gemms:
            continue
        t0 = time.process_time()
        remarks = ptxas_remarks(compile_log(src, "sm_90a", nvrtc_options(kernel.pass_configs)))
        bad += bool(remarks)
        print(f"{label}: {len(remarks)} remark(s), NVRTC {time.process_time() - t0:.1f} s CPU", flush=True)
        for g in gemms:
            print(f"    gemm: {g}")
        for r in remarks:
            print(f"    {r}")
    print(f"{bad} kernel(s) with ptxas remarks")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
