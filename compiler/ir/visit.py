"""Traversals of the IR shared by the passes: statements in a tree, expressions of a statement, loads in an
expression.

In: tile-IR or thread-IR statements and expressions. Out: generators, in source order.
Guarantees: ``walk`` yields every statement (pre-order) including those nested in loop, if and kernel bodies
(``leaves`` only those without nested statements);
``loads`` yields every Load, also those inside indices of other Loads; ``variables`` every Var an expression mentions
(also in call arguments and load indices). ``substitute`` returns a copy of an
expression or region with variables replaced (unchanged nodes are shared).
"""

from __future__ import annotations

from dataclasses import fields, replace

from tileagent.compiler.ir.expr import Const, Expr, Load, Var, as_expr
from tileagent.compiler.ir.stmt import Assert, AtomicAdd, For, If, Let, Region, Store, While


def walk(stmts):
    for s in stmts:
        yield s
        for name in ("body", "then_body", "else_body"):
            yield from walk(getattr(s, name, ()) or ())


def leaves(stmts):
    """The statements of ``stmts`` (at any depth) that hold no nested statements, in source order."""
    return (s for s in walk(stmts) if not any(hasattr(s, n) for n in ("body", "then_body", "else_body")))


def stmt_exprs(s) -> list:
    """The scalar expressions a statement evaluates itself (not those of nested statements)."""
    if isinstance(s, (Store, AtomicAdd)):
        return list(s.indices) + [s.value]
    if isinstance(s, Let):
        return [s.value]
    if isinstance(s, (If, Assert)):
        return [s.cond]
    if isinstance(s, While):
        return [s.cond]
    if isinstance(s, For):
        return [s.start, s.extent]
    return []


def loads(e):
    """The Loads of expression ``e`` (or of a tuple of expressions), each before the Loads in its indices."""
    if isinstance(e, Load):
        yield e
        yield from loads(e.indices)
    elif isinstance(e, tuple):
        for c in e:
            yield from loads(c)
    elif isinstance(e, Expr):
        for name in getattr(e, "__slots__", ()):
            yield from loads(getattr(e, name))


def variables(e):
    """The Vars of expression ``e`` (or of a tuple of expressions), with repeats."""
    if isinstance(e, Var):
        yield e
    elif isinstance(e, tuple):
        for c in e:
            yield from variables(c)
    elif isinstance(e, Expr):
        for name in getattr(e, "__slots__", ()):
            yield from variables(getattr(e, name))


def substitute(x, mapping: dict):
    """``x`` (an expression, a Region, or a tuple of them) with every Var in ``mapping`` replaced by its value."""
    if isinstance(x, Var):
        return mapping.get(x, x)
    if isinstance(x, tuple):
        return tuple(substitute(c, mapping) for c in x)
    if isinstance(x, Region):
        return replace(x, starts=substitute(tuple(x.starts), mapping))
    if not isinstance(x, Expr) or isinstance(x, Const):
        return x
    changes = {}
    for f in fields(x):
        v = getattr(x, f.name)
        if isinstance(v, (Expr, tuple)):
            nv = substitute(v, mapping)
            if nv is not v:  # a field that held an expression keeps one (a Var replaced by a number: a Const)
                changes[f.name] = as_expr(nv, v.dtype) if isinstance(v, Expr) and isinstance(nv, (int, float)) else nv
    return replace(x, **changes) if changes else x
