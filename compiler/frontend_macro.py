"""``T.macro``: helper functions whose body is inlined, in DSL, where a prim_func calls them.

In: ``@T.macro def helper(buf, i, ...)`` (module level or nested) and a call ``helper(A_shared, k)`` inside a
prim_func. Out: the helper's statements emitted at the call, its parameters bound to the call's values (buffers,
expressions, Python values), its ``return expr`` (the last statement, if any) the value of the call.
Guarantees: the body is parsed by the calling parser, so every DSL rule and diagnostic applies, with spans in the
helper's own source lines; names resolve through the helper's parameters, its closure and its module; a macro may
call macros (not itself: E101); a ``return`` before the last statement is an E101.
"""

from __future__ import annotations

import ast
import functools
import inspect

from tileagent.compiler.diagnostics import DSLSyntaxError, DSLTypeError

MAX_DEPTH = 32


class Macro:
    """What ``@T.macro`` returns; calling it outside a prim_func calls the plain Python function."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"T.macro({getattr(self.fn, '__name__', self.fn)})"


def macro(func=None, *, hygienic: bool = True):
    """``@T.macro`` / ``@T.macro(hygienic=True)``: mark ``func`` for inlining into the prim_funcs that call it."""
    if func is None:
        return lambda f: Macro(f)
    return Macro(func)


def inline(parser, m: Macro, args: list, kwargs: dict, name: str):
    """Emit the body of macro ``m`` through ``parser`` (a frontend ``_Parser``) and return its value."""
    from tileagent.compiler.frontend import source_of

    fn = m.fn
    stack = getattr(parser, "_macro_stack", None)
    if stack is None:
        stack = parser._macro_stack = []
    if any(f is fn for f, _ in stack):
        raise DSLSyntaxError(f"macro {name} calls itself; recursion is not supported", code="E101")
    if len(stack) >= MAX_DEPTH:
        raise DSLSyntaxError(f"macros nested more than {MAX_DEPTH} deep", code="E101")
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise DSLTypeError(f"{name}(): {e}", code="E301", hint=f"signature: {name}{inspect.signature(fn)}") from None
    bound.apply_defaults()
    try:
        source = source_of(fn)
        lines, first_line, file = source.lines, source.first_line, source.file
        fdef = source.definition()
    except (OSError, TypeError, SyntaxError) as e:
        raise DSLSyntaxError(f"cannot read the source of macro {name}: {e}", code="E101") from None
    closure = {}
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            closure[var] = cell.cell_contents
        except ValueError:
            pass
    body = list(fdef.body)
    result_node = None
    if body and isinstance(body[-1], ast.Return):
        result_node = body.pop()
    for s in body:
        for node in ast.walk(s):
            if isinstance(node, ast.Return):
                raise DSLSyntaxError(f"macro {name}: `return` must be its last statement", code="E101")
    saved = (parser.file, parser.first_line, parser.lines, parser.closure, parser.globals)
    parser.file, parser.first_line, parser.lines = file, first_line, lines
    parser.closure, parser.globals = closure, fn.__globals__
    stack.append((fn, name))
    bases = parser.__dict__.setdefault("_macro_bases", [])
    bases.append(len(parser.scopes))
    parser.scopes.append(dict(bound.arguments))
    try:
        for s in body:
            parser._guard(s, parser.stmt, s)
        if result_node is None or result_node.value is None:
            return None
        return parser._guard(result_node, parser.expr, result_node.value)
    finally:
        parser.scopes.pop()
        bases.pop()
        stack.pop()
        parser.file, parser.first_line, parser.lines, parser.closure, parser.globals = saved


def bound_outside_macro(parser, name: str) -> bool:
    """Whether ``name`` is bound only outside the macro being inlined: assigning it in the macro makes the macro's
    own local, as in Python (TileLang's dequantization macros write ``bx = T.get_block_binding(0)`` inside a kernel
    that binds ``bx``)."""
    bases = getattr(parser, "_macro_bases", None)
    return bool(bases) and not any(name in scope for scope in parser.scopes[bases[-1]:])


def lost_rebinding(parser, name: str) -> bool:
    """Whether binding a compile-time value to ``name`` here would be lost at the end of the current block: ``name``
    is bound in an enclosing block of the same kernel, which keeps its old value after this one (``off = off + 4`` in
    a T.serial loop, or ``x = 3`` in one branch of a runtime ``if``, changed nothing)."""
    start = getattr(parser, "kernel_scope", None)
    if start is None or name in parser.scopes[-1] or bound_outside_macro(parser, name):
        return False
    return any(name in scope for scope in parser.scopes[start:-1])


__all__ = ["Macro", "bound_outside_macro", "inline", "lost_rebinding", "macro"]
