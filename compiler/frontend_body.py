"""Checks and cuts of a parsed prim_func body, before it becomes a PrimFunc (``compiler.frontend``).

In: the statements of a ``@T.prim_func`` body as the parser built them. Out / guarantees:
- ``check_view_aliasing``: no kernel writes a storage it reaches under two names (a view and its base, or two views
  of one base; CUDA parameters are ``__restrict__``), else E102 at the kernel;
- ``split_at_grid_syncs``: the kernel body cut at its top-level ``T.sync_grid()`` markers, each later part starting
  with the lets and layout annotations before it and the allocations it uses (each part declares only the buffers
  it uses: a fragment of one part does not get a layout, or shared memory, in another); a marker inside a loop or
  branch is an E701;
- ``parallel_nest``: a perfect nest of T.Parallel loops merged into one Parallel;
- ``snapshot``: the values of a tuple assignment to elements, each that reads memory bound to a let first;
- ``with_span`` (a statement given the parser's span unless it has one), ``vars_in`` (the Vars of an expression).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLSyntaxError
from tileagent.compiler.ir.simplify import depends_on
from tileagent.compiler.ir.stmt import Alloc, AtomicAdd, Kernel, Let, Parallel, Store


def snapshot(fe, values, node) -> list:
    """``values`` with each one that reads memory bound to a fresh let first (``a[0], a[1] = a[1], a[0]``: the
    stores after it must not change what the later ones store)."""
    from tileagent.compiler.ir.expr import Expr, Var
    from tileagent.compiler.ir.visit import loads

    out = []
    for k, v in enumerate(values):
        if isinstance(v, Expr) and any(True for _ in loads(v)):
            var = Var(f"swapped{k}", v.dtype)
            fe.emit(Let(var, v), node)
            v = var
        out.append(v)
    return out


def check_view_aliasing(body: tuple, views: list) -> None:
    """The aliasing rule of views (E102): CUDA kernel parameters are ``__restrict__``, so one kernel may not write
    through one name of a storage and touch it through another (a view and its base, or two views of one base)."""
    if not views:
        return
    from tileagent.compiler.ir.visit import walk
    from tileagent.compiler.lower.smem import buffers_used

    root = {v: b for v, b in views}
    for k in (s for s in walk(body) if isinstance(s, Kernel)):
        used = buffers_used(k.body)
        written = {x.buffer for x in walk(k.body) if isinstance(x, (Store, AtomicAdd))} | {
            b for x in walk(k.body) for b in _writes(x)}
        groups: dict = {}
        for b in used:
            groups.setdefault(root.get(b, b), []).append(b)
        for base, names in groups.items():
            if len(names) > 1 and any(b in written for b in names):
                listed = ", ".join(sorted(b.name for b in names))
                raise DSLSyntaxError(f"the kernel writes storage of '{base.name}' and reaches it under several "
                                     f"names ({listed}); a view and its base cannot alias within one kernel",
                                     k.span, code="E102", hint="use one name (the view or the base) per kernel")


def split_at_grid_syncs(body: tuple) -> list:
    """The kernel body cut at its top-level ``T.sync_grid()`` markers (``GridSync``); each later part starts with the
    let-bindings and layout/swizzle annotations of the parts before it and those of their allocations it uses; with
    more than one part, a part keeps only the top-level allocations of buffers it uses (the kernels are laid out
    one by one: an unused fragment there would get a free layout, which layout inference would then also give the
    part that uses it). A marker inside a loop or branch is an E701."""
    from tileagent.compiler.diagnostics import UnsupportedError
    from tileagent.compiler.ir.stmt import AnnotateLayout, GridSync, UseSwizzle
    from tileagent.compiler.ir.visit import walk

    parts, current, preamble = [], [], []
    for s in body:
        if isinstance(s, GridSync):
            parts.append(tuple(current))
            current = list(preamble)
            continue
        current.append(s)
        if isinstance(s, (Alloc, Let, AnnotateLayout, UseSwizzle)):
            preamble.append(s)
    parts.append(tuple(current))
    for part in parts:
        nested = next((x for x in walk(part) if isinstance(x, GridSync)), None)
        if nested is not None:
            raise UnsupportedError("T.sync_grid inside a loop or branch is not supported: TileAgent splits a kernel at "
                                   "a top-level T.sync_grid() into kernels launched one after the other",
                                   nested.span, hint="call T.sync_grid() at the top level of the T.Kernel body")
    return [_used_allocations(part) for part in parts] if len(parts) > 1 else parts


def _used_allocations(part: tuple) -> tuple:
    """``part`` without its top-level allocations of buffers no other statement of it mentions."""
    from tileagent.compiler.lower.smem import buffers_used

    used = set()
    for s in part:
        if not isinstance(s, Alloc):
            used |= buffers_used(s)
    used |= {s.view_of for s in part if isinstance(s, Alloc) and s.buffer in used and s.view_of is not None}
    return tuple(s for s in part if not isinstance(s, Alloc) or s.buffer in used)


def _writes(s) -> frozenset:
    """The buffers tile op ``s`` writes (nothing for other statements)."""
    from tileagent.compiler.tileops import op_for

    op = op_for(s)
    return op.effects(s).writes if op is not None else frozenset()


def parallel_nest(loop_vars: tuple, spec, body: tuple) -> Parallel:
    """The T.Parallel of ``loop_vars`` over ``body``.

    A perfect nest -- a body that is exactly one T.Parallel whose extents do not use ``loop_vars`` -- merges into
    one Parallel over the concatenated variables and extents (the inner loop's annotations win), as TileLang
    allows, so later stages see a single nest. Other nests stay nested and the checks reject them (E506).
    """
    inner = body[0] if len(body) == 1 and isinstance(body[0], Parallel) else None
    if inner is None or any(depends_on(e, loop_vars) for e in inner.extents):
        return Parallel(loop_vars, spec.extents, body, dict(spec.annotations))
    return Parallel(loop_vars + inner.vars, tuple(spec.extents) + tuple(inner.extents), inner.body,
                    {**spec.annotations, **inner.annotations})


def vars_in(e):
    """The Vars of expression ``e``, depth first (repeats included)."""
    from tileagent.compiler.ir.expr import Expr, Var

    if isinstance(e, Var):
        yield e
    elif isinstance(e, Expr):
        for name in getattr(e, "__slots__", ()):
            child = getattr(e, name)
            if isinstance(child, Expr):
                yield from vars_in(child)


def with_span(stmt, span):
    """``stmt`` with ``span`` unless it carries one."""
    if getattr(stmt, "span", None) is not None:
        return stmt
    from dataclasses import replace

    return replace(stmt, span=span)
