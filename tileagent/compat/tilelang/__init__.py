"""``import tilelang`` under ``tileagent.compat.install()``: TileLang's top-level names, served by TileAgent.

In: a TileLang program. Out: ``tilelang.jit``, ``tilelang.compile``, ``tilelang.JITKernel``, ``tilelang.PassConfigKey``,
``tilelang.TensorSupplyType``, ``tilelang.Profiler``, ``tilelang.autotune``, ``tilelang.DataType``, ``tilelang.cdiv``,
``tilelang.next_power_of_2``, ``tilelang.language``, ``tilelang.set_log_level``, the cache switches, ``tilelang.env``
(its settings object), ``tilelang.tvm``
(``tileagent.compat.tvm``: the part of TVM's API TileLang programs use directly).
Guarantees: every name keeps TileLang's signature and defaults; a TileLang name that TileAgent does not provide
raises ``UnsupportedError`` (E701) naming it, never a bare AttributeError.
"""

from __future__ import annotations

import importlib
import logging
import sys
import types

from tileagent.compiler import __version__ as _tileagent_version
from tileagent.compiler.diagnostics import UnsupportedError
from tileagent.compat.tilelang import jit as _jit_module  # noqa: F401 -- loaded first: `tilelang.jit` stays the function
from tileagent.compiler.jit import JITImpl, JITKernel, PassConfigKey, compile, jit  # noqa: A004,E402
from tileagent.compiler.profiler import Profiler, TensorSupplyType
from tileagent.compat.tilelang.datatype import DataType
from tileagent.compat.tilelang.math import cdiv, next_power_of_2
from tileagent.compat.tilelang import language  # noqa: E402
from tileagent.compat.tilelang.autotuner import autotune  # noqa: E402
from tileagent.compat.tilelang.env import env  # noqa: E402 -- TileLang's settings object, as `tilelang.env`

__version__ = f"0.1.15+tileagent.{_tileagent_version}"
"""The TileLang release whose surface this layer follows, and TileAgent's version."""

_cache_enabled = True


def set_log_level(level) -> None:
    """Set the level of TileAgent's loggers (a name such as 'INFO' or a logging level)."""
    if isinstance(level, str):
        level = getattr(logging, level.upper(), logging.INFO)
    logging.getLogger("tileagent").setLevel(level)


def disable_cache() -> None:
    """Accepted: TileAgent's module cache stays on (keyed by the kernel's IR and options, so it cannot go stale)."""
    global _cache_enabled
    _cache_enabled = False


def enable_cache() -> None:
    global _cache_enabled
    _cache_enabled = True


def is_cache_enabled() -> bool:
    return _cache_enabled


def par_compile(funcs, out_idx=None, target="auto", pass_configs=None, **_options) -> list:
    """Compile several PrimFuncs (one after another here)."""
    return [compile(f, out_idx=out_idx, target=target, pass_configs=pass_configs) for f in funcs]


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    import importlib.util

    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # `import tilelang` then tilelang.profiler...
        return importlib.import_module(f"{__name__}.{name}")
    from tileagent.compat import UNSUPPORTED_MODULES

    reason = UNSUPPORTED_MODULES.get(name)
    raise UnsupportedError(f"tilelang.{name} is not provided by TileAgent's TileLang compatibility layer"
                           + (f": {reason}" if reason else ""),
                           hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


class _Package(types.ModuleType):
    """The module type of ``tilelang``: importing the submodule ``tilelang.jit`` or ``tilelang.env`` (or an alias)
    must not rebind the package's ``jit`` (the decorator) or ``env`` (the settings object, as in TileLang) to that
    module, as the import system would."""

    def __setattr__(self, name, value):
        if name in ("jit", "env") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

from tileagent.compat import tvm  # noqa: E402 -- `from tilelang import tvm`: TileLang's bundled TVM (the part it uses)

__all__ = ["DataType", "JITImpl", "JITKernel", "PassConfigKey", "Profiler", "TensorSupplyType", "autotune", "cdiv",
           "compile", "disable_cache", "enable_cache", "env", "is_cache_enabled", "jit", "language", "next_power_of_2",
           "par_compile", "set_log_level", "tvm"]
