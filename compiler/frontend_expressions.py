"""Frontend, expressions: evaluate the Python expressions of a prim_func into compile-time values or tile IR.

In: ``ast.expr`` nodes, through ``ExpressionParser.expr`` (mixed into the frontend's parser, which provides
``lookup``, ``span`` and ``_guard``). Out: Python values (numbers, buffers, specs), scalar IR expressions, Loads and
Regions (subscripts of buffers).
Guarantees: operations on compile-time values are done by Python; runtime values become IR; calls to DSL builtins
are checked against their signatures; only CompileError subclasses escape, with the span of the node.
"""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import operator
from collections.abc import Mapping
from dataclasses import replace

from tileagent.compiler.diagnostics import (CompileError, DSLSyntaxError, DSLTypeError, NameResolutionError, ShapeError,
                                            UnsupportedError)
from tileagent.compiler.dtypes import UnsupportedDType
from tileagent.compiler.ir.expr import Expr, Load, describe, make_cmp, make_logical, make_select, make_unary
from tileagent.compiler.ir.simplify import difference, static_int
from tileagent.compiler.ir.stmt import Alloc, Buffer, Region
from tileagent.compiler.language import packed
from tileagent.compiler.language.tileops import ReturnPrev

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_PY_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


class ExpressionParser:
    """The expression half of the frontend's parser (a mixin)."""

    def expr(self, node: ast.expr):
        method = getattr(self, f"expr_{type(node).__name__}", None)
        if method is None:
            raise DSLSyntaxError(f"`{type(node).__name__}` expressions are not supported in a prim_func",
                                 self.span(node), code="E101")
        return method(node)

    def expr_Constant(self, node):
        return node.value

    def expr_Name(self, node: ast.Name):
        value = self.lookup(node.id, node)
        if isinstance(value, Buffer) and value in getattr(self, "iteration_vars", {}):  # alloc_var in T.Parallel
            return Load(value, self.iteration_vars[value], value.dtype, self.span(node))
        if isinstance(value, Buffer) and value.scope == "var":
            return Load(value, (0,), value.dtype, self.span(node))
        return value

    def expr_Attribute(self, node: ast.Attribute):
        from tileagent.compiler.language.tileops import GemmWarpPolicy

        obj = self.expr(node.value)
        if isinstance(obj, Buffer) and node.attr == "data":  # T.Tensor(shape, dtype, X.data): a view of X
            from tileagent.compiler.language.types import BufferData

            if obj.scope != "global":
                raise DSLTypeError(f"'{obj.name}.data': only a global tensor's storage can be viewed (T.Tensor(shape, "
                                   f"dtype, X.data)); '{obj.name}' is a {obj.scope} buffer", self.span(node),
                                   code="E309")
            return BufferData(obj)
        try:
            return getattr(obj, node.attr)
        except AttributeError:
            pass
        except CompileError as e:
            raise e.with_span(self.span(node))
        if obj is GemmWarpPolicy:
            raise DSLTypeError(f"unknown GemmWarpPolicy '{node.attr}'", self.span(node), code="E303",
                               hint="use T.GemmWarpPolicy.Square, FullRow or FullCol")
        owner = ast.unparse(node.value)
        close = difflib.get_close_matches(node.attr, [n for n in dir(obj) if not n.startswith("_")], n=1)
        raise NameResolutionError(f"'{owner}' has no attribute '{node.attr}'", self.span(node), code="E202",
                                  hint=f"did you mean '{owner}.{close[0]}'?" if close else "")

    def expr_Subscript(self, node: ast.Subscript):
        obj = self.expr(node.value)
        idx_nodes = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if not isinstance(obj, Buffer):
            if isinstance(obj, (Expr,)) or not (hasattr(obj, "__getitem__") or (isinstance(obj, type) and hasattr(
                    obj, "__class_getitem__"))):  # T.Tensor[(M, N), dtype]: TileLang's subscript annotation
                raise DSLTypeError(f"{describe(obj)} cannot be indexed", self.span(node), code="E309")
            key = self.expr(node.slice)
            try:
                return obj[key]
            except (IndexError, KeyError, TypeError) as e:
                raise DSLTypeError(f"indexing `{ast.unparse(node.value)}` failed: {e}", self.span(node),
                                   code="E301") from None
        if len(idx_nodes) != obj.ndim:
            raise ShapeError(f"buffer '{obj.name}' has {obj.ndim} dim(s) {_shape_str(obj.shape)} but is indexed "
                             f"with {len(idx_nodes)} index(es)", self.span(node), code="E401",
                             hint=f"write {obj.name}[{', '.join('i' + str(k) for k in range(obj.ndim))}]")
        if not any(isinstance(i, ast.Slice) for i in idx_nodes):
            indices = tuple(self._index(i) for i in idx_nodes)
            if obj.packed:  # int4 / uint4: the element's nibble (compiler.language.packed)
                return self._guard(node, packed.element, obj, indices, self.span(node))
            return Load(obj, indices, obj.dtype, self.span(node))
        starts, extents = [], []
        for dim, i in enumerate(idx_nodes):
            if not isinstance(i, ast.Slice):
                starts.append(self._index(i))
                extents.append(1)
                continue
            if i.step is not None:
                raise ShapeError("slices with a step are not supported", self.span(i), code="E407")
            lo = self._index(i.lower) if i.lower is not None else 0
            hi = self._index(i.upper) if i.upper is not None else obj.shape[dim]
            ext = static_int(hi - lo if isinstance(hi, Expr) or isinstance(lo, Expr) else hi - lo)
            if ext is None:  # bounds held in let-bound names: `lo = k * 64` ... `x[lo:hi]`
                ext = difference(self._expand_lets(hi), self._expand_lets(lo))
            if ext is None:
                raise ShapeError(f"the extent of slice `{ast.unparse(i)}` of '{obj.name}' is not a compile-time "
                                 f"constant", self.span(i), code="E405",
                                 hint="write slices as start:start + size with a constant size")
            if ext < 1:
                raise ShapeError(f"slice `{ast.unparse(i)}` of '{obj.name}' is empty (extent {ext})", self.span(i),
                                 code="E407")
            starts.append(lo)
            extents.append(ext)
        if obj.packed:
            return self._guard(node, packed.region, obj, tuple(starts), tuple(extents))
        return Region(obj, tuple(starts), tuple(extents))

    def _expand_lets(self, e, depth: int = 8):
        """``e`` with the let-bound variables of this kernel replaced by their values (``let_values``)."""
        from tileagent.compiler.ir.visit import substitute

        lets = getattr(self, "let_values", None)
        for _ in range(depth):
            if not lets or not isinstance(e, Expr):
                return e
            new = substitute(e, lets)
            if new is e:
                return e
            e = new
        return e

    def _index(self, node):
        v = self.expr(node)
        if isinstance(v, bool) or not isinstance(v, (int, Expr)) or (isinstance(v, Expr) and v.dtype.is_float):
            raise DSLTypeError(f"index `{ast.unparse(node)}` must be an integer, got {describe(v)}", self.span(node),
                               code="E309")
        return v

    @staticmethod
    def _operate(op, a, b):
        """``op(a, b)`` for a Python operator; the exception it raises on values it cannot take is an E309."""
        try:
            return op(a, b)
        except CompileError:
            raise
        except (TypeError, ZeroDivisionError, ValueError, OverflowError) as e:
            detail = "the result is out of range" if isinstance(e, OverflowError) else str(e)
            raise DSLTypeError(f"unsupported operation on {describe(a)} and {describe(b)}: {detail}", code="E309",
                               hint="index buffers to get scalars (x[i, j]); tile ops work on whole buffers") from None

    def expr_BinOp(self, node: ast.BinOp):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise DSLSyntaxError(f"operator {type(node.op).__name__} is not supported", self.span(node), code="E101")
        return self._guard(node, self._operate, op, self.expr(node.left), self.expr(node.right))

    def expr_UnaryOp(self, node: ast.UnaryOp):
        v = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            return self._guard(node, make_unary, "not", v) if isinstance(v, Expr) else not v
        op = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}[type(node.op)]
        if op == "+":
            return v
        if not isinstance(v, (Expr, int, float)):
            raise DSLTypeError(f"unary {op} on {describe(v)}", self.span(node), code="E309")
        return self._guard(node, make_unary, op, v)

    def expr_BoolOp(self, node: ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        runtime = None
        for operand in node.values:
            v = self.expr(operand)
            if not isinstance(v, Expr):
                if is_and and not v:
                    return v if runtime is None else False
                if not is_and and v:
                    return v if runtime is None else True
                continue
            runtime = v if runtime is None else make_logical("and" if is_and else "or", runtime, v)
        return runtime if runtime is not None else v

    def expr_Compare(self, node: ast.Compare):
        left = self.expr(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node)
            if not (isinstance(left, Expr) or isinstance(right, Expr)):
                r = self._guard(node, self._operate, _PY_CMP[type(op)], left, right)
            elif type(op) in _CMPOPS:
                r = self._guard(node, make_cmp, _CMPOPS[type(op)], left, right)
            else:
                raise DSLSyntaxError(f"`{type(op).__name__}` needs compile-time values", self.span(node), code="E104")
            if result is None:
                result = r
            elif isinstance(result, Expr) or isinstance(r, Expr):
                result = make_logical("and", result, r)
            else:
                result = result and r
            if result is False:
                return False
            left = right
        return result

    def expr_IfExp(self, node: ast.IfExp):
        cond = self.expr(node.test)
        if not isinstance(cond, Expr):
            return self.expr(node.body if cond else node.orelse)
        return self._guard(node, make_select, cond, self.expr(node.body), self.expr(node.orelse))

    def expr_Tuple(self, node):
        return tuple(self._elements(node.elts))

    def expr_List(self, node):
        return list(self._elements(node.elts))

    def _elements(self, elts):
        for e in elts:
            if isinstance(e, ast.Starred):
                yield from self._iterate(self._compile_time(e.value, "a sequence to unpack with *"), e.value)
            else:
                yield self.expr(e)

    def _compile_time(self, node: ast.expr, what: str, kind=None):
        """The value of ``node``, which must be a compile-time ``kind`` (default: any iterable): else E309."""
        value = self.expr(node)
        ok = isinstance(value, kind) if kind is not None else hasattr(value, "__iter__")
        if isinstance(value, (Expr, Buffer)) or not ok:
            raise DSLTypeError(f"`{ast.unparse(node)}` is {describe(value)}; {what} must be a compile-time "
                               f"Python value", self.span(node), code="E309")
        return value

    def _comprehension(self, node):
        """The values of a comprehension over compile-time iterables (``sum(n // 64 for n in sizes)`` in TileLang's
        grouped GEMM), computed now; its targets are bound in a scope of their own. A filter must be compile-time."""
        out = []

        def produce(generators):
            if not generators:
                out.append((self.expr(node.key), self.expr(node.value)) if isinstance(node, ast.DictComp)
                           else self.expr(node.elt))
                return
            g = generators[0]
            if g.is_async:
                raise DSLSyntaxError("async comprehensions are not supported", self.span(node), code="E101")
            for value in self._iterate(self._compile_time(g.iter, "the iterable of a comprehension"), g.iter):
                self._bind_target(g.target, value)
                if all(self._compile_time_truth(c) for c in g.ifs):
                    produce(generators[1:])

        self.scopes.append({})
        try:
            produce(node.generators)
        finally:
            self.scopes.pop()
        return out

    def _compile_time_truth(self, node: ast.expr) -> bool:
        value = self.expr(node)
        if isinstance(value, (Expr, Buffer)):
            raise DSLTypeError(f"`{ast.unparse(node)}` is {describe(value)}; a comprehension's filter must be a "
                               f"compile-time Python value", self.span(node), code="E309")
        return bool(value)

    def expr_Lambda(self, node: ast.Lambda):
        """``lambda x, y: x + y`` (T.comm_reducer's combiner): a Python function whose body this parser evaluates,
        when it is called, with the parameters bound in a scope of their own (plain positional parameters)."""
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
            raise DSLSyntaxError("a lambda in a prim_func takes plain positional parameters", self.span(node),
                                 code="E101")
        names = [p.arg for p in a.args]

        def call(*values):
            if len(values) != len(names):
                raise DSLTypeError(f"`{ast.unparse(node)}` takes {len(names)} arguments, got {len(values)}",
                                   self.span(node), code="E301")
            self.scopes.append(dict(zip(names, values)))
            try:
                return self.expr(node.body)
            finally:
                self.scopes.pop()

        return call

    def expr_ListComp(self, node: ast.ListComp):
        return self._comprehension(node)

    def expr_GeneratorExp(self, node: ast.GeneratorExp):
        return iter(self._comprehension(node))

    def expr_SetComp(self, node: ast.SetComp):
        return set(self._comprehension(node))

    def expr_DictComp(self, node: ast.DictComp):
        return dict(self._comprehension(node))

    def expr_Dict(self, node: ast.Dict):
        if any(k is None for k in node.keys):
            raise DSLSyntaxError("`**` in dict literals is not supported", self.span(node), code="E101")
        out = {}
        for k, v in zip(node.keys, node.values):
            key = self.expr(k)
            try:
                hash(key)
            except TypeError:
                raise DSLTypeError(f"dict key `{ast.unparse(k)}` is {describe(key)}, which is not hashable",
                                   self.span(k), code="E309",
                                   hint="use a number, a string, a tuple or a buffer as the key") from None
            out[key] = self.expr(v)
        return out

    def expr_JoinedStr(self, node: ast.JoinedStr):
        parts = []
        for v in node.values:
            parts.append(str(self.expr(v.value)) if isinstance(v, ast.FormattedValue) else str(v.value))
        return "".join(parts)

    def expr_Call(self, node: ast.Call):
        fn = self.expr(node.func)
        args = list(self._elements(node.args))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self._compile_time(kw.value, "a mapping to unpack with **", Mapping))
            else:
                kwargs[kw.arg] = self.expr(kw.value)
        out = self._guard(node, self.call, fn, args, kwargs, _callee_name(node.func))
        return self._guard(node, self.atomic_result, out, node) if isinstance(out, ReturnPrev) else out

    def atomic_result(self, ret, node: ast.Call) -> Load:
        """``T.atomic_<op>(dst[i], v, return_prev=True)``: the atomic is emitted before the statement being parsed
        (Python evaluates the call before that statement's effect), its previous value going to a hidden
        ``T.alloc_var``; the expression is that variable. Inside T.Parallel (which thread runs an iteration is the
        layout's choice) E701."""
        name = f"T.atomic_{ret.stmt.op}(return_prev=True)"
        if getattr(self, "parallel_frames", None):
            raise UnsupportedError(f"{name} inside T.Parallel is not supported", code="E701",
                                   hint="fetch-and-add in per-thread code (tx = T.get_thread_binding(), statements "
                                        "outside T.Parallel), as TileLang's top-k selector does")
        if not getattr(self, "kernel_depth", 0):
            raise DSLSyntaxError(f"{name} outside T.Kernel", code="E505")
        buf = ret.stmt.buffer
        base = prev = f"{buf.name}_prev"
        k = 1
        while prev in self.buffer_names:
            prev, k = f"{base}_{k}", k + 1
        self.buffer_names.add(prev)
        var = Buffer(prev, (1,), buf.dtype, "var", self.span(node))
        value = Load(var, (0,), buf.dtype, self.span(node))
        self.emit(Alloc(var, None), node)
        self.emit(replace(ret.stmt, prev=value), node)
        return value

    def emitted_nothing(self, before: int, what: str) -> None:
        """E301 when evaluating ``what`` (a loop condition, evaluated again each iteration) emitted a statement
        (``atomic_result``): hoisted before the loop it would run once."""
        if len(self.blocks[-1]) > before:
            raise DSLTypeError(f"T.atomic_*(return_prev=True) in {what} is not supported: it would run once, not on "
                               f"each test", code="E301", hint="fetch into a T.alloc_var before the loop and again "
                                                               "at the end of its body")

    def call(self, fn, args, kwargs, name: str):
        from tileagent.compiler.frontend_macro import Macro, inline

        if isinstance(fn, Macro):  # T.macro: its body is inlined here
            return inline(self, fn, args, kwargs, name)
        if not callable(fn):
            raise DSLTypeError(f"`{name}` is {describe(fn)}, not a function", code="E309")
        if _is_builtin(fn):
            try:
                _signature(fn).bind(*args, **kwargs)
            except TypeError as e:
                raise DSLTypeError(f"{name}(): {e}", code="E301",
                                   hint=f"signature: {name}{inspect.signature(fn)}") from None
            return _call_builtin(fn, args, kwargs, name)
        try:
            return fn(*args, **kwargs)
        except CompileError:
            raise
        except Exception as e:  # a user helper or Python builtin failed on these values
            raise DSLTypeError(f"calling `{name}` raised {type(e).__name__}: {e}", code="E301") from None


def _callee_name(node: ast.expr) -> str:
    """The callee as the source spells it (``ast.unparse``), without unparsing the common ``f`` and ``T.f``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return ast.unparse(node)


@functools.lru_cache(maxsize=256)
def _cached_signature(fn) -> inspect.Signature:
    return inspect.signature(fn)


def _signature(fn) -> inspect.Signature:
    """``inspect.signature(fn)``, computed once per DSL builtin (every T.copy, T.Parallel... of every kernel)."""
    try:
        return _cached_signature(fn)
    except TypeError:  # unhashable callable
        return inspect.signature(fn)


def _is_builtin(fn) -> bool:
    module = getattr(fn, "__module__", "") or ""
    return module.startswith("tileagent.compiler.language")


# What a builtin lets escape while it checks or folds the user's values (int(x), a // b, a dict lookup, ...).
_VALUE_ERRORS = (ValueError, TypeError, ZeroDivisionError, OverflowError, KeyError)


def _call_builtin(fn, args, kwargs, name: str):
    """Call the DSL builtin ``fn`` (spelled ``name`` in the source) on arguments that fit its signature.

    Builtins report bad values with CompileErrors, but one may let a plain ``_VALUE_ERRORS`` exception escape
    from the user's values: that becomes an E301 (E302 for a dtype) naming the builtin. Any other exception is a
    compiler bug and propagates (the frontend reports it as I000); the original stays chained as ``__cause__``.
    """
    try:
        return fn(*args, **kwargs)
    except CompileError:
        raise
    except _VALUE_ERRORS as e:
        raise DSLTypeError(f"{name}: {e}", code="E302" if isinstance(e, UnsupportedDType) else "E301",
                           hint=f"signature: {name}{inspect.signature(fn)}") from e


def _shape_str(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
