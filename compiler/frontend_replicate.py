"""Frontend, last step: a fragment that every thread reads whole becomes a per-thread (local) array.

In: the statements of a parsed prim_func. Out: the same statements, where each fragment that is (a) read with a
non-constant index outside ``T.Parallel`` (``if block_mask[k]:`` in a serial loop), (b) written only by ``T.copy``
(a table loaded from memory: a block mask, block indices) and (c) never indexed by ``T.Parallel`` variables, is
replaced by a ``local`` buffer of the same name, shape and dtype.
Why: TileLang gives such a fragment a fully replicated layout (every thread holds every element), which is what a
local array is; without this the checks reject the program (E504). Guarantees: results are unchanged (each thread
copies the whole tile into its own array, as the replicated layout does); any other fragment is left alone, so the
E504/E503 checks still report the programs that cannot be helped (a fragment computed by fill or element stores
and then read by a serial index stays an E504). In a kernel with per-thread code (``T.get_thread_binding``) element
stores outside ``T.Parallel`` do not block it either: every thread runs them into its own copy (TileLang's DSA
sparse-MLA producer keeps each thread's prefetched indices so).
"""

from __future__ import annotations

import dataclasses

from tileagent.compiler.ir.expr import Expr, Load
from tileagent.compiler.ir.simplify import depends_on, static_int
from tileagent.compiler.ir.stmt import Alloc, AnnotateLayout, Buffer, Copy, Parallel, Region, Store

_BODIES = ("body", "then_body", "else_body")


def _loads(x):
    """Every Load inside ``x`` (an expression, a Region, or a tuple of them)."""
    if isinstance(x, Load):
        yield x
        for i in x.indices:
            yield from _loads(i)
    elif isinstance(x, tuple):
        for c in x:
            yield from _loads(c)
    elif isinstance(x, Region):
        yield from _loads(tuple(x.starts))
    elif isinstance(x, Expr):
        for name in getattr(x, "__slots__", ()):
            yield from _loads(getattr(x, name))


def _scan(stmts, par_vars: tuple, wanted: set, blocked: set, per_thread: bool = False) -> None:
    for s in stmts:
        inner = par_vars + tuple(s.vars) if isinstance(s, Parallel) else par_vars
        per_thread = per_thread or bool(getattr(s, "thread_vars", ()))
        accesses = []
        for f in dataclasses.fields(s):
            if f.name in _BODIES or f.name == "span":
                continue
            value = getattr(s, f.name)
            if isinstance(value, Buffer) and value.scope == "fragment":
                if not isinstance(s, (Alloc, Store)):
                    blocked.add(value)  # a whole-buffer operand of gemm/reduce/...
                continue
            if isinstance(value, Region) and value.buffer.scope == "fragment" and not isinstance(s, Copy):
                blocked.add(value.buffer)  # only T.copy may fill such a table (not fill/gemm/reduce/atomics)
            if isinstance(s, AnnotateLayout):
                blocked.update(b for b, _ in s.layouts if isinstance(b, Buffer))
            accesses += [(ld.buffer, ld.indices) for ld in _loads(value)]
        if isinstance(s, Store) and s.buffer.scope == "fragment" and (inner or not per_thread):
            blocked.add(s.buffer)  # element writes: the fragment is computed, not a table loaded by T.copy
        for buf, indices in accesses:
            if buf.scope != "fragment":
                continue
            if inner and any(depends_on(i, inner) for i in indices):
                blocked.add(buf)
            elif not inner and any(static_int(i) is None for i in indices):
                wanted.add(buf)
        for name in _BODIES:
            _scan(getattr(s, name, ()) or (), inner, wanted, blocked, per_thread)


def _rewrite(x, mapping: dict):
    if isinstance(x, Buffer):
        return mapping.get(x, x)
    if isinstance(x, tuple):
        new = tuple(_rewrite(c, mapping) for c in x)
        return x if all(a is b for a, b in zip(new, x)) else new
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changes = {}
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            if isinstance(v, (Buffer, tuple)) or (dataclasses.is_dataclass(v) and not isinstance(v, type)):
                nv = _rewrite(v, mapping)
                if nv is not v:
                    changes[f.name] = nv
        return dataclasses.replace(x, **changes) if changes else x
    return x


def demote_replicated_fragments(body: tuple) -> tuple:
    """``body`` with the fragments described in the module docstring made local arrays."""
    wanted: set = set()
    blocked: set = set()
    _scan(body, (), wanted, blocked)
    demote = wanted - blocked
    if not demote:
        return body
    mapping = {b: dataclasses.replace(b, scope="local") for b in demote}
    return _rewrite(body, mapping)


__all__ = ["demote_replicated_fragments"]
