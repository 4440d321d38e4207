"""``tvm.tirx`` / ``tvm.tir`` under the compatibility layer: TVM's scalar-expression builders over TileAgent's IR.

In: Python numbers and scalar expressions of a prim_func (the values a plain-Python helper receives when the prim_func
calls it: ``B_local[i, j // 2]``, loop variables). Out: ``tileagent.compiler.ir.expr`` expressions, which the
frontend places in the kernel like any other. Guarantees (TVM's semantics):

- ``const(value, dtype=None)``: a constant; without a dtype, ``int32`` for a Python int (``int64`` when it does not
  fit), ``float32`` for a float, ``bool`` for a bool. ``IntImm(dtype, v)`` / ``FloatImm(dtype, v)`` likewise.
- ``Cast(dtype, value)``: a conversion; ``reinterpret(dtype, value)``: the same bits read as ``dtype`` (same width,
  else E302); ``Select(cond, t, f)``: ``t`` where ``cond`` holds (both evaluated); ``if_then_else`` likewise;
  ``Min``/``Max``/``min``/``max``; ``floordiv``/``floormod``.
- ``PrimExpr`` is the base class of TileAgent's scalar expressions (for annotations and ``isinstance``).
- ``a == b`` / ``a != b`` on expressions in a plain-Python helper build the comparison, as TVM's EQ / NE nodes.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.dtypes import DType, UnsupportedDType, dtype as as_dtype, from_python
from tileagent.compiler.ir.expr import (Const, Expr, describe, is_number, make_binop, make_call, make_cast, make_cmp,
                                        make_reinterpret, make_select)

PrimExpr = Expr


def _dt(dtype, what: str) -> DType:
    try:
        return as_dtype(dtype)
    except UnsupportedDType as e:
        raise DSLTypeError(f"tvm.tirx.{what}: {e}", code="E302") from None


def const(value, dtype=None):
    """A constant of ``dtype`` (TVM's default dtype for the Python value when None)."""
    if isinstance(value, Expr):
        return make_cast(value, dtype) if dtype is not None else value
    if not is_number(value):
        raise DSLTypeError(f"tvm.tirx.const takes a number, got {describe(value)}", code="E309")
    dt = from_python(value) if dtype is None else _dt(dtype, "const")
    if dt.is_float:
        return Const(float(value), dt)
    if dt.is_bool:
        return Const(bool(value), dt)
    if isinstance(value, float):
        raise DSLTypeError(f"tvm.tirx.const({value!r}, {dt}): a float value for an integer dtype", code="E309")
    return Const(int(value), dt)


def IntImm(dtype, value):  # noqa: N802 -- TVM's name
    dt = _dt(dtype, "IntImm")
    if not (dt.is_int or dt.is_bool):
        raise DSLTypeError(f"tvm.tirx.IntImm needs an integer dtype, got {dt}", code="E302")
    return const(value, dt)


def FloatImm(dtype, value):  # noqa: N802 -- TVM's name
    dt = _dt(dtype, "FloatImm")
    if not dt.is_float:
        raise DSLTypeError(f"tvm.tirx.FloatImm needs a float dtype, got {dt}", code="E302")
    return const(float(value), dt)


def Cast(dtype, value):  # noqa: N802 -- TVM's name
    """``value`` converted to ``dtype`` (round to nearest for floats, toward zero for float -> int)."""
    return make_cast(value, _dt(dtype, "Cast"))


def reinterpret(dtype, value):
    """The bits of ``value`` read as ``dtype`` (TVM's argument order: dtype first)."""
    return make_reinterpret(value, _dt(dtype, "reinterpret"))


def Select(condition, true_value, false_value):  # noqa: N802 -- TVM's name
    """``true_value`` where ``condition`` holds, else ``false_value``; both sides are evaluated."""
    return make_select(condition, true_value, false_value)


if_then_else = Select


def Min(a, b):  # noqa: N802 -- TVM's name
    return make_call("min", a, b)


def Max(a, b):  # noqa: N802 -- TVM's name
    return make_call("max", a, b)


min = Min  # noqa: A001 -- tvm.tir.min
max = Max  # noqa: A001 -- tvm.tir.max


def EQ(a, b):  # noqa: N802 -- TVM's name
    return make_cmp("==", a, b)


def NE(a, b):  # noqa: N802 -- TVM's name
    return make_cmp("!=", a, b)


def LT(a, b):  # noqa: N802 -- TVM's name
    return make_cmp("<", a, b)


def LE(a, b):  # noqa: N802 -- TVM's name
    return make_cmp("<=", a, b)


def GT(a, b):  # noqa: N802 -- TVM's name
    return make_cmp(">", a, b)


def GE(a, b):  # noqa: N802 -- TVM's name
    return make_cmp(">=", a, b)


def floordiv(a, b):
    return make_binop("//", a, b)


def floormod(a, b):
    return make_binop("%", a, b)


def __getattr__(name: str):
    from tileagent.compiler.diagnostics import UnsupportedError

    if name.startswith("__"):
        raise AttributeError(name)
    raise UnsupportedError(f"tvm.tirx.{name} is not provided by TileAgent (of tvm.tirx it includes the expression "
                           f"builders TileLang's helpers call inside a prim_func: {', '.join(__all__)})",
                           hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


__all__ = ["Cast", "EQ", "FloatImm", "GE", "GT", "IntImm", "LE", "LT", "Max", "Min", "NE", "PrimExpr", "Select",
           "const", "floordiv", "floormod", "if_then_else", "max", "min", "reinterpret"]
