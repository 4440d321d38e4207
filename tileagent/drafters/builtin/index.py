"""Index algebra of the fusion lowering: sizes with a value and a symbolic text, linear index forms.

In: integers from a symbolic trace (``Size.of``), loop atoms (``Var``), run-time indices (``Dyn``). Out: ``Lin``, a
linear form over atoms with floor-division (``Div``) and modulo (``Mod``) atoms, and ``ravel`` / ``unravel`` between
n-d indices and flat offsets of contiguous tensors.

Guarantees: simplifications (``Lin.fdiv``, ``Lin.mod``, ``(L // d) * d + L % d = L``) are exact for every value the
atoms can take (decided on the traced config's values, as Inductor decides on its size hints; ``fusion.lift`` then
checks that every config renders the same text); ``Size.t`` is Python text over the size symbols.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
from sympy.printing.str import StrPrinter
import torch
from torch.utils._sympy.functions import FloorDiv


class Unsupported(Exception):
    """The graph holds something the fusion lowering does not write (the message names the op and the source line)."""


# -- sizes ---------------------------------------------------------------------------------------------------------


class Size:
    """An integer: its value at the traced config (``v``) and a sympy expression over the size symbols (``e``);
    ``t`` is its Python text."""

    __slots__ = ("v", "e")

    def __init__(self, v: int, e):
        self.v = int(v)
        self.e = sympy.Integer(int(v)) if e is None or isinstance(e, str) else e

    @property
    def t(self) -> str:
        return _py(self.e)

    def __repr__(self):
        return f"Size({self.v}, {self.t})"

    def __eq__(self, o):
        return isinstance(o, Size) and o.v == self.v

    def __hash__(self):
        return hash(self.v)

    @staticmethod
    def of(x, hints) -> "Size":
        if isinstance(x, Size):
            return x
        if isinstance(x, torch.SymInt):
            expr = x.node.expr
            if getattr(expr, "is_Integer", False):
                return Size(int(expr), None)
            return Size(int(x.node.hint), expr)
        return Size(int(x), None)

    def __add__(self, o):
        o = _S(o)
        return Size(self.v + o.v, self.e + o.e)

    def __sub__(self, o):
        o = _S(o)
        return Size(self.v - o.v, self.e - o.e)

    def __mul__(self, o):
        o = _S(o)
        return Size(self.v * o.v, self.e * o.e)

    def __floordiv__(self, o):
        o = _S(o)
        if self.v % o.v == 0:
            q = sympy.cancel(self.e / o.e)
            if q.is_polynomial() and sympy.denom(q) == 1:
                return Size(self.v // o.v, q)
        return Size(self.v // o.v, FloorDiv(self.e, o.e))

    def __mod__(self, o):
        o = _S(o)
        if self.e.is_Integer and o.e.is_Integer:
            return Size(self.v % o.v, None)
        return Size(self.v % o.v, self.e - o.e * FloorDiv(self.e, o.e))

    def __neg__(self):
        return Size(-self.v, -self.e)


def _S(x) -> Size:
    return x if isinstance(x, Size) else Size(int(x), None)


ZERO, ONE = Size(0, None), Size(1, None)


def _is_lit(s: Size) -> bool:
    return s.e.is_Integer


class _SizePrinter(StrPrinter):
    """torch's PythonMod (Python's floored %, as in ``torch.roll``'s index) as ``(a % b)``; Min / Max as Python's."""

    def _print_PythonMod(self, expr):
        return f"(({self._print(expr.args[0])}) % ({self._print(expr.args[1])}))"

    def _print_Min(self, expr):  # a diagonal's length, min(rows, columns)
        return f"min({', '.join(self._print(a) for a in expr.args)})"

    def _print_Max(self, expr):
        return f"max({', '.join(self._print(a) for a in expr.args)})"


def _py(expr) -> str:
    """Python text of a sympy size expression (torch's FloorDiv prints as a//b)."""
    if expr.is_Integer:
        return str(int(expr)) if int(expr) >= 0 else f"({int(expr)})"
    text = _SizePrinter().doprint(expr)
    for bad in ("Mod(", "Max(", "Min(", "ceiling", "floor(", "/"):  # (min( and max( are Python's)
        if bad in text.replace("//", ""):
            raise Unsupported(f"a size {text} that the lowering cannot write")
    return f"({text})" if any(c in text for c in "+-*/ ") else text


def prod(sizes) -> Size:
    out = ONE
    for s in sizes:
        out = out * s
    return out


# -- index algebra ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    """A loop atom of the kernel's domain: 0 <= it < size."""

    name: str
    size: Size

    def rng(self):
        return 0, self.size.v - 1

    def text(self):
        return self.name


@dataclass(frozen=True)
class Dyn:
    """A run-time integer (a label read from memory) used as an index: lo <= it <= hi."""

    text_: str
    hi: int

    def rng(self):
        return 0, self.hi

    def text(self):
        return self.text_


@dataclass(frozen=True)
class Div:
    lin: "Lin"
    d: Size

    def rng(self):
        lo, hi = self.lin.rng()
        return lo // self.d.v, hi // self.d.v

    def text(self):
        return f"({self.lin.text()}) // {self.d.t}"


@dataclass(frozen=True)
class Mod:
    lin: "Lin"
    m: Size

    def rng(self):
        return 0, self.m.v - 1

    def text(self):
        return f"({self.lin.text()}) % {self.m.t}"


@dataclass(frozen=True)
class Lin:
    """sum(coeff * atom) + const, coefficients and constant ``Size``s; compared by value structure."""

    terms: tuple = ()  # ((atom, Size), ...) sorted by repr(atom)
    const: Size = ZERO

    @staticmethod
    def make(terms: dict, const: Size) -> "Lin":
        for a in [a for a in terms if isinstance(a, Mod)]:  # (L // d) * (c d) + (L % d) * c = L * c
            c = terms.get(a)
            if c is None:
                continue
            for b in list(terms):
                if isinstance(b, Div) and b.lin == a.lin and b.d == a.m and terms[b].v == c.v * a.m.v:
                    del terms[a], terms[b]
                    merged = Lin.make(dict(terms), const) + a.lin.scale(c)
                    return merged
        kept = tuple(sorted(((a, c) for a, c in terms.items() if c.v != 0), key=lambda ac: repr(ac[0])))
        return Lin(kept, const)

    @staticmethod
    def atom(a) -> "Lin":
        return Lin(((a, ONE),), ZERO)

    @staticmethod
    def c(v) -> "Lin":
        return Lin((), _S(v))

    def key(self):
        return (tuple((repr(a), c.v) for a, c in self.terms), self.const.v)

    def __eq__(self, o):
        return isinstance(o, Lin) and self.key() == o.key()

    def __hash__(self):
        return hash(self.key())

    def is_const(self):
        return not self.terms

    def __add__(self, o: "Lin") -> "Lin":
        terms = dict(self.terms)
        for a, c in o.terms:
            terms[a] = terms[a] + c if a in terms else c
        return Lin.make(terms, self.const + o.const)

    def __sub__(self, o: "Lin") -> "Lin":
        return self + o.scale(Size(-1, "(-1)"))

    def scale(self, k: Size) -> "Lin":
        if k.v == 0:
            return Lin.c(0)
        return Lin.make({a: c * k for a, c in self.terms}, self.const * k)

    def rng(self):
        lo = hi = self.const.v
        for a, c in self.terms:
            alo, ahi = a.rng()
            lo += min(alo * c.v, ahi * c.v)
            hi += max(alo * c.v, ahi * c.v)
        return lo, hi

    def text(self) -> str:
        parts = [a.text() if c.t == "1" else f"{a.text()} * {c.t}" for a, c in self.terms]
        if self.const.v != 0 or not parts:
            parts.append(self.const.t)
        return " + ".join(parts)

    def fdiv(self, d: Size) -> "Lin":
        if d.v == 1:
            return self
        quot, rest = {}, {}
        for a, c in self.terms:
            if c.v % d.v == 0:
                quot[a] = c // d
            else:
                rest[a] = c
        if self.const.v % d.v == 0:
            cq, cr = self.const // d, ZERO
        else:
            cq, cr = ZERO, self.const
        r = Lin.make(rest, cr)
        lo, hi = r.rng()
        out = Lin.make(quot, cq)
        if 0 <= lo and hi < d.v:
            return out
        if len(r.terms) == 1 and r.const.v == 0:
            (a, c), = r.terms
            if c.v > 0 and d.v % c.v == 0:  # (c a) // d = a // (d / c)
                inner = Lin.atom(a)
                dd = d // c
                lo, hi = inner.rng()
                if 0 <= lo and hi < dd.v:
                    return out
                if isinstance(a, Div):
                    return out + Lin.atom(Div(a.lin, a.d * dd))
                return out + Lin.atom(Div(inner, dd))
        split = r.split_small(d)
        if split is not None:  # (g L' + small) // d = L' // (d / g) when 0 <= small < g and g divides d
            g, big, _ = split
            return out + big.fdiv(d // g)
        return out + Lin.atom(Div(r, d))

    def split_small(self, d: Size):
        """(g, L', small) with self = g * L' + small, g a proper divisor of d (from a coefficient), 0 <= small < g;
        None when there is no such g."""
        import math

        for _, c in sorted(self.terms, key=lambda ac: -abs(ac[1].v)):
            g = math.gcd(abs(c.v), d.v)
            if g <= 1 or g == d.v:
                continue
            gs = Size(g, None) if d.e.is_Integer or c.e.is_Integer else (c if c.v == g else d // (d // g))
            big = {a: cc // gs for a, cc in self.terms if cc.v % g == 0}
            small = Lin.make({a: cc for a, cc in self.terms if cc.v % g != 0}, self.const % gs
                             if self.const.v % g != self.const.v else self.const)
            if self.const.v % g != self.const.v:
                small = Lin.make(dict(small.terms), Size(self.const.v % g, None))
            lo, hi = small.rng()
            if 0 <= lo and hi < g:
                const_q = Size(self.const.v // g, None)
                return gs, Lin.make(big, const_q), small
        return None

    def mod(self, m: Size) -> "Lin":
        rest = {a: c for a, c in self.terms if c.v % m.v != 0}
        const = self.const % m if (self.const.v % m.v != self.const.v or self.const.v < 0) else self.const
        r = Lin.make(rest, const)
        lo, hi = r.rng()
        if 0 <= lo and hi < m.v:
            return r
        split = r.split_small(m)
        if split is not None:  # (g L' + small) % m = (L' % (m / g)) * g + small
            g, big, small = split
            return big.mod(m // g).scale(g) + small
        return Lin.atom(Mod(r, m))


def ravel(idx: list[Lin], shape: list[Size]) -> Lin:
    """The flat row-major offset of ``idx`` in a contiguous tensor of ``shape``."""
    out, stride = Lin.c(0), ONE
    for i, s in zip(reversed(idx), reversed(shape)):
        out = out + i.scale(stride)
        stride = stride * s
    return out


def unravel(flat: Lin, shape: list[Size]) -> list[Lin]:
    """The n-d index of flat offset ``flat`` in a contiguous tensor of ``shape``."""
    out, stride = [], ONE
    strides = []
    for s in reversed(shape):
        strides.append(stride)
        stride = stride * s
    strides.reverse()
    for k, (s, st) in enumerate(zip(shape, strides)):
        q = flat.fdiv(st)
        out.append(q if k == 0 else q.mod(s))
    return out
