"""Run TileLang programs unchanged: ``import tilelang`` (and every ``tilelang.*`` submodule) resolved to TileAgent.

In: a process that calls ``install()`` (or a script started by ``tileagent tilelang SCRIPT`` /
``python -m tileagent.tilelang SCRIPT``). Out: ``import tilelang``, ``import tilelang.language as T``,
``from tilelang.autotuner import autotune`` ... give the modules of ``tileagent.compat.tilelang``.
Guarantees:

- Nothing named ``tilelang`` is installed: a meta-path finder, first on ``sys.meta_path`` after ``install()``, maps
  ``tilelang[.x.y]`` to ``tileagent.compat.tilelang[.x.y]`` (the same module objects, so ``tilelang.jit is
  tileagent.compat.tilelang.jit``). ``uninstall()`` removes it and the aliases.
- A ``tilelang.*`` module TileAgent does not provide (``tilelang.carver.template``, ``tilelang.contrib``, ...) fails
  to import with ``UnsupportedError`` (E701, also an ImportError) naming it, never a bare ModuleNotFoundError.
- ``import tvm`` without a TVM installed gives ``tileagent.compat.tvm`` (TileLang bundles TVM; its programs use a few
  of TVM's names directly: ``tvm.tirx`` expression builders, ``tvm.DataType``, ``tvm.target.Target``), as does
  ``from tilelang import tvm``; a part of TVM it does not provide (``tvm.relay``...) is an E701 naming it. Probes
  that are not imports (``importlib.util.find_spec("tvm")``, as torch._dynamo does when it loads) get None, so
  libraries that would use a real TVM when one is installed do not take this one for it.
- ``install()`` refuses (RuntimeError) when a real TileLang is already imported in the process.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

from tileagent.compiler.diagnostics import UnsupportedError

ALIAS = "tilelang"
TARGET = "tileagent.compat.tilelang"
TVM_TARGET = "tileagent.compat.tvm"

# Modules of real TileLang that TileAgent does not provide, with what to use instead.
UNSUPPORTED_MODULES = {
    "carver": "TileLang's hardware-aware config generator (carver/roller) is not provided; list configs by hand "
              "(of tilelang.carver only arch.driver's device queries are)",
    "contrib": "TileLang's nvcc/hipcc wrappers are not provided (of tilelang.contrib only nvcc's compute-capability "
               "queries are); TileAgent compiles with NVRTC",
    "tools": "of TileLang's tools only tilelang.tools.Analyzer is provided (not iket, lower traces, plotting)",
    "engine": "TileLang's lowering engine is not provided (of tilelang.engine only callback's "
              "register_cuda_postproc_callback is); kernel.get_kernel_source() shows the CUDA TileAgent generates",
    "cuda": "of tilelang.cuda only intrinsics' mma.sync helpers are provided (intrinsics.layout: mma_layout, utils; "
            "intrinsics.macro.mma_macro_generator), not TileLang's CUDA backend, codegen or language modules",
    "cuda.intrinsics.macro": "of TileLang's macro generators only mma_macro_generator (TensorCoreIntrinEmitter: "
                             "mma.sync on local arrays) is provided, not the wgmma, tcgen05, sm70/sm75/sm120 or "
                             "mma.sp ones",
    "rocm": "AMD targets are not supported",
    "intrinsics": "TileLang's intrinsic emitters are not provided; T.gemm selects tensor-core instructions itself",
    "ir": "TileLang's TVM IR classes are not provided",
    "quantize": "TileLang's quantization helpers are not provided",
    "analysis": "TileLang's IR analyses are not provided",
}


def _unsupported(fullname: str) -> UnsupportedError:
    parts = fullname.split(".")
    prefixes = (".".join(parts[1:k]) for k in range(len(parts), 1, -1))  # the most specific entry first
    reason = next((UNSUPPORTED_MODULES[p] for p in prefixes if p in UNSUPPORTED_MODULES), None) or \
        next((UNSUPPORTED_MODULES[p] for p in parts[1:] if p in UNSUPPORTED_MODULES), None)
    return UnsupportedError(f"module '{fullname}' is not provided by TileAgent's TileLang compatibility layer"
                            + (f": {reason}" if reason else ""),
                            hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, real: str):
        self.real = real

    def create_module(self, spec):
        return importlib.import_module(self.real)

    def exec_module(self, module):
        pass  # the real module is already executed


def _importing() -> bool:
    """Whether the finder runs for an import statement (``import x``), not for a probe such as
    ``importlib.util.find_spec("tvm")`` (torch._dynamo probes for tvm when it loads): a probe must get None."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_name == "_find_and_load_unlocked":
            return True
        frame = frame.f_back
    return False


class TileLangFinder(importlib.abc.MetaPathFinder):
    """Finds ``tilelang`` and ``tilelang.*`` as aliases of ``tileagent.compat.tilelang[.*]``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "tvm" or fullname.startswith("tvm."):
            if not _importing() or importlib.machinery.PathFinder.find_spec("tvm") is not None:
                return None  # a probe, or a real TVM is installed: not ours to serve
            return self._alias(fullname, TVM_TARGET + fullname[len("tvm"):])
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        return self._alias(fullname, TARGET + fullname[len(ALIAS):])

    def _alias(self, fullname: str, real: str):
        try:
            spec = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            if not _importing():
                return None
            if fullname.startswith("tvm."):
                raise UnsupportedError(f"module '{fullname}' is not provided: TileAgent includes only the parts of "
                                       f"TVM's API that TileLang programs use directly (tvm.tirx/tvm.tir, "
                                       f"tvm.DataType, tvm.target, tvm.testing)",
                                       hint="docs/dsl.md lists what TileAgent supports of TileLang's API")
            raise _unsupported(fullname)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real),
                                               is_package=spec.submodule_search_locations is not None)


def installed() -> bool:
    return any(isinstance(f, TileLangFinder) for f in sys.meta_path)


def install() -> None:
    """Make ``import tilelang`` resolve to TileAgent in this process (idempotent)."""
    if installed():
        return
    current = sys.modules.get(ALIAS)
    if current is not None and not getattr(current, "__name__", "").startswith(TARGET):
        raise RuntimeError(f"a real TileLang is already imported ({getattr(current, '__file__', current)}); "
                           f"call tileagent.compat.install() before anything imports tilelang")
    sys.meta_path.insert(0, TileLangFinder())


def uninstall() -> None:
    """Undo ``install()``: remove the finder and the ``tilelang*`` aliases from ``sys.modules``."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TileLangFinder)]
    for name in [n for n in sys.modules if n in (ALIAS, "tvm") or n.startswith((ALIAS + ".", "tvm."))]:
        if getattr(sys.modules[name], "__name__", "").startswith((TARGET, TVM_TARGET)):
            del sys.modules[name]


__all__ = ["ALIAS", "TARGET", "TVM_TARGET", "TileLangFinder", "UNSUPPORTED_MODULES", "install", "installed", "uninstall"]
