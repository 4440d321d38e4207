"""Frontend, last step: a fragment indexed past its declared shape by ``T.Parallel`` variables takes the loops' size.

In: the statements of a parsed prim_func. Out: the same statements, where each fragment that (a) some ``T.Parallel``
indexes in a dim directly by a loop variable whose extent exceeds that dim, and (b) is only ever accessed element
by element (never a whole-buffer or region operand of a tile op, never a ``T.reshape`` base or view, no
``T.annotate_layout``), is declared with that dim grown to the largest such extent.
Why: TileLang lays a fragment out by the loops that index it, so ``sinks = T.alloc_fragment([heads])`` written and
read as ``sinks[i]`` in ``T.Parallel(block_M)`` (its attention-sink backward examples, heads 8 < block_M 64) holds
block_M values; without this the layout checks reject the program (L004). Guarantees: every element access the
program makes is inside the grown shape and means what it meant on TileLang; a fragment used any other way keeps
its shape (and L004, with its hint, where the loop runs past it). Each growth is logged.
"""

from __future__ import annotations

import dataclasses
import logging

from tileagent.compiler.frontend_replicate import _BODIES, _loads, _rewrite
from tileagent.compiler.ir.expr import Var
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import Alloc, AnnotateLayout, Buffer, Parallel, Region, Store

logger = logging.getLogger(__name__)


def _scan(stmts, extents: dict, grow: dict, blocked: set) -> None:
    """``extents``: the enclosing T.Parallel variables' static extents; ``grow``: fragment -> {dim: largest extent}."""
    for s in stmts:
        inner = dict(extents)
        if isinstance(s, Parallel):
            inner.update({v: static_int(e) for v, e in zip(s.vars, s.extents)})
        accesses = []
        for f in dataclasses.fields(s):
            if f.name in _BODIES or f.name == "span":
                continue
            value = getattr(s, f.name)
            if isinstance(value, Buffer) and value.scope == "fragment":
                if not isinstance(s, (Alloc, Store)) or getattr(s, "view_of", None) is not None:
                    blocked.add(value)  # a whole-buffer operand, or a view
                continue
            if isinstance(value, Region) and value.buffer.scope == "fragment":
                blocked.add(value.buffer)  # a tile op's region: its extents are the declared shape's
            if isinstance(s, AnnotateLayout):
                blocked.update(b for b, _ in s.layouts if isinstance(b, Buffer))
            accesses += [(ld.buffer, ld.indices) for ld in _loads(value)]
        if isinstance(s, Store) and s.buffer.scope == "fragment":
            accesses.append((s.buffer, s.indices))
        for buf, indices in accesses:
            if buf.scope != "fragment":
                continue
            for d, i in enumerate(indices):
                n, e = static_int(buf.shape[d]), inner.get(i) if isinstance(i, Var) else None
                if n is not None and e is not None and e > n:
                    grow.setdefault(buf, {})[d] = max(e, grow.get(buf, {}).get(d, 0))
        for name in _BODIES:
            _scan(getattr(s, name, ()) or (), inner, grow, blocked)


def grow_fragments_to_loops(body: tuple) -> tuple:
    """``body`` with the fragments described in the module docstring declared at their loops' size."""
    grow: dict = {}
    blocked: set = set()
    _scan(body, {}, grow, blocked)
    mapping = {}
    for buf, dims in grow.items():
        if buf in blocked:
            continue
        shape = tuple(dims.get(d, n) for d, n in enumerate(buf.shape))
        logger.info("fragment '%s' %s grown to %s: T.Parallel loops index it that far (TileLang lays it out by "
                    "them)", buf.name, tuple(buf.shape), shape)
        mapping[buf] = dataclasses.replace(buf, shape=shape)
    return _rewrite(body, mapping) if mapping else body


__all__ = ["grow_fragments_to_loops"]
