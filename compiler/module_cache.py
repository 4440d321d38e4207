"""On-disk cache of lowered modules: the same DSL program compiles once per machine, then loads in milliseconds.

In: a checked PrimFunc and everything else that decides its lowering (target, arch, options). Out: the cached
(DeviceModule, CUDA source), re-bound to this PrimFunc's parameters, or None.
Guarantees: the key covers the printed tile IR plus what the printer leaves out (layout annotations, loop
annotations), the environment's switches of code generation (``code_switches``) and a fingerprint of the compiler's
own source files (not just its version string: an upgrade or a checkout of other code under the same version must
not load modules pickled by different classes), so a hit is the module a fresh lowering would build; a corrupt or
incompatible entry is a miss. Entries live under ``$TILEAGENT_CACHE_DIR/modules``: pickles in which the IR's
slots dataclasses are written as (class, field values) (``dump``; read by ``_rebuild`` in any process).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
from dataclasses import replace
from pathlib import Path

from tileagent.compiler.ir.printer import print_func
from tileagent.compiler.ir.stmt import AnnotateLayout, Buffer, Parallel, PrimFunc
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.tir import DeviceModule

log = logging.getLogger("tileagent.compiler")


@functools.cache
def compiler_fingerprint() -> str:
    """sha256 over the compiler package's Python sources (relative path and bytes), computed once per process."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def code_switches() -> tuple:
    """The environment's switches that change the generated code, as they are now: which copies may use TMA
    (TILEAGENT_ENABLE_TMA), the wgmma pipeline's overlap (TILEAGENT_WGMMA_OVERLAP), wgmma's M-major A
    (TILEAGENT_WGMMA_M_MAJOR_A), the mbarrier waits' spin limit,
    warp specialization (TILEAGENT_WARP_SPECIALIZE, also =force), merging GEMM blocks (TILEAGENT_COARSEN) and staging
    epilogues (TILEAGENT_STAGE_EPILOGUE), the fences of hand-specialized arms (TILEAGENT_ARM_FENCES), wgmma
    descriptors' opaque addresses (TILEAGENT_WGMMA_OPAQUE), bulk stores (TILEAGENT_BULK_STORE), shared reads forwarded
    from registers (TILEAGENT_FORWARD_SHARED), register loads ahead of a pipeline's wait (TILEAGENT_EARLY_LOADS),
    reductions sharing one round (TILEAGENT_FUSE_REDUCTIONS), barriers that order nothing dropped
    (TILEAGENT_DROP_BARRIERS: the first rule, =sides both), one-stage TMA pipelines (TILEAGENT_SINGLE_STAGE),
    hand-specialized arms' thread ranges stated (TILEAGENT_ARM_RANGES), the deferred gemm's split stages, early
    rescale, anchor and trip-count rule (``defer_gemm.switches``), row gathers by runs (TILEAGENT_ROW_GATHER). This
    cache's keys and @jit's in-process caches hold them."""
    from tileagent.compiler.instructions import bulk_store
    from tileagent.compiler.instructions.tma import mode as tma_mode
    from tileagent.compiler.instructions.wgmma import m_major_a_enabled, overlap_enabled
    from tileagent.compiler.lower import (arm_fences, coarsen, defer_gemm, early_loads, forward_shared, gather,
                                         redundant_barriers, reduce, single_stage, stage_epilogue, warp_specialize)
    from tileagent.compiler.targets.cuda_tma import arm_ranges_enabled, spin_limit
    from tileagent.compiler.targets.cuda_wgmma import opaque_mode

    return (tma_mode(), overlap_enabled(), spin_limit(), warp_specialize.enabled(), warp_specialize.forced(),
            coarsen.enabled(), stage_epilogue.enabled(), m_major_a_enabled(), arm_fences.enabled(), opaque_mode(),
            bulk_store.enabled(), forward_shared.enabled(), early_loads.enabled(), reduce.fuse_enabled(),
            redundant_barriers.enabled(), redundant_barriers.sides_enabled(), single_stage.enabled(),
            arm_ranges_enabled(), defer_gemm.switches(), gather.enabled())


def cache_key(func: PrimFunc, *parts: str) -> str:
    h = hashlib.sha256(print_func(func).encode())
    for s in walk(func.body):
        if isinstance(s, AnnotateLayout):
            h.update(repr(s.layouts).encode())
        elif isinstance(s, Parallel) and s.annotations:
            h.update(repr(sorted(s.annotations.items())).encode())
    for part in (*parts, compiler_fingerprint()):
        h.update(b"\0" + str(part).encode())
    h.update(b"\0" + repr(code_switches()).encode())
    return h.hexdigest()


def _path(key: str) -> Path:
    return Path(os.environ.get("TILEAGENT_CACHE_DIR") or "~/.cache/tileagent").expanduser() / "modules" / f"{key}.pkl"


def load(key: str, func: PrimFunc):
    """(module, CUDA source, PTX) re-bound to ``func``'s parameters, or None. The PTX is "" for a module the PTX
    target does not cover, None when the entry does not say."""
    try:
        with open(_path(key), "rb") as f:
            module, source, *ptx = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None
    buffers = [p for p in func.params if isinstance(p, Buffer)]
    flats = list(module.flat_globals.values())
    if len(flats) != len(buffers):
        return None
    return replace(module, flat_globals=dict(zip(buffers, flats))), source, (ptx or [None])[0]


# Pickling the IR's frozen slots dataclasses through dataclasses' __getstate__/__setstate__ calls fields() for every
# node (hundreds per module); the picklers of ``store`` reduce them to (class, field values) instead, about twice
# as fast to write and to read. Classes with their own __reduce__ (tir.SpecialVar: one object per name) keep it.
@functools.cache
def _field_names(cls) -> tuple:
    import dataclasses

    return tuple(f.name for f in dataclasses.fields(cls))


def _rebuild(cls, values):
    """A node of class ``cls`` with these field values, in field order (what ``dump`` wrote)."""
    obj = object.__new__(cls)
    for name, value in zip(_field_names(cls), values):
        object.__setattr__(obj, name, value)
    return obj


def _node_reducers() -> dict:
    import dataclasses
    import operator

    from tileagent.compiler import diagnostics, tir
    from tileagent.compiler.ir import expr, stmt

    table = {}
    for module in (expr, stmt, tir, diagnostics):
        for cls in vars(module).values():
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
                    and "__slots__" in cls.__dict__) or cls.__reduce__ is not object.__reduce__ or \
                    cls.__reduce_ex__ is not object.__reduce_ex__:
                continue
            names = _field_names(cls)
            if not names:
                continue
            get = operator.attrgetter(*names)
            table[cls] = (lambda c, g: lambda o: (_rebuild, (c, g(o))))(cls, get) if len(names) > 1 else \
                (lambda c, g: lambda o: (_rebuild, (c, (g(o),))))(cls, get)
    return table


_REDUCERS: dict | None = None


def dump(obj, f) -> None:
    """``pickle.dump`` of IR (``obj``) to file ``f``, with the IR nodes reduced to their fields (``_rebuild``)."""
    global _REDUCERS
    if _REDUCERS is None:
        _REDUCERS = _node_reducers()
    pickler = pickle.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _REDUCERS
    pickler.dump(obj)


def store(key: str, module: DeviceModule, source: str, ptx: str | None = None) -> None:
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            dump((module, source, ptx), f)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("could not write the module cache %s: %s", path, e)
