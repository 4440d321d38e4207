"""On-disk cache of lowered modules: the same DSL program compiles once per machine, then loads in milliseconds.

In: a checked PrimFunc and everything else that decides its lowering (target, arch, options). Out: the cached
(DeviceModule, CUDA source), re-bound to this PrimFunc's parameters, or None.
Guarantees: the key covers the printed tile IR plus what the printer leaves out (layout annotations, loop
annotations) and a fingerprint of the compiler's own source files (not just its version string: an upgrade or a
checkout of other code under the same version must not load modules pickled by different classes), so a hit is the module a fresh lowering would build; a corrupt or
incompatible entry is a miss. Entries live under ``$TILEAGENT_CACHE_DIR/modules``.
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


def cache_key(func: PrimFunc, *parts: str) -> str:
    h = hashlib.sha256(print_func(func).encode())
    for s in walk(func.body):
        if isinstance(s, AnnotateLayout):
            h.update(repr(s.layouts).encode())
        elif isinstance(s, Parallel) and s.annotations:
            h.update(repr(sorted(s.annotations.items())).encode())
    for part in (*parts, compiler_fingerprint()):
        h.update(b"\0" + str(part).encode())
    from tileagent.compiler.instructions.wgmma import OVERLAP_ENV, overlap_enabled

    if not overlap_enabled():  # switching the wgmma pipeline's overlap off changes the generated code
        h.update(b"\0" + OVERLAP_ENV.encode())
    return h.hexdigest()


def _path(key: str) -> Path:
    return Path(os.environ.get("TILEAGENT_CACHE_DIR") or "~/.cache/tileagent").expanduser() / "modules" / f"{key}.pkl"


def load(key: str, func: PrimFunc):
    """(module, source) re-bound to ``func``'s parameters, or None."""
    try:
        with open(_path(key), "rb") as f:
            module, source = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None
    buffers = [p for p in func.params if isinstance(p, Buffer)]
    flats = list(module.flat_globals.values())
    if len(flats) != len(buffers):
        return None
    return replace(module, flat_globals=dict(zip(buffers, flats))), source


def store(key: str, module: DeviceModule, source: str) -> None:
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump((module, source), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("could not write the module cache %s: %s", path, e)
