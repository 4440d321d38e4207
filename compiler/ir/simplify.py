"""Arithmetic simplification of index expressions.

In: an integer expression (Python int or Expr). Out: its linear form over Vars, or its static value.
Guarantees: ``static_int`` returns an int only when the expression has that value for every binding of its Vars
(e.g. ``(bx + 1) * 64 - bx * 64`` is 64); otherwise None. ``below_bound`` returns an expression whose comparison
with the bound is the same for every binding; ``same_expr`` is True only for expressions equal by construction;
``known_multiple`` returns a number that divides the expression for every binding.
"""

from __future__ import annotations

import math

from tileagent.compiler.ir.expr import BinOp, Cast, Const, Expr, Load, Select, Unary, Var


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


def known_multiple(e, lets=None) -> int:
    """A number that divides the integer expression e for every binding of its Vars (0: e is always 0; 1: nothing
    known). Unlike ``linear_form`` it looks through ``%``, ``//`` and selects: ``(p % n) * 4096`` is a multiple of
    4096 whatever p and n are, since ``a % b`` is a - b * q and so a multiple of every common divisor of a and b.
    ``lets``: Var -> the expression a named temporary was bound to (``h0 = (p % n) * 4096``)."""
    form = linear_form(e)
    linear = math.gcd(form[1], *form[0].values()) if form is not None else 1
    return math.lcm(linear, _structural_multiple(e, lets or {}))  # both divide e, so their lcm does


def _structural_multiple(e, lets) -> int:
    if isinstance(e, bool):
        return 1
    if isinstance(e, int):
        return abs(e)
    if isinstance(e, Var):
        return _structural_multiple(lets[e], lets) if e in lets else 1
    if isinstance(e, Const):
        return abs(int(e.value)) if isinstance(e.value, int) and not e.dtype.is_float else 1
    if isinstance(e, Cast) and not e.dtype.is_float:
        return _structural_multiple(e.value, lets)
    if isinstance(e, Unary) and e.op == "-":
        return _structural_multiple(e.a, lets)
    if isinstance(e, Select):
        return math.gcd(_structural_multiple(e.a, lets), _structural_multiple(e.b, lets))
    if isinstance(e, BinOp):
        a = _structural_multiple(e.a, lets)
        if e.op == "*":
            return a * _structural_multiple(e.b, lets)
        if e.op in ("+", "-", "%"):
            return math.gcd(a, _structural_multiple(e.b, lets))
        if e.op in ("^", "|"):  # the low bits both sides have clear stay clear
            g = math.gcd(a, _structural_multiple(e.b, lets))
            return g & -g
        shift = static_int(e.b) if e.op == "<<" else None
        if shift is not None and 0 <= shift < 63:
            return a << shift
        c = static_int(e.b) if e.op == "//" else None
        if c is not None and c > 0 and a % c == 0:  # (k * 64) // 2: the division is exact, k * 32
            return a // c
    return 1


def static_int(e) -> int | None:
    """The value of e if it does not depend on any variable, else None."""
    f = linear_form(e)
    if f is None or f[0]:
        return None
    return f[1]


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


def same_expr(a, b) -> bool:
    """Whether two expressions are the same by construction: the same node types, operators, constants and dtypes,
    and the very same Var objects (two Vars of one name are different variables). Loads are the same only when they
    are one object."""
    if a is b:
        return True
    if isinstance(a, Expr) != isinstance(b, Expr) or type(a) is not type(b):
        return False
    if not isinstance(a, Expr):
        return isinstance(a, (int, float, bool)) and a == b and type(a) is type(b)
    if isinstance(a, (Var, Load)):
        return False
    for name in a.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, tuple):
            if not (isinstance(y, tuple) and len(x) == len(y) and all(same_expr(u, v) for u, v in zip(x, y))):
                return False
        elif isinstance(x, Expr) or isinstance(y, Expr):
            if not same_expr(x, y):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def below_bound(e, n: int, range_of):
    """An expression ``m`` with ``(m < n) == (e < n)`` for every binding, simpler than ``e`` where it can be:
    ``e = p*X + r`` (every other term a multiple of ``p``) with ``0 <= r < p`` (``range_of(r)``, an interval or
    None) and ``n`` a multiple of ``p`` gives ``m = p*X``, since ``p*X < n`` means ``p*X <= n - p``. A vector's
    element ``r + 8*t < 416`` becomes the vector's own bound ``8*t < 416``: one guard per vector instead of one per
    element, the same for every element (less for NVRTC to optimize away). Otherwise ``e`` itself."""
    terms = additive_terms(e)
    if terms is None or not isinstance(n, int) or isinstance(n, bool):
        return e
    coef, const = terms
    period = 0
    for _, c in coef:
        if abs(c) > 1:
            period = math.gcd(period, c)
    if period < 2 or n % period:
        return e
    split = split_multiples(e, period)
    if split is None:
        return e
    rest, multiple = split
    r = (rest, rest) if isinstance(rest, int) else range_of(rest)
    if r is None or r[0] < 0 or r[1] >= period or (isinstance(rest, int) and rest == 0):
        return e
    return multiple


def difference(a, b) -> int | None:
    """a - b when it is a constant, treating any non-linear sub-expression as an opaque atom (compared by its printed
    form): ``(k0 + 1) - k0`` is 1 even when k0 = ``lane % 4 * 2``. None otherwise."""
    fa, fb = _atoms(a), _atoms(b)
    if fa is None or fb is None:
        return None
    keys = set(fa[0]) | set(fb[0])
    if any(fa[0].get(k, 0) != fb[0].get(k, 0) for k in keys):
        return None
    return fa[1] - fb[1]


def is_even(e) -> bool:
    """Whether an integer expression is even for every binding of its variables (sums of even terms, products with
    an even factor)."""
    if isinstance(e, bool):
        return False
    if isinstance(e, int):
        return e % 2 == 0
    if isinstance(e, Const):
        return not e.dtype.is_float and int(e.value) % 2 == 0
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        return is_even(e.a) and is_even(e.b)
    if isinstance(e, BinOp) and e.op == "*":
        return is_even(e.a) or is_even(e.b)
    return False


def _atoms(e):
    """Linear form over variables and opaque atoms: ({key: coefficient}, constant)."""
    from tileagent.compiler.ir.printer import expr_str

    if isinstance(e, bool):
        return None
    if isinstance(e, int):
        return {}, e
    if isinstance(e, Const):
        return None if e.dtype.is_float else ({}, int(e.value))
    if isinstance(e, BinOp) and e.op in ("+", "-", "*"):
        fa, fb = _atoms(e.a), _atoms(e.b)
        if fa is not None and fb is not None:
            if e.op == "*":
                if not fa[0] or not fb[0]:
                    (coef, const), k = (fa, fb[1]) if not fb[0] else (fb, fa[1])
                    return {v: c * k for v, c in coef.items() if c * k}, const * k
            else:
                sign = 1 if e.op == "+" else -1
                coef = dict(fa[0])
                for v, c in fb[0].items():
                    coef[v] = coef.get(v, 0) + sign * c
                return {v: c for v, c in coef.items() if c}, fa[1] + sign * fb[1]
    if isinstance(e, Expr):
        return {expr_str(e): 1}, 0
    return None


def split_multiples(e, period: int):
    """``e`` as (rest, multiple) with e == rest + multiple and ``multiple`` a sum of terms whose coefficients are
    multiples of ``period`` (non-linear sub-expressions are opaque terms of coefficient 1); None when ``e`` is not a
    sum of terms or nothing splits off. Used to pull whole swizzle periods out of an XOR swizzle."""
    terms = additive_terms(e)
    if terms is None:
        return None
    coef, const = terms
    outer = [(a, c) for a, c in coef if c % period == 0]
    if not outer and const < period:
        return None
    inner = [(a, c) for a, c in coef if c % period]
    return sum_of_terms(inner, const % period), sum_of_terms(outer, const - const % period)


def additive_terms(e):
    """e as ([(atom, coefficient)], constant), or None (a float): atoms are Vars or non-linear sub-expressions (by
    identity). ``sum_of_terms`` builds the expression back."""
    if isinstance(e, bool):
        return None
    if isinstance(e, int):
        return [], e
    if isinstance(e, Const):
        return None if e.dtype.is_float else ([], int(e.value))
    if isinstance(e, BinOp) and e.op in ("+", "-", "*"):
        fa, fb = additive_terms(e.a), additive_terms(e.b)
        if fa is not None and fb is not None:
            if e.op == "*" and (not fa[0] or not fb[0]):
                (coef, const), k = (fa, fb[1]) if not fb[0] else (fb, fa[1])
                return [(a, c * k) for a, c in coef if c * k], const * k
            if e.op != "*":
                sign = 1 if e.op == "+" else -1
                return fa[0] + [(a, sign * c) for a, c in fb[0]], fa[1] + sign * fb[1]
    if isinstance(e, Expr) and not e.dtype.is_float:
        return [(e, 1)], 0
    return None


def sum_of_terms(terms, const):
    """The expression ``sum(c * atom for atom, c in terms) + const`` (an int when there are no terms)."""
    from tileagent.compiler.ir.expr import make_binop

    out = const
    for atom, c in terms:
        term = atom if c == 1 else make_binop("*", atom, c)
        out = term if isinstance(out, int) and out == 0 else make_binop("+", out, term)
    return out
