"""Translate a pointwise subgraph of the traced reference into DSL statements for the body of a ``T.Parallel`` loop.

In: an ``Expr`` DAG of pointwise ops (``graph.Expr``), a function giving the DSL text of each leaf (an operand's
fragment element such as ``f_bias[j]``, the template's own value such as ``acc[i, j]``) and one giving the text of
each constant (a literal, or a kernel-factory parameter bound to a Model attribute).

Out: ``(lines, result)``: assignments ``t0 = ...`` (one per op node, shared subexpressions computed once) and the DSL
expression of the value. All math is float32 (casts between floating dtypes are identities here: the template loads
in float32 and stores in the output's dtype). ``exp`` goes through ``T.exp2`` with log2(e) folded in, sigmoid and
SiLU are written as ``v / (1 + exp2(-v log2 e))`` as in the verified examples.

Guarantees: every op in ``POINTWISE`` has a formula; anything else raises ``KeyError`` naming the op (recognizers
check ``is_pointwise`` first).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tileagent.drafters.builtin.graph import Expr
from tileagent.drafters.builtin.pointwise_text import log1p_of, power

LOG2E = "LOG2E"  # the module-level constant every template defines

UNARY = {
    "relu": "T.max({a}, 0.0)",
    "sigmoid": "1.0 / (1.0 + T.exp2({a} * -LOG2E))",
    "silu": "{a} / (1.0 + T.exp2({a} * -LOG2E))",
    "tanh": "T.tanh({a})",
    "exp": "T.exp2({a} * LOG2E)",
    "exp2": "T.exp2({a})",
    "log": "T.log({a})",
    "log2": "T.log2({a})",
    "log1p": log1p_of("{a}", "(1.0 + {a})"),  # exact near 0
    "sqrt": "T.sqrt({a})",
    "rsqrt": "T.rsqrt({a})",
    "abs": "T.abs({a})",
    "erf": "T.erf({a})",
    "neg": "-{a}",
    "reciprocal": "1.0 / {a}",
    "square": "{a} * {a}",
    "relu6": "T.min(T.max({a}, 0.0), 6.0)",
    "hardsigmoid": "T.min(T.max({a} * (1.0 / 6.0) + 0.5, 0.0), 1.0)",
    "hardswish": "{a} * T.min(T.max({a} * (1.0 / 6.0) + 0.5, 0.0), 1.0)",
}
BINARY = {
    "add": "{a} + {b}",
    "sub": "{a} - {b}",
    "rsub": "{b} - {a}",
    "mul": "{a} * {b}",
    "div": "{a} / {b}",
    "max": "T.max({a}, {b})",
    "min": "T.min({a}, {b})",
}
SPECIAL = {"cast", "gelu", "clamp", "leaky_relu", "pow", "softplus", "mish"}  # written by ``emit`` itself
POINTWISE = frozenset(UNARY) | frozenset(BINARY) | SPECIAL


def is_pointwise(e: Expr) -> bool:
    """Whether ``e``'s op has a formula here (leaves are not ops)."""
    return e.op in POINTWISE


def literal(value) -> str:
    """A Python float literal the DSL parses as a float32 constant."""
    if isinstance(value, bool):
        return "1.0" if value else "0.0"
    return repr(float(value))


def _softplus(a: str, beta: float, threshold: float) -> str:
    b = literal(beta)
    return (f"T.if_then_else({a} * {b} > {literal(threshold)}, {a}, "
            f"T.log(1.0 + T.exp2({a} * ({b} * LOG2E))) * (1.0 / {b}))")


def emit(expr: Expr, leaf: Callable[[Expr], str | None], const: Callable[[Expr], str] | None = None,
         prefix: str = "t") -> tuple[list[str], str]:
    """DSL statements computing ``expr``; ``leaf(e)`` gives the text of a leaf (None: not a leaf, an op)."""
    const = const or (lambda e: literal(e.attr))
    lines: list[str] = []
    memo: dict[int, str] = {}

    def text(e) -> str:
        if not isinstance(e, Expr):
            return literal(e)
        if id(e) in memo:
            return memo[id(e)]
        if e.op == "const":
            out = const(e)
        else:
            out = leaf(e)
            if out is None:
                out = op(e)
        memo[id(e)] = out
        return out

    def op(e: Expr) -> str:
        args = [text(a) for a in e.args]
        if e.op == "cast":
            return args[0]
        if e.op in UNARY:
            formula = UNARY[e.op].format(a=args[0])
        elif e.op in BINARY:
            formula = BINARY[e.op].format(a=args[0], b=args[1])
        elif e.op == "gelu":
            a = args[0]
            if e.kwargs.get("approximate", "none") == "tanh":
                formula = f"0.5 * {a} * (1.0 + T.tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})))"
            else:
                formula = f"0.5 * {a} * (1.0 + T.erf({a} * 0.7071067811865476))"
        elif e.op == "clamp":
            formula = args[0]
            if e.kwargs.get("lo") is not None:
                formula = f"T.max({formula}, {literal(e.kwargs['lo'])})"
            if e.kwargs.get("hi") is not None:
                formula = f"T.min({formula}, {literal(e.kwargs['hi'])})"
        elif e.op == "leaky_relu":
            formula = f"T.max({args[0]}, 0.0) + {literal(e.kwargs['slope'])} * T.min({args[0]}, 0.0)"
        elif e.op == "softplus":
            formula = _softplus(args[0], e.kwargs.get("beta", 1.0), e.kwargs.get("threshold", 20.0))
        elif e.op == "mish":
            formula = f"{args[0]} * T.tanh({_softplus(args[0], 1.0, 20.0)})"
        elif e.op == "pow":
            formula = _pow(e, args)
        else:
            raise KeyError(f"no DSL formula for the op {e.op!r}")
        name = f"{prefix}{len(lines)}"
        lines.append(f"{name} = {formula}")
        return name

    result = text(expr)
    return lines, result


def _pow(e: Expr, args: list[str]) -> str:
    base, exponent = e.args
    if isinstance(exponent, Expr) and exponent.op == "const" and exponent.attr in (1, 2, 3, 0.5, -0.5, -1):
        return power(args[0], exponent.attr)
    if isinstance(base, Expr) and base.op == "const":  # c ** x = exp2(x * log2(c))
        return f"T.exp2({args[1]} * {literal(math.log2(base.attr))})"
    return f"T.pow({args[0]}, {args[1]})"
