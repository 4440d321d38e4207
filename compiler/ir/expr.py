"""Scalar expressions of the tile IR.

In: Python numbers and other expressions, combined with Python operators or the ``make_*`` functions.
Out: immutable expression trees whose every node has a dtype.
Guarantees: operations on two Python numbers stay Python numbers (compile-time folding; float intrinsics fold to
IEEE-754 inf/nan where Python's math would raise); operands that are not scalars raise E309; a Python literal takes
the dtype of the expression it meets (TVM's rule); mixed dtypes are made explicit with ``Cast`` nodes.
Nodes compare by identity (``eq=False``) so they can key dicts; ``==`` on expressions is not overloaded.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from tileagent.compiler.diagnostics import DSLSyntaxError, DSLTypeError, Span
from tileagent.compiler.dtypes import DType, dtype as as_dtype, from_python, promote

Number = (int, float, bool)


class Expr:
    """Base of scalar expressions. Python operators build new expressions."""

    __slots__ = ()
    dtype: DType

    def __add__(self, o): return make_binop("+", self, o)
    def __radd__(self, o): return make_binop("+", o, self)
    def __sub__(self, o): return make_binop("-", self, o)
    def __rsub__(self, o): return make_binop("-", o, self)
    def __mul__(self, o): return make_binop("*", self, o)
    def __rmul__(self, o): return make_binop("*", o, self)
    def __truediv__(self, o): return make_binop("/", self, o)
    def __rtruediv__(self, o): return make_binop("/", o, self)
    def __floordiv__(self, o): return make_binop("//", self, o)
    def __rfloordiv__(self, o): return make_binop("//", o, self)
    def __mod__(self, o): return make_binop("%", self, o)
    def __rmod__(self, o): return make_binop("%", o, self)
    def __pow__(self, o): return make_call("pow", self, o)
    def __rpow__(self, o): return make_call("pow", o, self)
    def __and__(self, o): return make_binop("&", self, o)
    def __rand__(self, o): return make_binop("&", o, self)
    def __or__(self, o): return make_binop("|", self, o)
    def __ror__(self, o): return make_binop("|", o, self)
    def __xor__(self, o): return make_binop("^", self, o)
    def __rxor__(self, o): return make_binop("^", o, self)
    def __lshift__(self, o): return make_binop("<<", self, o)
    def __rlshift__(self, o): return make_binop("<<", o, self)
    def __rshift__(self, o): return make_binop(">>", self, o)
    def __rrshift__(self, o): return make_binop(">>", o, self)
    def __lt__(self, o): return make_cmp("<", self, o)
    def __le__(self, o): return make_cmp("<=", self, o)
    def __gt__(self, o): return make_cmp(">", self, o)
    def __ge__(self, o): return make_cmp(">=", self, o)
    def __eq__(self, o): return _python_cmp("==", self, o)
    def __ne__(self, o): return _python_cmp("!=", self, o)
    __hash__ = object.__hash__
    def __neg__(self): return make_unary("-", self)
    def __invert__(self): return make_unary("~", self)
    def __pos__(self): return self
    def __abs__(self): return make_call("abs", self)

    def astype(self, dtype) -> "Expr":
        """Convert to ``dtype`` (the same as ``T.cast(self, dtype)``)."""
        return make_cast(self, dtype)

    def __bool__(self):
        raise DSLSyntaxError(
            "a runtime value is used where Python needs a compile-time True/False", code="E104",
            hint="use T.if_then_else(cond, a, b), T.max/T.min, or an `if` statement of the DSL on runtime values")

    def __index__(self):
        raise DSLSyntaxError("a runtime value is used where Python needs a compile-time integer", code="E104",
                             hint="shapes, extents and Python loop bounds must be known when the kernel is compiled")


@dataclass(frozen=True, eq=False, slots=True)
class Const(Expr):
    value: int | float | bool
    dtype: DType


@dataclass(frozen=True, eq=False, slots=True)
class Var(Expr):
    """A scalar variable: loop index, block index, let-binding, scalar or dynamic-shape parameter."""

    name: str
    dtype: DType = DType("int32")

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False, slots=True)
class BinOp(Expr):
    """a op b. ops: + - * / // % & | ^ << >> and or. Integer / truncates, // and % floor (TVM semantics)."""

    op: str
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, slots=True)
class Cmp(Expr):
    """``same``: set only on a comparison Python ran (``_python_cmp``), whether its operands are one object."""

    op: str  # < <= > >= == !=
    a: Expr
    b: Expr
    dtype: DType = DType("bool")
    same: bool | None = None

    def __bool__(self):
        if self.same is None:
            return Expr.__bool__(self)
        return self.same == (self.op == "==")


@dataclass(frozen=True, eq=False, slots=True)
class Unary(Expr):
    op: str  # "-" negation, "~" bitwise not, "not" logical not
    a: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, slots=True)
class Call(Expr):
    """A math intrinsic: exp, exp2, log, log2, rsqrt, sqrt, abs, tanh, sigmoid, erf, sin, cos, pow, floor, ceil, min,
    max, atan2 (y, x), fmod (C's: truncated, exact);
    ``reinterpret`` (one argument: its bits read as ``dtype``, of the same width; see ``make_reinterpret``);
    ``EXTERN + fn`` / ``ADDRESS_OF``: hand-written CUDA and a pointer for it (``compiler.language.extern``)."""

    name: str
    args: tuple[Expr, ...]
    dtype: DType


EXTERN, ADDRESS_OF = "extern:", "address_of"  # Call names of T.call_extern(fn, ...) / T.access_ptr


def is_extern(e) -> bool:
    """Whether ``e`` calls hand-written CUDA or points into a buffer for it (only the CUDA target can run it)."""
    return isinstance(e, Call) and (e.name.startswith(EXTERN) or e.name == ADDRESS_OF)


@dataclass(frozen=True, eq=False, slots=True)
class Cast(Expr):
    value: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, slots=True)
class Select(Expr):
    """T.if_then_else(cond, a, b): a where cond holds, else b."""

    cond: Expr
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, slots=True)
class Load(Expr):
    """buffer[indices]: one element. Also used as the origin of a tile in T.copy(A[i, j], tile)."""

    buffer: "object"  # compiler.ir.stmt.Buffer (kept untyped here to avoid an import cycle)
    indices: tuple[Expr, ...]
    dtype: DType
    span: Span | None = None


def is_number(x) -> bool:
    return isinstance(x, Number) and not isinstance(x, Expr)


def as_expr(x, like: DType | None = None) -> Expr:
    """Wrap a Python number as a Const (dtype from ``like`` when given), or return the expression itself."""
    if isinstance(x, Expr):
        return x
    _require_scalar(x)
    if like is not None and like.is_float:
        return Const(float(x), like)
    if like is not None and like.is_int and not isinstance(x, float):
        return Const(int(x), like)
    return Const(x, from_python(x))


def _require_scalar(*xs) -> None:
    """Raise E309 unless every x is a Python number or a scalar expression."""
    for x in xs:
        if not (isinstance(x, Expr) or is_number(x)):
            raise DSLTypeError(f"expected a number or a scalar expression, got {describe(x)}", code="E309",
                               hint="index a buffer (x[i, j]) to get a scalar; tile ops work on whole buffers")


def describe(x) -> str:
    """A short user-facing description of a value, for error messages."""
    name = type(x).__name__
    if name == "Buffer":
        return f"buffer {x.name} ({x.scope})"
    if name == "Region":
        return f"a region of buffer {x.buffer.name}"
    if isinstance(x, Expr):
        return f"a {x.dtype} expression"
    return f"{name} {x!r}"[:80]


def _operand_dtypes(a, b) -> DType:
    _require_scalar(a, b)
    if isinstance(a, Expr) and isinstance(b, Expr):
        return promote(a.dtype, b.dtype)
    e, lit = (a, b) if isinstance(a, Expr) else (b, a)
    if isinstance(lit, float) and not e.dtype.is_float:
        return DType("float32")
    if isinstance(lit, bool) or e.dtype.is_bool:
        return e.dtype if not e.dtype.is_bool else from_python(lit)
    return e.dtype


_PY_BINOPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
              "//": operator.floordiv, "%": operator.mod, "&": operator.and_, "|": operator.or_,
              "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift}


def make_cast(x, dtype) -> Expr:
    dt = as_dtype(dtype)
    if is_number(x):
        return Const(x, dt)
    x = as_expr(x)
    if x.dtype == dt:
        return x
    return Cast(x, dt)


def make_binop(op: str, a, b):
    """a op b with folding of Python numbers and explicit casts for mixed dtypes."""
    # the shapes the lowering builds by the hundred (e * 8, e + f of one dtype) take the short way to what the
    # general one below gives them: no cast, the literal a Const of the expression's dtype
    a_expr, b_expr = isinstance(a, Expr), isinstance(b, Expr)
    if a_expr and b_expr and a.dtype == b.dtype:
        dt = a.dtype
    elif a_expr and type(b) in (int, float) and (a.dtype.is_float or (type(b) is int and a.dtype.is_int)):
        dt = a.dtype
        b = Const(float(b) if dt.is_float else b, dt)
    elif b_expr and type(a) in (int, float) and (b.dtype.is_float or (type(a) is int and b.dtype.is_int)):
        dt = b.dtype
        a = Const(float(a) if dt.is_float else a, dt)
    else:
        if is_number(a) and is_number(b):
            return _PY_BINOPS[op](a, b)
        dt = _operand_dtypes(a, b)
        a, b = make_cast(as_expr(a, dt), dt), make_cast(as_expr(b, dt), dt)
    if isinstance(a, Const) and isinstance(b, Const) and op in _PY_BINOPS:
        if op == "/" and dt.is_int:
            return Const(int(a.value / b.value), dt)
        return Const(_PY_BINOPS[op](a.value, b.value), dt)
    if op in ("+", "-") and _is_zero(b):
        return a
    if op == "+" and _is_zero(a):
        return b
    if op in ("*", "/", "//") and _is_one(b):
        return a
    if op == "*" and _is_one(a):
        return b
    return BinOp(op, a, b, dt)


def make_logical(op: str, a, b):
    """``a and b`` / ``a or b`` on runtime conditions."""
    return BinOp(op, make_cast(as_expr(a), "bool"), make_cast(as_expr(b), "bool"), DType("bool"))


def make_cmp(op: str, a, b):
    if is_number(a) and is_number(b):
        return {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
                "==": operator.eq, "!=": operator.ne}[op](a, b)
    dt = _operand_dtypes(a, b)
    return Cmp(op, make_cast(as_expr(a, dt), dt), make_cast(as_expr(b, dt), dt))


def _python_cmp(op: str, a: Expr, b):
    """``a == b`` / ``a != b`` as Python runs it on an expression: in a plain helper function that a prim_func calls
    (TileLang's block-causal attention builds its mask with ``is_noisy_diag == 1`` there), TVM's PrimExpr gives the
    DSL comparison, and so does this. Python's truth test of the result (``if``, ``in``, dict lookups) is whether the
    operands are one object, as before, so expressions stay usable as keys; an operand that is not a number or an
    expression, or a pair that cannot be compared in the DSL, gives that identity test's plain bool."""
    same = a is b
    if not isinstance(b, (Expr, int, float)):
        return NotImplemented
    try:
        c = make_cmp(op, a, b)
    except (DSLSyntaxError, DSLTypeError):
        return same == (op == "==")
    return Cmp(c.op, c.a, c.b, c.dtype, same)


def make_unary(op: str, a):
    _require_scalar(a)
    if op == "~" and (isinstance(a, float) or (isinstance(a, Expr) and a.dtype.is_float)):
        raise DSLTypeError(f"bitwise ~ needs an integer, got {describe(a)}", code="E309")
    if is_number(a):
        return {"-": operator.neg, "~": operator.invert, "not": operator.not_}[op](a)
    if isinstance(a, Const) and op == "-":
        return Const(-a.value, a.dtype)
    return Unary(op, a, DType("bool") if op == "not" else a.dtype)


def _ieee(fn):
    """``fn`` folded in float64 with IEEE-754 results, as the device computes them.

    Where Python's math raises, this gives what the hardware does: log(0) = -inf, log(-1) = sqrt(-1) = nan,
    rsqrt(0) = inf, exp(1000) = inf.
    """
    def folded(*args):
        with np.errstate(all="ignore"):
            return float(fn(*(np.float64(a) for a in args)))
    return folded


_PY_MATH = {"exp": _ieee(np.exp), "exp2": _ieee(np.exp2), "log": _ieee(np.log), "log2": _ieee(np.log2),
            "sqrt": _ieee(np.sqrt), "rsqrt": _ieee(lambda x: 1.0 / np.sqrt(x)), "abs": abs, "tanh": math.tanh,
            "sigmoid": _ieee(lambda x: 1.0 / (1.0 + np.exp(-x))), "erf": math.erf, "pow": _ieee(np.power),
            "floor": math.floor, "ceil": math.ceil, "min": min, "max": max, "sin": _ieee(np.sin), "cos": _ieee(np.cos),
            "atan2": _ieee(np.arctan2), "fmod": _ieee(np.fmod)}


def make_call(name: str, *args):
    """A math intrinsic; folded when every argument is a Python number. Float results for float math."""
    _require_scalar(*args)
    if all(is_number(a) for a in args):
        return _PY_MATH[name](*args)
    exprs = [a for a in args if isinstance(a, Expr)]
    dt = exprs[0].dtype
    for e in exprs[1:]:
        dt = promote(dt, e.dtype)
    if len(args) == 2:
        dt = _operand_dtypes(args[0], args[1])
    if name not in ("abs", "min", "max", "floor", "ceil") and not dt.is_float:
        dt = DType("float32")
    return Call(name, tuple(make_cast(as_expr(a, dt), dt) for a in args), dt)


def make_reinterpret(x, dtype) -> Expr:
    """The bits of ``x`` read as ``dtype`` (TVM's ``reinterpret``; C++'s bit cast): both of one width, neither bool.

    A Python integer is taken as a constant of the integer type of ``dtype``'s width (signed unless ``dtype`` is
    unsigned). Raises E309 for operands that are not scalars, E302 for widths that differ."""
    dt = as_dtype(dtype)
    _require_scalar(x)
    if is_number(x):
        if isinstance(x, float) or isinstance(x, bool):
            raise DSLTypeError(f"reinterpret of the Python value {x!r}: give an integer or a typed expression "
                               f"(T.float32({x!r}))", code="E309")
        x = Const(x, DType(f"{'u' if dt.startswith('uint') else ''}int{dt.bits}"))
    if x.dtype.is_bool or dt.is_bool or x.dtype.bits != dt.bits:
        raise DSLTypeError(f"reinterpret of a {x.dtype} value as {dt}: the two dtypes must have the same width "
                           f"({x.dtype.bits} vs {dt.bits} bits) and not be bool", code="E302",
                           hint="cast to an integer of the right width first (x.astype(T.uint16))")
    if x.dtype == dt:
        return x
    return Call("reinterpret", (x,), dt)


def make_select(cond, a, b):
    if is_number(cond):
        return a if cond else b
    dt = _operand_dtypes(a, b) if (isinstance(a, Expr) or isinstance(b, Expr)) else (
        DType("float32") if isinstance(a, float) or isinstance(b, float) else from_python(a))
    return Select(make_cast(as_expr(cond), "bool"), make_cast(as_expr(a, dt), dt), make_cast(as_expr(b, dt), dt), dt)


def _is_zero(e) -> bool:
    return isinstance(e, Const) and e.value == 0 and not e.dtype.is_float


def _is_one(e) -> bool:
    return isinstance(e, Const) and e.value == 1 and not e.dtype.is_float
