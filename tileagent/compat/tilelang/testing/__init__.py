"""``tilelang.testing``: seeds, tolerant comparison and pytest markers for TileLang test files.

In: TileLang test code (``@tilelang.testing.requires_cuda``, ``tilelang.testing.main()``...). Out: pytest skip marks
evaluated on this machine (CUDA present, compute capability, importable packages), ``set_random_seed`` seeding Python,
NumPy and torch, ``torch_assert_close`` with a mismatch ratio, ``process_func``/``regression`` for perf functions.
Guarantees: a marker skips (never fails) a test whose requirement is not met, with the reason.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import inspect
import logging
import os
import random
import sys

import torch

from tileagent.compiler.profiler import torch_assert_close

log = logging.getLogger("tileagent.compat.testing")


def set_random_seed(seed: int = 42) -> None:
    """Seed Python's ``random``, NumPy (when installed) and torch (CPU and every CUDA device)."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _mark(condition: bool, reason: str):
    import pytest

    return pytest.mark.skipif(condition, reason=reason)


def _decorator(marks):
    def apply(func):
        for m in marks:
            func = m(func)
        return func

    return apply


def _cuda_marks():
    return [_mark(not torch.cuda.is_available(), "requires CUDA (torch sees no GPU)")]


def requires_cuda(func=None):
    """Skip the test without a CUDA device (``@requires_cuda`` or ``@requires_cuda()``)."""
    deco = _decorator(_cuda_marks())
    return deco if func is None else deco(func)


def _compute_version() -> tuple[int, int]:
    if not torch.cuda.is_available():
        return (0, 0)
    return tuple(torch.cuda.get_device_capability())


_COMPARE = {"ge": lambda a, b: a >= b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b,
            "lt": lambda a, b: a < b, "eq": lambda a, b: a == b}


def requires_cuda_compute_version(major_version, minor_version=0, mode="ge"):
    """Skip unless the GPU's compute capability compares ``mode`` (ge, gt, le, lt, eq) to (major, minor)."""
    if mode not in _COMPARE:
        raise ValueError(f"Invalid mode: {mode}")
    have, want = _compute_version(), (major_version, minor_version)
    ok = _COMPARE[mode](have, want)
    return _decorator([_mark(not ok, f"Requires CUDA compute {mode} {major_version}.{minor_version}, but have "
                                     f"{have[0]}.{have[1]}"), *_cuda_marks()])


def requires_cuda_compute_version_ge(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, mode="ge")


def requires_cuda_compute_version_gt(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, mode="gt")


def requires_cuda_compute_version_eq(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, mode="eq")


def requires_cuda_compute_version_lt(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, mode="lt")


def requires_cuda_compute_version_le(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, mode="le")


def requires_package(*packages):
    """Skip unless every named package is importable."""
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    return _decorator([_mark(bool(missing), f"requires package(s) {', '.join(missing)}")])


def _never(reason: str):
    def deco(func=None):
        d = _decorator([_mark(True, reason)])
        return d if func is None else d(func)

    return deco


requires_rocm = requires_cdna = requires_gfx950 = _never("requires an AMD GPU (TileAgent targets NVIDIA only)")
requires_metal = _never("requires Metal (TileAgent targets NVIDIA only)")
requires_llvm = _never("requires TileLang's LLVM CPU backend")


def requires_cuda_or_cdna(func=None):
    return requires_cuda(func)


_RESULTS: list[tuple[str, float]] = []


def process_func(func, name: str | None = None, /, **kwargs) -> None:
    """Run a perf function (returning a latency) and record it under ``name`` (default: its module)."""
    result_name = getattr(func, "__module__", "<unknown>") if name is None else name
    if result_name.startswith("regression_"):
        result_name = result_name[len("regression_"):]
    latency = float(func(**kwargs))
    if latency <= 0.0:
        log.warning("%s has latency %s <= 0", result_name, latency)
        return
    _RESULTS.append((result_name, latency))


def regression(prefixes=("regression_",), verbose: bool = True) -> None:
    """Call the caller module's ``regression_*`` functions in name order (each records its latencies through
    ``process_func``; what it returns is ignored, as in TileLang), then print ``name: latency`` per record.
    ``TL_PERF_REGRESSION_ONLY`` (comma-separated names or patterns) picks the functions run."""
    caller = inspect.currentframe().f_back.f_globals
    _RESULTS.clear()
    only = [p.strip().lower() for p in os.environ.get("TL_PERF_REGRESSION_ONLY", "").split(",") if p.strip()]
    for name, fn in sorted((k, v) for k, v in caller.items() if callable(v) and k.startswith(tuple(prefixes))):
        case = name.removeprefix("regression_").lower()
        if only and not any(fnmatch.fnmatch(n, p) or p in n for p in only for n in (name.lower(), case)):
            continue
        if verbose:
            print(f"  [{case}]", flush=True)
        fn()
    for name, latency in _RESULTS:
        print(f"{name}: {latency}")


def main():
    """Run pytest on the calling file (``if __name__ == "__main__": tilelang.testing.main()``)."""
    import pytest

    test_file = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([test_file] + sys.argv[1:]))


__all__ = ["main", "process_func", "regression", "requires_cuda", "requires_cuda_compute_version",
           "requires_cuda_compute_version_eq", "requires_cuda_compute_version_ge", "requires_cuda_compute_version_gt",
           "requires_cuda_compute_version_le", "requires_cuda_compute_version_lt", "requires_package",
           "set_random_seed", "torch_assert_close"]
