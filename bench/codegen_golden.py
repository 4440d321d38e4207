"""Dump (or check) the generated CUDA of every example kernel, for proving that a compiler change is byte-identical.

Usage:
    python bench/codegen_golden.py --check            # compare with tests/golden/codegen.json; exit 1 on a change
    python bench/codegen_golden.py --write            # rewrite tests/golden/codegen.json
    python bench/codegen_golden.py --dump DIR         # write every source as DIR/<arch>/<label>.cu (for diffing)
    python bench/codegen_golden.py --cubins OLD NEW   # NVRTC both dumps: which sources give different cubins

The kernels: every program of ../shared/examples and prompts/examples at the config its ``check()`` builds (plus the
variants the acceptance tests use), each lowered without a GPU for sm_80, sm_90a (T.gemm on wgmma where it applies,
the default there) and "sm_90a-mma" (sm_90a with TileLang's pass config ``tl.disable_wgmma``: T.gemm on mma.sync, as
sm_90a lowered before wgmma became its default). The golden file holds the sha256 of each source, so a diff in the
generated code shows up as a changed hash; ``--dump`` before and after a change gives the files to diff.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED, PROMPTS = "shared", "prompts"  # ../shared/examples ($TILEAGENT_SHARED/examples), prompts/examples
GOLDEN = REPO / "tests" / "golden" / "codegen.json"
ARCHS = ("sm_80", "sm_90a")  # the NVRTC archs
# golden variant -> (arch, extra pass configs)
VARIANTS = {"sm_80": ("sm_80", {}), "sm_90a": ("sm_90a", {}), "sm_90a-mma": ("sm_90a", {"tl.disable_wgmma": True})}

# label: (folder, file stem, factory, positional args, keyword args) -- what each file's check() compiles
KERNELS = {
    "shared/gemm_relu": (SHARED, "gemm_relu", "matmul", (1024, 1024, 1024), dict(block_M=128, block_N=128, block_K=64)),
    "shared/rmsnorm_silu": (SHARED, "rmsnorm_silu", "rmsnorm_silu", (1000, 320), {}),
    "shared/softmax": (SHARED, "softmax", "softmax", (777, 2048), {}),
    "shared/flash_attn_fwd": (SHARED, "flash_attn_fwd", "flash_attn_fwd", (2, 4, 1000, 128, False), {}),
    "shared/flash_attn_fwd_causal": (SHARED, "flash_attn_fwd", "flash_attn_fwd", (2, 4, 1000, 128, True), {}),
    "shared/mla_decode": (SHARED, "mla_decode", "mla_decode", (4, 128, 1000), dict(variant="shared")),
    "shared/mla_decode_fragment": (SHARED, "mla_decode", "mla_decode", (4, 128, 1000), dict(variant="fragment")),
    "prompts/attention": (PROMPTS, "attention", "attention", (4, 128, False), {}),
    "prompts/attention_causal": (PROMPTS, "attention", "attention", (4, 128, True), {}),
    "prompts/bias_gelu": (PROMPTS, "bias_gelu", "bias_gelu", (None, 4096), {}),
    "prompts/candidate_rmsnorm_silu": (PROMPTS, "candidate_rmsnorm_silu", "rmsnorm_silu", (320, 4, 128, 1e-5), {}),
    "prompts/gemm_relu": (PROMPTS, "gemm_relu", "gemm_relu", (None, 768, 520), {}),
    "prompts/layernorm": (PROMPTS, "layernorm", "layernorm", (None, 1024), {}),
    "prompts/rmsnorm_silu": (PROMPTS, "rmsnorm_silu", "rmsnorm_silu", (1000, 320), {}),
    "prompts/rmsnorm_silu_4096": (PROMPTS, "rmsnorm_silu", "rmsnorm_silu", (None, 4096), {}),
    "prompts/softmax": (PROMPTS, "softmax", "softmax", (777, 2048), {}),
    "prompts/sum_dim1": (PROMPTS, "sum_dim1", "sum_dim1", (None, 1000, 300), {}),
}


def folder(name: str) -> Path:
    if name == PROMPTS:
        return REPO / "prompts" / "examples"
    return Path(os.environ.get("TILEAGENT_SHARED", REPO.parent / "shared")) / "examples"


def _load(where: str, stem: str):
    spec = importlib.util.spec_from_file_location(f"_golden_{where}_{stem}", folder(where) / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arch_of(variant: str) -> str:
    """The NVRTC arch of golden variant ``variant`` (an arch of ``ARCHS`` or a key of ``VARIANTS``)."""
    return VARIANTS.get(variant, (variant, {}))[0]


def source_of(label: str, arch: str) -> str:
    """The CUDA C++ of kernel ``label`` lowered for ``arch`` (an arch or a key of ``VARIANTS``; no GPU needed)."""
    from tileagent.compiler import CompileError, compile as compile_kernel

    where, stem, factory, args, kwargs = KERNELS[label]
    impl = getattr(_load(where, stem), factory)
    func = impl.fn(*args, **kwargs)
    arch, extra = VARIANTS.get(arch, (arch, {}))
    configs = {**(impl.pass_configs or {}), **extra}
    try:
        kernel = compile_kernel(func, out_idx=impl.out_idx, target=f"cpu:{arch}", pass_configs=configs)
    except CompileError as e:
        if e.code != "E601":
            raise
        # before the compiler knew its targets (unknown target "cpu:<arch>"): the lowering ignored the arch
        kernel = compile_kernel(func, out_idx=impl.out_idx, target="cpu", pass_configs=configs)
    return kernel.get_kernel_source()


def hashes() -> dict:
    return {label: {arch: hashlib.sha256(source_of(label, arch).encode()).hexdigest() for arch in VARIANTS}
            for label in KERNELS}


def compare_cubins(old: Path, new: Path) -> int:
    """Compile every source of two ``--dump`` folders with NVRTC (with and without fast math) and report those whose
    cubins differ: a source change with identical cubins cannot change a kernel's speed."""
    from tileagent.compiler.runtime.nvrtc import compile_to_cubin

    differ = same = 0
    for variant in VARIANTS:
        arch = arch_of(variant)
        for path in sorted((new / variant).glob("*.cu")):
            if not (old / variant / path.name).exists():
                continue
            before, after = (old / variant / path.name).read_text(), path.read_text()
            if before == after:
                continue
            for options in ((), ("--use_fast_math",)):
                equal = compile_to_cubin(before, arch, options, cache=False) == \
                    compile_to_cubin(after, arch, options, cache=False)
                same, differ = same + equal, differ + (not equal)
                if not equal:
                    print(f"different cubin: {variant} {path.stem} {' '.join(options)}")
    print(f"{same} changed sources compile to identical cubins, {differ} to different ones")
    return 1 if differ else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true")
    g.add_argument("--write", action="store_true")
    g.add_argument("--dump", metavar="DIR")
    g.add_argument("--cubins", nargs=2, metavar=("OLD", "NEW"))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if a.cubins:
        return compare_cubins(*map(Path, a.cubins))
    if a.dump:
        for label in KERNELS:
            for variant in VARIANTS:
                path = Path(a.dump) / variant / f"{label.replace('/', '__')}.cu"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(source_of(label, variant))
        print(f"wrote {len(KERNELS) * len(VARIANTS)} sources under {a.dump}")
        return 0
    now = hashes()
    if a.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
        return 0
    want = json.loads(GOLDEN.read_text())
    changed = [f"{label} {arch}" for label in sorted(set(want) | set(now)) for arch in VARIANTS
               if want.get(label, {}).get(arch) != now.get(label, {}).get(arch)]
    for c in changed:
        print(f"changed: {c}")
    print(f"{len(changed)} of {len(KERNELS) * len(VARIANTS)} sources changed")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
