"""PTX -> cubin with ptxas, behind the NVRTC cache's directory and entry format.

In: a PTX module (``compiler.targets.ptx.generate``) and an arch such as ``"sm_90a"``. Out: cubin bytes that
``compiler.runtime.launch.LoadedModule`` loads, as NVRTC's are.
Guarantees:

- The assembler (``assembler()``): the ``ptxas`` program of CUDA 12.0 or later (``$TILEAGENT_PTXAS``, a path, else
  ``ptxas`` on ``PATH``, in ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin`` or the ``nvidia-cuda-nvcc`` wheel), which
  compiles the whole program as NVRTC's embedded ptxas does; else nvJitLink in this process (the
  ``nvidia-nvjitlink`` wheel, found by ``cuda.pathfinder``), which compiles PTX as relocatable code
  (``--compile-only``): correct, but ptxas then allocates more registers (rmsnorm_silu: 48 against 32; at C=4096 80
  against 64, a quarter of its blocks per SM), so the program comes first (``TILEAGENT_PTXAS=nvjitlink`` chooses
  nvJitLink: ~7 ms less per compile, no process).
- ``enabled(options)``: whether a compile with these NVRTC options takes this path: the options are ones the PTX
  emitter honours (none, or ``--use_fast_math``) and ``$TILEAGENT_PTX`` is unset or empty (the default: when the
  ptxas program is here: on the H200 the 27 covered drafter kernels ran at 0.95-1.03x NVRTC's cubin's time and the
  8 covered example kernels at 0.87-1.03x, ``bench/ptx_suite_ab.py`` / ``bench/cubin_ab.py --ptx``, and
  rmsnorm_silu compiled in 0.09-0.10 s against 0.14-0.17 s), ``1`` (ptxas, else nvJitLink) or ``0`` (NVRTC for
  everything).
- ptxas runs at its default optimization level (``-O3``), as inside NVRTC; the program under a 120 s time limit.
- Cache: ``<nvrtc cache dir>/ptx-<sha256>.cubin``, keyed by the PTX, the arch, ``compiler.__version__`` and the
  assembler (the program's path and version line, or nvJitLink's version); written atomically; a corrupt entry is
  ignored and rewritten.
- A PTX module ptxas rejects raises :class:`PtxasError` with ptxas's error log and the PTX (a bug of the emitter: the
  caller logs it and compiles the CUDA C++ with NVRTC instead).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from tileagent.compiler.errors import KernelRuntimeError

logger = logging.getLogger(__name__)

MIN_RELEASE = (12, 0)  # PTX ISA 8.0 (what compiler.targets.ptx writes for sm_90a) and sm_90a
last_compile = {"wall_s": 0.0, "cpu_s": 0.0}  # the latest ptxas run of this process (bench/compile_latency.py)


class PtxasError(KernelRuntimeError):
    """nvJitLink rejected a PTX module; ``log`` is its error log, ``ptx`` the module."""

    def __init__(self, message: str, log: str = "", ptx: str = ""):
        super().__init__(message)
        self.log, self.ptx = log, ptx


@functools.lru_cache(maxsize=1)
def version() -> tuple[int, int] | None:
    """nvJitLink's (major, minor), or None when it cannot be loaded here."""
    try:
        from cuda.bindings import nvjitlink

        return tuple(nvjitlink.version())
    except Exception as e:  # noqa: BLE001 -- a missing library shows up as any of several errors
        logger.debug("nvJitLink is not available (%s: %s); kernels compile with NVRTC", type(e).__name__, e)
        return None


@functools.lru_cache(maxsize=4)
def _program(given: str | None) -> tuple[str, str] | None:
    """(path, version line) of a working ptxas program, or None."""
    homes = [os.path.join(os.environ[v], "bin", "ptxas") for v in ("CUDA_HOME", "CUDA_PATH") if v in os.environ]
    wheels = [os.path.join(p, "nvidia", "cu13", "bin", "ptxas") for p in sys.path if p]
    candidates = [given] if given else [shutil.which("ptxas"), *homes, "/usr/local/cuda/bin/ptxas", *wheels]
    for path in filter(None, candidates):
        if not os.access(path, os.X_OK):
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        release = re.search(r"release (\d+)\.(\d+)", out.stdout)
        if out.returncode == 0 and release and (int(release[1]), int(release[2])) >= MIN_RELEASE:
            return path, (out.stdout.strip().splitlines() or [""])[-1]
        logger.debug("%s is not a ptxas of CUDA %d.%d or later (%s)", path, *MIN_RELEASE, out.stdout.strip()[-80:])
    if given:
        logger.warning("TILEAGENT_PTXAS=%s is not a working ptxas; using nvJitLink", given)
    return None


def assembler() -> str | None:
    """``"ptxas <path> (<version>)"``, ``"nvJitLink <major>.<minor>"``, or None when neither is here."""
    program = _chosen_program()
    if program is not None:
        return f"ptxas {program[0]} ({program[1]})"
    v = version()
    return None if v is None else "nvJitLink %d.%d" % v


def enabled(options: tuple = ()) -> bool:
    """Whether a compile with these NVRTC ``options`` may go through PTX and ptxas (see the module docstring)."""
    setting = os.environ.get("TILEAGENT_PTX", "")
    if setting == "0" or not set(options) <= {"--use_fast_math"}:
        return False
    return assembler() is not None if setting == "1" else runs_as_program()


def ptx_to_cubin(ptx: str, arch: str, cache: bool = True) -> bytes:
    """Assemble ``ptx`` for ``arch`` (``sm_XY`` / ``sm_XYa``), reusing the on-disk cache.

    Raises:
        PtxasError: ptxas rejected the module.
    """
    return cached(ptx, arch, lambda: _timed_assemble(ptx, arch)) if cache else _timed_assemble(ptx, arch)


def cached(key: str, arch: str, build) -> bytes:
    """The cubin cached under ``key`` (PTX text, or PTX and what else decided the build) for ``arch``, else
    ``build()``'s, written to the cache."""
    from tileagent.compiler.runtime.nvrtc import _read_cache, _write_cache, cache_dir

    path = cache_dir() / f"ptx-{cache_key(key, arch)}.cubin"
    cubin = _read_cache(path)
    if cubin is None:
        cubin = build()
        _write_cache(path, cubin)
    return cubin


def _timed_assemble(ptx: str, arch: str) -> bytes:
    t0, c0 = time.perf_counter(), time.process_time()
    cubin = _assemble(ptx, arch)
    last_compile.update(wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0)
    logger.debug("ptxas assembled %d lines of PTX for %s in %.3f s", ptx.count("\n"), arch, last_compile["wall_s"])
    return cubin


def cache_key(ptx: str, arch: str) -> str:
    """The cache entry's name for ``ptx`` assembled for ``arch`` (the assembler and our version included)."""
    from tileagent.compiler import __version__

    h = hashlib.sha256()
    for part in (ptx, arch, __version__, assembler() or ""):
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()


def runs_as_program() -> bool:
    """Whether the ``ptxas`` program assembles here (a process per module), not nvJitLink in this process."""
    return _chosen_program() is not None


def _chosen_program() -> tuple[str, str] | None:
    given = os.environ.get("TILEAGENT_PTXAS") or None
    return None if given == "nvjitlink" else _program(given)


def _assemble(ptx: str, arch: str) -> bytes:
    program = _chosen_program()
    return _run_ptxas(program[0], ptx, arch) if program is not None else _link(ptx, arch)


def _run_ptxas(path: str, ptx: str, arch: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tileagent-ptxas-") as tmp:
        src, out = os.path.join(tmp, "module.ptx"), os.path.join(tmp, "module.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            done = subprocess.run([path, f"-arch={arch}", src, "-o", out], capture_output=True, text=True,
                                  timeout=120)
        except subprocess.TimeoutExpired:
            raise PtxasError(f"ptxas did not finish assembling the generated PTX for {arch} within 120 s", "",
                             ptx) from None
        if done.returncode != 0:
            log = (done.stderr or done.stdout).replace(src, "module.ptx")
            raise PtxasError(f"ptxas rejected the generated PTX: {log.strip()[:2000]}", log, ptx)
        with open(out, "rb") as f:
            return f.read()


def _link(ptx: str, arch: str) -> bytes:
    from cuda.bindings import nvjitlink

    data = ptx.encode() + b"\0"
    handle = nvjitlink.create(1, [f"-arch={arch}"])
    try:
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "tileagent.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            log = _error_log(nvjitlink, handle)
            raise PtxasError(f"ptxas rejected the generated PTX ({e}): {log.strip()[:2000]}", log, ptx) from None
        out = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, out)
        return bytes(out)
    finally:
        nvjitlink.destroy(handle)


def _error_log(nvjitlink, handle) -> str:
    try:
        n = nvjitlink.get_error_log_size(handle)
        buf = bytearray(n)
        nvjitlink.get_error_log(handle, buf)
        return buf.rstrip(b"\0").decode(errors="replace")
    except Exception:  # noqa: BLE001 -- the log is a courtesy
        return ""
