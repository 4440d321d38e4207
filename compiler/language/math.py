"""Scalar math and helpers: ``T.exp2``, ``T.max``, ``T.ceildiv``, ``T.cast``, ``T.if_then_else``, ``T.infinity``...

On Python numbers they compute at compile time; on expressions they build IR. Float math on integer operands is
done in float32.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.dtypes import UnsupportedDType, dtype as as_dtype
from tileagent.compiler.ir.expr import (Const, Expr, describe, is_number, make_binop, make_call, make_cast,
                                        make_reinterpret, make_select)


def _scalars(name, *args):
    """Raise E309 naming T.``name`` unless every argument is a number or a scalar expression."""
    for a in args:
        if not (is_number(a) or isinstance(a, Expr)):
            raise DSLTypeError(f"T.{name} takes numbers or scalar expressions, got {describe(a)}", code="E309",
                               hint="index a buffer (x[i, j]) to get a scalar; tile ops work on whole buffers")


def _check(name, *args):
    _scalars(name, *args)
    return make_call(name, *args)


def exp(x): return _check("exp", x)
def exp2(x): return _check("exp2", x)
def log(x): return _check("log", x)
def log2(x): return _check("log2", x)
def sqrt(x): return _check("sqrt", x)
def rsqrt(x): return _check("rsqrt", x)
def abs(x): return _check("abs", x)  # noqa: A001
def tanh(x): return _check("tanh", x)
def sigmoid(x): return _check("sigmoid", x)
def erf(x): return _check("erf", x)
def sin(x): return _check("sin", x)
def cos(x): return _check("cos", x)
def floor(x): return _check("floor", x)
def ceil(x): return _check("ceil", x)
def pow(x, y): return _check("pow", x, y)  # noqa: A001
def atan2(y, x): return _check("atan2", y, x)
def fmod(x, y): return _check("fmod", x, y)  # C's fmod: the remainder of x / y truncated, exact
def max(a, b): return _check("max", a, b)  # noqa: A001
def min(a, b): return _check("min", a, b)  # noqa: A001


def ceildiv(a, b):
    """(a + b - 1) // b for positive integers."""
    _scalars("ceildiv", a, b)
    return make_binop("//", make_binop("+", a, make_binop("-", b, 1)), b)


def floordiv(a, b):
    _scalars("floordiv", a, b)
    return make_binop("//", a, b)


def floormod(a, b):
    _scalars("floormod", a, b)
    return make_binop("%", a, b)


def cast(value, dtype):
    """Convert ``value`` to ``dtype`` (round to nearest for floats, truncate toward zero for float -> int)."""
    try:
        return make_cast(value, dtype)
    except UnsupportedDType as e:
        raise DSLTypeError(f"T.cast: {e}", code="E302") from None


def reinterpret(value, dtype):
    """The bits of ``value`` read as ``dtype`` of the same width (TileLang's ``T.reinterpret(value, dtype)``, TVM's
    ``tir.reinterpret(dtype, value)``): ``T.reinterpret(x_u16, T.float16)`` is the half whose bits are ``x_u16``.
    As in TileLang, the old order ``T.reinterpret(dtype, value)`` is accepted too (a dtype first is swapped)."""
    if isinstance(value, str) and not isinstance(dtype, str):
        value, dtype = dtype, value
    if str(dtype) == "handle":  # TVM's opaque pointer: only T.attr(..., "reduce_scope", T.reinterpret(0, "handle"))
        return value  # takes one, and T.attr ignores its value (compiler.language.allreduce)
    try:
        return make_reinterpret(value, dtype)
    except UnsupportedDType as e:
        raise DSLTypeError(f"T.reinterpret: {e}", code="E302") from None


def if_then_else(cond, a, b):
    """``a`` where ``cond`` holds, else ``b``; both sides are evaluated (a select, not a branch)."""
    return make_select(cond, a, b)


def _dt(dtype, name):
    try:
        return as_dtype(dtype)
    except UnsupportedDType as e:
        raise DSLTypeError(f"T.{name}: {e}", code="E302") from None


def infinity(dtype):
    """+inf of a float dtype."""
    return Const(float("inf"), _dt(dtype, "infinity"))


def _limits(dt):
    """(lowest, highest) finite value of ``dt``; (False, True) for bool."""
    import torch

    if dt.is_bool:
        return False, True
    info = torch.finfo(dt.torch) if dt.is_float else torch.iinfo(dt.torch)
    return info.min, info.max


def max_value(dtype):
    """The largest finite value of ``dtype``."""
    dt = _dt(dtype, "max_value")
    return Const(_limits(dt)[1], dt)


def min_value(dtype):
    """The lowest finite value of ``dtype``."""
    dt = _dt(dtype, "min_value")
    return Const(_limits(dt)[0], dt)
