"""Tile IR -> tile IR rewrites the GPU pipeline applies before layout inference.

In: a checked PrimFunc. Out: a PrimFunc computing the same, with every ``T.copy`` between two fragments that slices
either of them (``T.copy(lse_local[k, :], lse_split)`` in TileLang's split-KV decoding, ``k`` a T.serial variable)
replaced by the T.Parallel loop it means (``for i in T.Parallel(n): lse_split[i] = lse_local[k, i]``), which layout
inference maps to threads (a serially indexed dim stays in registers) and the lowering runs register to register.
Guarantees: statements that need no rewrite are kept as they are (the same objects); the loop has the copy's span and
the tile's extents (size-1 dims dropped, both sides paired in order, as ``T.copy`` pairs them); the value is cast to
the destination's dtype as the copy would. The CPU interpreter runs the original function.

Masks split by tile (``split_masks``): a T.Parallel loop of static extents whose body is one store of
``T.if_then_else(cond, a, b)``, where ``cond`` compares two integer expressions whose difference is linear in the
loop's variables (integer coefficients; the rest may be anything that does not change in the loop: block indices, an
enclosing loop's variable, a dynamic size), becomes
``if <cond holds at every point of the tile>: store a / elif <cond holds at none>: store b / else: the loop``. Both
tests are uniform over the block (they read no loop variable): the smallest and the largest value of the difference
over the tile's box, from the signs of its coefficients. This is how causal attention's mask (``bx * bM + i >= k * bN +
j``) costs a compare and a select per element only on the tiles the diagonal crosses, and a ragged-length mask only on
the last tile. Values are those of the loop, element for element (the branch taken is the select's outcome at every
point). A row gather's mask (``T.if_then_else(row < n, G[row, d], 0)`` into a shared tile) stays: the gather's
lowering tests it once per run of the row, and only the loop as written can be a pipeline producer.
"""

from __future__ import annotations

from dataclasses import replace

from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Cast, Cmp, Load, Select, Var, make_binop, make_cast, make_cmp
from tileagent.compiler.ir.simplify import additive_terms, depends_on, static_int, sum_of_terms
from tileagent.compiler.ir.stmt import Copy, If, Parallel, PrimFunc, Region, Store
from tileagent.compiler.lower.gather import row_gather


def desugar(func: PrimFunc) -> PrimFunc:
    body = _stmts(func.body)
    return func if body is func.body else replace(func, body=body)


def split_masks(func: PrimFunc) -> PrimFunc:
    """``func`` with each masking T.Parallel loop split by tile (see the module docstring)."""
    body = _walk(func.body, _split_mask)
    return func if body is func.body else replace(func, body=body)


def _walk(stmts: tuple, fn) -> tuple:
    out = []
    for s in stmts:
        new = fn(s)
        if new is s:
            changes = {}
            for name in ("body", "then_body", "else_body"):
                body = getattr(s, name, None)
                if isinstance(body, tuple):
                    inner = _walk(body, fn)
                    if inner is not body:
                        changes[name] = inner
            new = replace(s, **changes) if changes else s
        out.append(new)
    return stmts if all(a is b for a, b in zip(out, stmts)) else tuple(out)


_FLIP = {">=": (1, 0), ">": (1, 1), "<=": (-1, 0), "<": (-1, 1)}  # a op b <=> sign * (a - b) - shift >= 0


def _split_mask(s):
    """The If a masking T.Parallel loop becomes, or ``s`` itself."""
    if not isinstance(s, Parallel) or len(s.body) != 1 or not isinstance(s.body[0], Store) or \
            row_gather(s) is not None:  # rows under a row condition: tested once a run (compiler.lower.gather)
        return s
    store = s.body[0]
    value, cast = store.value, None
    if isinstance(value, Cast):
        value, cast = value.value, value.dtype
    if not isinstance(value, Select) or not isinstance(value.cond, Cmp) or value.cond.op not in _FLIP:
        return s
    extents = [static_int(n) for n in s.extents]
    if any(n is None or n < 1 for n in extents):
        return s
    cond = value.cond
    terms = additive_terms(make_binop("-", cond.a, cond.b))
    if terms is None:
        return s
    sign, shift = _FLIP[cond.op]
    coef, const = terms
    lo = hi = sign * const - shift
    rest = []
    for atom, c in coef:
        c *= sign
        var = next((n for v, n in zip(s.vars, extents) if atom is v), None)
        if var is not None:
            lo, hi = lo + min(0, c * (var - 1)), hi + max(0, c * (var - 1))
        elif depends_on(atom, s.vars):
            return s  # the loop's variables inside a non-linear term
        else:
            rest.append((atom, c))
    if len(rest) == len(coef):
        return s  # the condition does not vary over the tile: nothing to split

    def fill(v):
        v = make_cast(v, cast) if cast is not None else v
        return replace(s, body=(Store(store.buffer, store.indices, v, store.span),))

    every = make_cmp(">=", sum_of_terms(rest, lo), 0)  # the smallest difference over the tile holds
    none = make_cmp("<", sum_of_terms(rest, hi), 0)  # the largest does not
    return If(every, (fill(value.a),), (If(none, (fill(value.b),), (s,), s.span),), s.span)


def _stmts(stmts: tuple) -> tuple:
    out = tuple(_stmt(s) for s in stmts)
    return stmts if all(a is b for a, b in zip(out, stmts)) else out


def _stmt(s):
    if isinstance(s, Copy) and s.src.buffer.scope == s.dst.buffer.scope == "fragment" and \
            not (_whole(s.src) and _whole(s.dst)):
        return _as_loop(s)
    changes = {}
    for name in ("body", "then_body", "else_body"):
        body = getattr(s, name, None)
        if isinstance(body, tuple):
            new = _stmts(body)
            if new is not body:
                changes[name] = new
    return replace(s, **changes) if changes else s


def _whole(r: Region) -> bool:
    return all(isinstance(x, int) and x == 0 for x in r.starts) and tuple(r.extents) == tuple(r.buffer.shape)


def _as_loop(s: Copy) -> Parallel:
    extents = s.dst.tile_shape()
    loop_vars = tuple(Var(f"{s.dst.buffer.name}_i{d}", DType("int32")) for d in range(len(extents)))
    value = make_cast(Load(s.src.buffer, _index(s.src, loop_vars), s.src.buffer.dtype, s.span), s.dst.buffer.dtype)
    store = Store(s.dst.buffer, _index(s.dst, loop_vars), value, s.span)
    return Parallel(loop_vars, tuple(extents), (store,), {}, s.span)


def _index(r: Region, loop_vars: tuple) -> tuple:
    along = list(loop_vars)
    return tuple(make_binop("+", start, along.pop(0)) if n != 1 else start for start, n in zip(r.starts, r.extents))
