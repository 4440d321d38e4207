"""``tilelang.contrib.nvcc`` under the compatibility layer: TileLang's (TVM's) CUDA compute-capability helpers.

In: an optional target (a ``tvm.target.Target``, a target string such as ``"cuda -arch=sm_90a"``, or None) or a
compute version string. Out: TileLang's results: ``get_target_compute_version()`` -> ``"9.0"`` (from the target's
``arch``, else from CUDA device 0 through torch), ``parse_compute_version("9.0")`` -> ``(9, 0)``,
``get_target_arch("9.0")`` -> ``"90"``, and the ``have_*`` feature predicates.
Guarantees: without an arch and without a CUDA device, ``get_target_compute_version`` raises TileLang's ValueError
(``"No CUDA architecture was specified or GPU detected..."``); a malformed version string is a RuntimeError as in
TileLang. Compiling with nvcc (``compile_cuda``) is not provided: TileAgent compiles with NVRTC (E701).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import UnsupportedError


def _arch_of(target) -> str | None:
    if target is None:
        return None
    attrs = getattr(target, "attrs", None)
    if attrs is not None:
        return str(attrs["arch"]) if "arch" in attrs else None
    for word in str(target).split():
        if word.lstrip("-").startswith("arch="):
            return word.split("=", 1)[1]
    kind, _, arch = str(target).split()[0].partition(":") if str(target).split() else ("", "", "")
    return arch or None


def get_target_compute_version(target=None) -> str:
    """The compute capability (``"8.6"``, ``"9.0"``) of ``target``'s arch, else of CUDA device 0."""
    arch = _arch_of(target)
    if arch:
        digits = arch.split("_")[1].rstrip("af") if "_" in arch else arch
        if len(digits) == 2:
            return digits[0] + "." + digits[1]
        if len(digits) == 3:
            return digits[:2] + "." + digits[2]
        raise ValueError(f"Unsupported arch: {digits}")
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return f"{major}.{minor}"
    raise ValueError("No CUDA architecture was specified or GPU detected. Specify it with a target config such as "
                     "{'kind': 'cuda', 'arch': 'sm_90'}.")


def parse_compute_version(compute_version) -> tuple[int, int]:
    """``"9.0"`` -> ``(9, 0)``."""
    split_ver = str(compute_version).split(".")
    try:
        return int(split_ver[0]), int(split_ver[1])
    except (IndexError, ValueError) as err:
        raise RuntimeError("Compute version parsing error") from err


def get_target_arch(compute_version) -> str:
    """``"9.0"`` -> ``"90"`` (``"90a"`` is not implied: TileLang adds the suffix where it compiles)."""
    major, minor = parse_compute_version(compute_version) if isinstance(compute_version, str) else compute_version
    return str(major * 10 + minor)


def have_fp16(compute_version) -> bool:
    major, minor = parse_compute_version(compute_version)
    return major > 5 or (major == 5 and minor >= 3)


def have_int8(compute_version) -> bool:
    return parse_compute_version(compute_version)[0] >= 6


def have_tensorcore(compute_version=None, target=None) -> bool:
    version = compute_version if compute_version is not None else get_target_compute_version(target)
    return parse_compute_version(version)[0] >= 7


def have_bf16(compute_version) -> bool:
    return parse_compute_version(compute_version)[0] >= 8


def have_fp8(compute_version) -> bool:
    return parse_compute_version(compute_version) >= (8, 9)


def have_tma(target=None) -> bool:
    return parse_compute_version(get_target_compute_version(target))[0] >= 9


def compile_cuda(*args, **kwargs):
    raise UnsupportedError("tilelang.contrib.nvcc.compile_cuda is not provided: TileAgent compiles the CUDA it "
                           "generates with NVRTC (kernel.get_kernel_source() shows it)",
                           hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


__all__ = ["compile_cuda", "get_target_arch", "get_target_compute_version", "have_bf16", "have_fp16", "have_fp8",
           "have_int8", "have_tensorcore", "have_tma", "parse_compute_version"]
