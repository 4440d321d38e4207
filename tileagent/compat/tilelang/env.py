"""``tilelang.env``: TileLang's environment settings, the ones a program reads for itself.

In: the process environment. Out: ``env`` (an ``Environment``) and the module-level names TileLang exports
(``CUTLASS_INCLUDE_DIR``, ``TILELANG_TEMPLATE_PATH``, ...).
Guarantees: every setting is read from the same environment variable, with the same default, as in TileLang 0.1.x
(``TILELANG_CACHE_DIR``: ``~/.tilelang/cache``, where programs keep their own build products, e.g. MInference's
torch extension); settings of TileLang's own toolchain that TileAgent does not have are None (CUTLASS, Composable
Kernel, TileLang's templates and TVM's library: TileAgent compiles with NVRTC and none of them) or ``False`` from its
``is_*`` queries. Nothing here changes how TileAgent compiles: its own switches are ``TILEAGENT_*`` (docs/dsl.md).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def _cuda_home() -> str | None:
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            return os.environ[name]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(Path(nvcc).resolve().parent.parent)
    return "/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None


class _Var:
    """A setting backed by an environment variable: read at every access, assignable (as TileLang's EnvVar)."""

    def __init__(self, key: str, default=None):
        self.key, self.default = key, default

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, instance, owner):
        if instance is not None and self.name in instance.__dict__:
            return instance.__dict__[self.name]
        value = os.environ.get(self.key)
        if value is not None:
            return value
        return self.default(owner) if callable(self.default) else self.default

    def __set__(self, instance, value):
        instance.__dict__[self.name] = value


class Environment:
    """TileLang's ``tilelang.env.Environment``: the settings as attributes."""

    CUDA_HOME = _cuda_home()
    ROCM_HOME = None
    TILELANG_PACKAGE_PATH = Path(__file__).resolve().parent
    CUTLASS_INCLUDE_DIR = _Var("TL_CUTLASS_PATH")
    COMPOSABLE_KERNEL_INCLUDE_DIR = _Var("TL_COMPOSABLE_KERNEL_PATH")
    TVM_PYTHON_PATH = _Var("TVM_IMPORT_PYTHON_PATH")
    TVM_LIBRARY_PATH = _Var("TVM_LIBRARY_PATH")
    TILELANG_TEMPLATE_PATH = _Var("TL_TEMPLATE_PATH")
    TILELANG_CACHE_DIR = _Var("TILELANG_CACHE_DIR", os.path.expanduser("~/.tilelang/cache"))
    TILELANG_TMP_DIR = _Var("TILELANG_TMP_DIR", lambda cls: os.path.join(cls.TILELANG_CACHE_DIR, "tmp"))
    TILELANG_PRINT_ON_COMPILATION = _Var("TILELANG_PRINT_ON_COMPILATION", "1")
    TILELANG_DISABLE_CACHE = _Var("TILELANG_DISABLE_CACHE", "0")
    TILELANG_CLEANUP_TEMP_FILES = _Var("TILELANG_CLEANUP_TEMP_FILES", "1")
    TILELANG_JIT_DIAGNOSTICS = _Var("TILELANG_JIT_DIAGNOSTICS", "0")
    TILELANG_AUTO_TUNING_DISABLE_CACHE = _Var("TILELANG_AUTO_TUNING_DISABLE_CACHE", "0")
    TILELANG_AUTO_TUNING_CPU_UTILITIES = _Var("TILELANG_AUTO_TUNING_CPU_UTILITIES", "0.9")
    TILELANG_AUTO_TUNING_CPU_COUNTS = _Var("TILELANG_AUTO_TUNING_CPU_COUNTS", "-1")
    TILELANG_AUTO_TUNING_MAX_CPU_COUNT = _Var("TILELANG_AUTO_TUNING_MAX_CPU_COUNT", "-1")
    TILELANG_DEFAULT_TARGET = _Var("TILELANG_DEFAULT_TARGET", "auto")
    TILELANG_DEFAULT_EXECUTION_BACKEND = _Var("TILELANG_EXECUTION_BACKEND", "auto")
    TILELANG_DEFAULT_VERBOSE = _Var("TILELANG_VERBOSE", "0")

    def is_cache_enabled(self) -> bool:
        from tileagent.compat import tilelang

        return tilelang.is_cache_enabled()

    def enable_cache(self) -> None:
        from tileagent.compat import tilelang

        tilelang.enable_cache()

    def disable_cache(self) -> None:
        from tileagent.compat import tilelang

        tilelang.disable_cache()

    def is_cache_globally_disabled(self) -> bool:
        return self.TILELANG_DISABLE_CACHE.lower() in ("1", "true", "yes", "on")

    def is_autotune_cache_disabled(self) -> bool:
        return self.TILELANG_AUTO_TUNING_DISABLE_CACHE.lower() in ("1", "true", "yes", "on")

    def is_print_on_compilation_enabled(self) -> bool:
        return self.TILELANG_PRINT_ON_COMPILATION.lower() in ("1", "true", "yes", "on")


env = Environment()
CUTLASS_INCLUDE_DIR = env.CUTLASS_INCLUDE_DIR
COMPOSABLE_KERNEL_INCLUDE_DIR = env.COMPOSABLE_KERNEL_INCLUDE_DIR
TILELANG_TEMPLATE_PATH = env.TILELANG_TEMPLATE_PATH
CUDA_HOME = env.CUDA_HOME
ROCM_HOME = None

__all__ = ["CUDA_HOME", "COMPOSABLE_KERNEL_INCLUDE_DIR", "CUTLASS_INCLUDE_DIR", "Environment", "ROCM_HOME",
           "TILELANG_TEMPLATE_PATH", "env"]
