"""Arithmetic simplification of index expressions.

In: an integer expression (Python int or Expr). Out: its linear form over Vars, or its static value.
Guarantees: ``static_int`` returns an int only when the expression has that value for every binding of its Vars
(e.g. ``(bx + 1) * 64 - bx * 64`` is 64); otherwise None.
"""

from __future__ import annotations

from compiler.ir.expr import BinOp, Cast, Const, Expr, Unary, Var


def linear_form(e) -> tuple[dict, int] | None:
    """e as (coefficients by Var, constant), or None when e is not linear with integer coefficients."""
    if isinstance(e, bool):
        return None
    if isinstance(e, int):
        return {}, e
    if isinstance(e, Const) and isinstance(e.value, int) and not e.dtype.is_float:
        return {}, int(e.value)
    if isinstance(e, Var):
        return {e: 1}, 0
    if isinstance(e, Cast) and not e.dtype.is_float:
        return linear_form(e.value)
    if isinstance(e, Unary) and e.op == "-":
        f = linear_form(e.a)
        return None if f is None else ({v: -c for v, c in f[0].items()}, -f[1])
    if isinstance(e, BinOp) and e.op in ("+", "-", "*"):
        fa, fb = linear_form(e.a), linear_form(e.b)
        if fa is None or fb is None:
            return None
        if e.op == "*":
            if fa[0] and fb[0]:
                return None
            (coef, const), k = (fa, fb[1]) if not fb[0] else (fb, fa[1])
            return {v: c * k for v, c in coef.items() if c * k}, const * k
        sign = 1 if e.op == "+" else -1
        coef = dict(fa[0])
        for v, c in fb[0].items():
            coef[v] = coef.get(v, 0) + sign * c
            if coef[v] == 0:
                del coef[v]
        return coef, fa[1] + sign * fb[1]
    return None


def static_int(e) -> int | None:
    """The value of e if it does not depend on any variable, else None."""
    f = linear_form(e)
    if f is None or f[0]:
        return None
    return f[1]


def is_static(e) -> bool:
    return static_int(e) is not None


def depends_on(e, variables) -> bool:
    """Whether expression e mentions any of ``variables``."""
    if not isinstance(e, Expr):
        return False
    if isinstance(e, Var):
        return any(e is v for v in variables)
    for name in getattr(e, "__slots__", ()):
        child = getattr(e, name)
        if isinstance(child, Expr) and depends_on(child, variables):
            return True
        if isinstance(child, tuple) and any(depends_on(c, variables) for c in child):
            return True
    return False
