"""CUDA C++ -> cubin with NVRTC (``cuda.bindings.nvrtc``), behind an on-disk cache.

In: a CUDA C++ translation unit (``compiler.targets.cuda.generate``), an arch such as ``"sm_90a"`` and extra NVRTC
options. Out: cubin bytes (an ELF image) that ``compiler.runtime.launch.LoadedModule`` loads.
Guarantees:

- Compiles with ``--gpu-architecture=<arch> -std=c++17 -minimal -I<CUDA include dir>`` plus the caller's options (no
  ``-minimal`` before NVRTC 12.4); no GPU needed.
- Compile-time options that leave the cubin byte-identical (bench/nvrtc_identity.py checks every example kernel):
  ``--no-cache`` (NVRTC 12.9+; skips NVRTC's own cache in the driver's compute cache, which our cache already fronts;
  ``TILEAGENT_NVRTC_CACHE=1`` keeps it) and, for a source that opens with ``#include`` lines, a precompiled header
  (NVRTC 12.8+; ``TILEAGENT_NVRTC_PCH=0`` turns it off) of NVRTC's builtin header plus those includes, created by the
  first such compile of this process (one creation at a time) and used by the next ones with the same key (includes,
  options, NVRTC version, included headers' size and mtime). A PCH works only in the process that made it and its
  forked children (NVRTC maps it at its PCH heap's address), so it is kept as an unlinked file (``/proc/self/fd``)
  and never outlives the process. A PCH that NVRTC reports unusable (warnings 626/629/630/20282) is dropped and made
  again by a later compile; a PCH that vanished, or an option this NVRTC rejects, means one retry without these
  options (rejected options stay off in this process). Compile errors read as without them: the log without
  NVRTC's PCH messages, the message with the options that decide the code.
- Time limit: ``compile_to_cubin(timeout_s=...)`` (120 s by default) raises ``ResourceError`` E805 past it.
- Failures raise :class:`NvrtcError` with the full program log and, for each source line the log names, that line.
- ptxas remarks C75xx on a successful compile (``ptxas_remarks``: e.g. C7517 "wgmma.wait_group is injected", C7514
  "wgmma.mma_async instructions are serialized": the tensor cores' overlap is gone, silently) are logged as
  warnings; ``compile_log`` compiles without any cache and returns the whole log, for checks on them.
- Cache: ``$TILEAGENT_CACHE_DIR`` (default ``~/.cache/tileagent``) ``/nvrtc/<sha256>.cubin``, keyed by source, arch,
  options, ``compiler.__version__`` and the NVRTC version; written atomically (temp file + ``os.replace``); an entry
  that fails its checksum is ignored and rewritten; an unwritable cache only logs a warning.
- Read-only cubin directories (``add_cubin_dir``, or ``$TILEAGENT_CUBIN_DIRS`` separated by ``os.pathsep``) hold
  entries in the cache's own layout and format (``write_cubin_entry``, e.g. cubins shipped with an exported module);
  they are consulted after a miss in the cache and never written.
- Library discovery: ``cuda.pathfinder`` first, then the ``nvidia`` wheels next to torch and on ``sys.path``, then
  ``LD_LIBRARY_PATH`` and ``/usr/local/cuda``; include directory the same way.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import glob
import hashlib
import logging
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

from tileagent.compiler.errors import KernelRuntimeError, TargetUnavailable

logger = logging.getLogger(__name__)

_MAGIC = b"TACUBIN1"  # cache file: magic, sha256 of the cubin, cubin
_LIB_SUBDIRS = ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "nvidia/cu12/lib")
_INCLUDE_SUBDIRS = ("nvidia/cu13/include", "nvidia/cuda_runtime/include", "nvidia/cu12/include")


class NvrtcError(KernelRuntimeError):
    """NVRTC rejected a program; ``log`` is the full program log, ``source`` the program."""

    def __init__(self, message: str, log: str = "", source: str = ""):
        super().__init__(message)
        self.log, self.source = log, source


def _search_roots() -> list[Path]:
    """site-packages-like roots: the one holding torch first, then every ``sys.path`` entry."""
    roots = []
    try:
        import torch

        roots.append(Path(torch.__file__).resolve().parent.parent)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    roots += [Path(p) for p in sys.path if p]
    seen, out = set(), []
    for r in roots:
        if r not in seen and r.is_dir():
            seen.add(r)
            out.append(r)
    return out


@functools.lru_cache(maxsize=1)
def _load_nvrtc():
    """Make sure libnvrtc can be loaded, then return the ``cuda.bindings.nvrtc`` module."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise TargetUnavailable(f"cuda-python (cuda.bindings) is not installed: {e}") from None
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvrtc")
        return nvrtc
    except Exception as e:  # noqa: BLE001 - pathfinder missing or failed: search ourselves
        logger.debug("cuda.pathfinder could not load libnvrtc (%s); searching wheels and LD_LIBRARY_PATH", e)
    dirs = [r / sub for r in _search_roots() for sub in _LIB_SUBDIRS]
    dirs += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    dirs += [Path("/usr/local/cuda/lib64"), Path("/usr/local/cuda/lib")]
    for d in dirs:
        for lib in sorted(glob.glob(str(d / "libnvrtc.so*")), reverse=True):
            if "builtins" in lib:
                continue
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                logger.debug("loaded %s", lib)
                return nvrtc
            except OSError:
                continue
    return nvrtc  # let cuda.bindings try its own search; a failure surfaces at the first call


@functools.lru_cache(maxsize=1)
def include_dir() -> str:
    """The directory holding ``cuda_fp16.h`` (CUDA's include dir), or raise TargetUnavailable."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        d = find_nvidia_header_directory("cudart")
        if d and (Path(d) / "cuda_fp16.h").is_file():
            return str(d)
    except Exception as e:  # noqa: BLE001 - older pathfinder, or not found
        logger.debug("cuda.pathfinder found no CUDA headers (%s)", e)
    cands = [r / sub for r in _search_roots() for sub in _INCLUDE_SUBDIRS]
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    cands += [Path(home) / "include"] if home else []
    cands += [Path("/usr/local/cuda/include")]
    for d in cands:
        if (d / "cuda_fp16.h").is_file():
            return str(d)
    raise TargetUnavailable("CUDA headers (cuda_fp16.h) not found; install the nvidia-cuda-runtime wheel")


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library in use."""
    nvrtc = _load_nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # noqa: BLE001 - library not loadable
        raise TargetUnavailable(f"NVRTC could not be loaded: {e}") from None
    _check(nvrtc, err, "nvrtcVersion")
    return int(major), int(minor)


def device_arch(device=None) -> str:
    """The NVRTC arch for a torch CUDA device: ``"sm_90a"`` for 9.0, ``"sm_100a"`` for 10.0, else ``sm_<major><minor>``.

    Raises:
        TargetUnavailable: when torch sees no CUDA device.
    """
    import torch

    if not torch.cuda.is_available():
        raise TargetUnavailable("no CUDA device is available")
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) in ((9, 0), (10, 0)):
        return f"sm_{major}{minor}a"
    return f"sm_{major}{minor}"


def cache_dir() -> Path:
    """Where compiled cubins are kept: ``$TILEAGENT_CACHE_DIR/nvrtc`` (default ``~/.cache/tileagent/nvrtc``)."""
    return Path(os.environ.get("TILEAGENT_CACHE_DIR") or "~/.cache/tileagent").expanduser() / "nvrtc"


def cache_key(source: str, arch: str, options: tuple[str, ...] = ()) -> str:
    """sha256 of everything that decides the cubin: source, arch, options, compiler and NVRTC versions."""
    from tileagent.compiler import __version__

    h = hashlib.sha256()
    for part in (source, arch, "\0".join(options), __version__, "%d.%d" % nvrtc_version()):
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()


def cache_path(source: str, arch: str, options: tuple[str, ...] = ()) -> Path:
    """The cache file for this compilation (it may not exist)."""
    return cache_dir() / f"{cache_key(source, arch, tuple(options))}.cubin"


_CUBIN_DIRS: list[Path] = []


def add_cubin_dir(path) -> None:
    """Also look compiled cubins up in ``path`` (read-only; files named and formatted as the cache's entries)."""
    path = Path(path)
    if path not in _CUBIN_DIRS:
        _CUBIN_DIRS.append(path)


def cubin_dirs() -> list[Path]:
    """The read-only cubin directories: ``$TILEAGENT_CUBIN_DIRS`` first, then those given to ``add_cubin_dir``."""
    env = [Path(p) for p in os.environ.get("TILEAGENT_CUBIN_DIRS", "").split(os.pathsep) if p]
    return env + [p for p in _CUBIN_DIRS if p not in env]


def write_cubin_entry(directory, source: str, arch: str, options: tuple[str, ...] = ()) -> Path:
    """Compile ``source`` for ``arch`` (through the cache) and write it into ``directory`` as a cache entry, for use
    as a read-only cubin directory elsewhere; returns the file. Raises like ``compile_to_cubin``, and OSError."""
    options = tuple(options)
    cubin = compile_to_cubin(source, arch, options)
    path = Path(directory) / f"{cache_key(source, arch, options)}.cubin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_entry_bytes(cubin))
    return path


DEFAULT_TIMEOUT_S = 120.0
# the last compilation that ran NVRTC (not a cache hit): wall seconds and CPU seconds of this process (all threads)
last_compile: dict = {"wall_s": 0.0, "cpu_s": 0.0}


def compile_to_cubin(source: str, arch: str, options: tuple[str, ...] = (), *, cache: bool = True,
                     timeout_s: float | None = DEFAULT_TIMEOUT_S) -> bytes:
    """Compile CUDA C++ ``source`` for ``arch`` (e.g. ``"sm_90a"``) to a cubin, reusing the on-disk cache.

    Args:
        source: one CUDA C++ translation unit.
        arch: ``sm_XY`` or ``sm_XYa``.
        options: extra NVRTC options (``"-lineinfo"``, ``"--use_fast_math"``, ...).
        cache: read and write the on-disk cache.
        timeout_s: the most NVRTC may take (None: no limit).

    Raises:
        NvrtcError: NVRTC rejected the program (message holds the log and the failing lines).
        ResourceError: E805, NVRTC did not finish within ``timeout_s``.
        TargetUnavailable: NVRTC or the CUDA headers are missing.
    """
    options = tuple(options)
    path = cache_path(source, arch, options) if cache else None
    if path is not None:
        cubin = _read_cache(path)
        if cubin is not None:
            logger.debug("nvrtc cache hit %s", path.name)
            return cubin
        for extra in cubin_dirs():
            cubin = _read_cache(extra / path.name) if (extra / path.name).is_file() else None
            if cubin is not None:
                logger.debug("nvrtc cubin found in %s", extra)
                return cubin
    t0, c0 = time.perf_counter(), time.process_time()
    cubin = _compile(source, arch, options) if timeout_s is None else _compile_limited(source, arch, options, timeout_s)
    last_compile.update(wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0)
    logger.debug("nvrtc compiled %d lines for %s in %.3f s", source.count("\n") + 1, arch, last_compile["wall_s"])
    if path is not None:
        _write_cache(path, cubin)
    return cubin


def _compile_limited(source: str, arch: str, options: tuple[str, ...], timeout_s: float) -> bytes:
    """``_compile`` on a worker thread, waited for at most ``timeout_s`` seconds. NVRTC releases the GIL but cannot be
    interrupted: past the limit the caller gets E805 at once and the compilation ends on its own in the background,
    its result dropped."""
    result: list = []

    def work():
        try:
            result.append((True, _compile(source, arch, options)))
        except BaseException as e:  # noqa: BLE001 -- handed to the waiting thread
            result.append((False, e))

    worker = threading.Thread(target=work, name="tileagent-nvrtc", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not result:
        from tileagent.compiler.diagnostics import ResourceError

        raise ResourceError(f"NVRTC did not finish compiling the kernel ({source.count(chr(10)) + 1} lines of CUDA "
                            f"for {arch}) within {timeout_s:g} s", code="E805",
                            hint="large unrolled bodies compile slowly: use smaller tiles or T.serial loops")
    ok, value = result[0]
    if not ok:
        raise value
    return value


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, name = nvrtc.nvrtcGetErrorString(err)
        raise NvrtcError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")


def base_options(arch: str, options: tuple[str, ...] = ()) -> list[str]:
    """The NVRTC options of a compilation for ``arch``: the ones every compile gets, then ``options``. These decide
    the code (and the cache key holds them); the compile-time options of ``speed_options`` come on top."""
    # -minimal (NVRTC 12.4+): no texture, device-runtime or driver-API declarations, which the generated code never
    # uses; identical cubins (bench/codegen_golden.py), less to parse
    minimal = ["-minimal"] if nvrtc_version() >= (12, 4) else []
    return [f"--gpu-architecture={arch}", "-std=c++17", *minimal, f"-I{include_dir()}", *options]


# ---- compile-time options that do not change the cubin (docs/architecture.md, "Compile latency")

_INCLUDE_LINE = re.compile(r'#\s*include\s*(<[^<>"]+>|"[^<>"]+")')
# NVRTC compiled without the PCH: invalid or another version, other options, other directives, another PCH heap
_PCH_UNUSABLE = re.compile(r"#(626|629|630|20282)-D")
_PCH_MISSING = "cannot open precompiled header file"
_PCH_CHATTER = re.compile(r'^"[^"\n]*": (?:using|creating) precompiled header file "[^"\n]*"\n?', re.M)
_PCH_CREATE_LOCK = threading.Lock()  # NVRTC's PCH heap is per process: one creation at a time
_PCH: dict[str, str] = {}  # key -> the file given to --use-pch; this process's own, or inherited through fork
_PCH_FDS: dict[str, int] = {}  # key -> open descriptor of an unlinked PCH file (Linux: /proc/self/fd/<fd>)
_PCH_KEEP: list[Path] = []  # PCH files kept by name (no /proc/self/fd), removed at exit
_REJECTED: set[str] = set()  # speed options this NVRTC refused (INVALID_OPTION): left off in this process


def pch_includes(source: str) -> tuple[str, ...] | None:
    """The ``#include`` lines before the first token of ``source`` (what a precompiled header of it holds on top of
    NVRTC's builtin header), or None when that prefix holds anything else (another directive, a block comment, a
    continued line)."""
    includes = []
    for line in source.splitlines():
        text = line.strip()
        if text.endswith("\\") or text.startswith("/*"):
            return None
        if not text or text.startswith("//"):
            continue
        if text.startswith("#"):
            if not _INCLUDE_LINE.fullmatch(text):
                return None
            includes.append(text)
            continue
        break
    return tuple(includes)


def pch_key(source: str, opts: list[str]) -> str | None:
    """The key of the precompiled header that compiling ``source`` with the full option list ``opts``
    (``base_options``) may use: its ``#include`` lines, the options, the NVRTC version and each included header's size
    and mtime. None when the source gets no PCH: no ``#include`` (NVRTC's builtin header alone is parsed faster than a
    PCH of it is loaded), or anything but ``#include`` lines and comments before its first token."""
    includes = pch_includes(source)
    if not includes:
        return None
    h = hashlib.sha256()
    parts = ["\n".join(includes), "\0".join(opts), "%d.%d" % nvrtc_version()]
    for line in includes:  # a reinstalled CUDA header is another PCH
        name = _INCLUDE_LINE.fullmatch(line).group(1)[1:-1]
        try:
            st = (Path(include_dir()) / name).stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:?")
    for part in parts:
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()


def speed_options(source: str, opts: list[str]) -> tuple[list[str], str | None, str | None]:
    """The compile-time options for compiling ``source`` with ``opts`` (``base_options``): (options, key of the
    precompiled header they use or None, key of the precompiled header to create or None). Creating adds
    ``--create-pch`` with a temporary file when the compilation runs (``_compile_program``). Reads
    ``TILEAGENT_NVRTC_CACHE`` and ``TILEAGENT_NVRTC_PCH`` at every call; no side effects."""
    extra: list[str] = []
    if os.environ.get("TILEAGENT_NVRTC_CACHE", "0") != "1" and nvrtc_version() >= (12, 9) and \
            "--no-cache" not in _REJECTED:
        extra.append("--no-cache")
    use = create = None
    if os.environ.get("TILEAGENT_NVRTC_PCH", "1") != "0" and nvrtc_version() >= (12, 8) and "pch" not in _REJECTED:
        key = pch_key(source, opts)
        if key is not None and key in _PCH:
            use = key
            extra.append(f"--use-pch={_PCH[key]}")
        else:
            create = key
    return extra, use, create


def _keep_pch(key: str, tmp: Path) -> None:
    """Register the PCH NVRTC just wrote to ``tmp``. A PCH only works in the process that made it (NVRTC maps it at
    the address of its PCH heap; another process reports warning 20282) and in that process's forked children, so it
    never outlives the process: on Linux the file is unlinked at once and used as ``/proc/self/fd/<fd>``."""
    _drop_pch(key)
    if Path("/proc/self/fd").is_dir():
        fd = os.open(tmp, os.O_RDONLY)
        tmp.unlink()
        _PCH_FDS[key] = fd
        _PCH[key] = f"/proc/self/fd/{fd}"
    else:  # pragma: no cover - not Linux
        if not _PCH_KEEP:
            atexit.register(lambda: [p.unlink(missing_ok=True) for p in _PCH_KEEP])
        _PCH_KEEP.append(tmp)
        _PCH[key] = str(tmp)
    logger.debug("created a precompiled header (%s)", _PCH[key])


def _drop_pch(key: str) -> None:
    _PCH.pop(key, None)
    fd = _PCH_FDS.pop(key, None)
    if fd is not None:
        os.close(fd)


def _compile(source: str, arch: str, options: tuple[str, ...]) -> bytes:
    nvrtc = _load_nvrtc()
    nvrtc_version()  # raises TargetUnavailable when the library cannot be loaded
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise NvrtcError(f"arch {arch!r} is not of the form sm_XY or sm_XYa")
    opts = base_options(arch, options)
    extra, use, create = speed_options(source, opts)
    try:
        return _compile_program(nvrtc, source, opts, extra, use, create)
    except _Retry as e:
        logger.warning("NVRTC compiles without %s: %s", " ".join(extra), e)
        return _compile_program(nvrtc, source, opts, [], None, None)


class _Retry(Exception):
    """A compile-time option got in the way (not the source): compile again without them."""


def _compile_program(nvrtc, source: str, opts: list[str], extra: list[str], use: str | None,
                     create: str | None) -> bytes:
    tmp = None
    if create is not None and _PCH_CREATE_LOCK.acquire(blocking=False):  # else another thread is creating one
        try:
            fd, name = tempfile.mkstemp(prefix="tileagent-", suffix=".pch")
            os.close(fd)
            tmp = Path(name)
            extra = [*extra, f"--create-pch={tmp}"]
        except OSError as e:
            _PCH_CREATE_LOCK.release()
            logger.debug("no precompiled header: %s", e)
    try:
        err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
        _check(nvrtc, err, "nvrtcCreateProgram")
        try:
            all_opts = opts + extra
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(all_opts), [o.encode() for o in all_opts])
            log = _program_log(nvrtc, prog)
            if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                if extra and err == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
                    _REJECTED.update(("--no-cache", "pch"))  # the log need not say which one
                    raise _Retry(log.strip() or "invalid option")
                if use is not None and _PCH_MISSING in log:
                    _drop_pch(use)
                    raise _Retry(log.strip())
                log = _PCH_CHATTER.sub("", log)  # the user (or the agent's LLM) reads this: only the source's errors
                raise NvrtcError(_failure_message(log, source, opts), log=log, source=source)
            if use is not None and _PCH_UNUSABLE.search(log):
                logger.info("NVRTC could not use the precompiled header %s (a later compile makes another): %s",
                            _PCH.get(use), log.strip())
                _drop_pch(use)
            elif log.strip():
                logger.debug("nvrtc log:\n%s", log)
            for remark in ptxas_remarks(log):
                logger.warning("ptxas: %s", remark)
            if tmp is not None and _pch_created(nvrtc, prog, tmp):
                _keep_pch(create, tmp)
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            _check(nvrtc, err, "nvrtcGetCUBINSize")
            buf = b" " * size
            (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
            _check(nvrtc, err, "nvrtcGetCUBIN")
            return bytes(buf)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
    finally:
        if tmp is not None:
            _PCH_CREATE_LOCK.release()
            if create not in _PCH or _PCH[create] != str(tmp):
                tmp.unlink(missing_ok=True)


def _pch_created(nvrtc, prog, tmp: Path) -> bool:
    """Whether NVRTC wrote a precompiled header to ``tmp`` in this compilation."""
    try:
        (status,) = nvrtc.nvrtcGetPCHCreateStatus(prog)
    except Exception as e:  # noqa: BLE001 - bindings without the PCH API: trust a non-empty file
        logger.debug("nvrtcGetPCHCreateStatus unavailable (%s)", e)
        status = nvrtc.nvrtcResult.NVRTC_SUCCESS
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS or not tmp.is_file() or tmp.stat().st_size == 0:
        logger.debug("NVRTC created no precompiled header (%s)", status)
        return False
    return True


_REMARK = re.compile(r"^ptxas info\s*: (\(C75\d\d\).*)$", re.M)


def ptxas_remarks(log: str) -> list[str]:
    """The ptxas performance remarks (codes C75xx: wgmma serialized, a wgmma.wait_group injected, setmaxnreg
    ignored, ...) in an NVRTC program log; ptxas compiles such code correctly but slower, and says so only here."""
    return [m.group(1).strip() for m in _REMARK.finditer(log)]


def compile_log(source: str, arch: str, options: tuple[str, ...] = ()) -> str:
    """The NVRTC program log (ptxas's lines included) of compiling ``source`` for ``arch`` with ``options``, with no
    cache and no precompiled header; NvrtcError when the compile fails."""
    nvrtc = _load_nvrtc()
    nvrtc_version()
    opts = base_options(arch, tuple(options))
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _program_log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise NvrtcError(_failure_message(log, source, opts), log=log, source=source)
        return log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _program_log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


def _failure_message(log: str, source: str, opts: list[str]) -> str:
    lines = source.splitlines()
    quoted = []
    for n in dict.fromkeys(int(m) for m in re.findall(r"\((\d+)\): (?:catastrophic )?error", log)):
        if 1 <= n <= len(lines):
            quoted.append(f"  line {n}: {lines[n - 1].strip()}")
    msg = f"NVRTC compilation failed ({' '.join(opts)}):\n{log.rstrip()}"
    if quoted:
        msg += "\nfailing source lines:\n" + "\n".join(quoted[:20])
    return msg


def _entry_bytes(cubin: bytes) -> bytes:
    """A cache file's contents: magic, sha256 of the cubin, cubin (what ``_read_cache`` checks)."""
    return _MAGIC + hashlib.sha256(cubin).digest() + cubin


def _read_cache(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head, digest, cubin = data[:8], data[8:40], data[40:]
    if head != _MAGIC or hashlib.sha256(cubin).digest() != digest or not cubin.startswith(b"\x7fELF"):
        logger.warning("ignoring corrupt cache entry %s", path)
        return None
    return cubin


def _write_cache(path: Path, cubin: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".cubin")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_entry_bytes(cubin))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        logger.warning("could not write the nvrtc cache entry %s: %s", path, e)
