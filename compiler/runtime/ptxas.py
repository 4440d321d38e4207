"""PTX -> cubin with nvJitLink (ptxas in this process), behind the NVRTC cache's directory and entry format.

In: a PTX module (``compiler.targets.ptx.generate``) and an arch such as ``"sm_90a"``. Out: cubin bytes that
``compiler.runtime.launch.LoadedModule`` loads, as NVRTC's are.
Guarantees:

- ``enabled(options)``: whether a compile with these NVRTC options may take this path: nvJitLink loads (the
  ``nvidia-nvjitlink`` wheel, or a CUDA toolkit's library, found by ``cuda.pathfinder``), ``$TILEAGENT_PTX`` is not
  ``0``, and the options are ones the PTX emitter honours (none, or ``--use_fast_math``).
- ptxas runs at its default optimization level (``-O3``), as inside NVRTC.
- Cache: ``<nvrtc cache dir>/ptx-<sha256>.cubin``, keyed by the PTX, the arch, ``compiler.__version__`` and the
  nvJitLink version; written atomically; a corrupt entry is ignored and rewritten.
- A PTX module ptxas rejects raises :class:`PtxasError` with nvJitLink's error log and the PTX (a bug of the
  emitter: the caller logs it and compiles the CUDA C++ with NVRTC instead).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time

from tileagent.compiler.errors import KernelRuntimeError

logger = logging.getLogger(__name__)

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


def enabled(options: tuple = ()) -> bool:
    """Whether a compile with these NVRTC ``options`` may go through PTX and ptxas (see the module docstring)."""
    if os.environ.get("TILEAGENT_PTX", "1") == "0":
        return False
    return set(options) <= {"--use_fast_math"} and version() is not None


def ptx_to_cubin(ptx: str, arch: str, cache: bool = True) -> bytes:
    """Assemble ``ptx`` for ``arch`` (``sm_XY`` / ``sm_XYa``), reusing the on-disk cache.

    Raises:
        PtxasError: ptxas rejected the module.
    """
    from tileagent.compiler.runtime.nvrtc import _read_cache, _write_cache, cache_dir

    path = cache_dir() / f"ptx-{_key(ptx, arch)}.cubin" if cache else None
    if path is not None:
        cubin = _read_cache(path)
        if cubin is not None:
            return cubin
    t0, c0 = time.perf_counter(), time.process_time()
    cubin = _assemble(ptx, arch)
    last_compile.update(wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0)
    logger.debug("ptxas assembled %d lines of PTX for %s in %.3f s", ptx.count("\n"), arch, last_compile["wall_s"])
    if path is not None:
        _write_cache(path, cubin)
    return cubin


def _key(ptx: str, arch: str) -> str:
    from tileagent.compiler import __version__

    h = hashlib.sha256()
    for part in (ptx, arch, __version__, "%d.%d" % (version() or (0, 0))):
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()


def _assemble(ptx: str, arch: str) -> bytes:
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
