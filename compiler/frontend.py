"""Frontend: a function decorated with ``@T.prim_func`` -> tile IR.

In: the Python function object. Its source is read with ``inspect`` and parsed with ``ast`` (no tracing); names
resolve through the DSL's own bindings, then the function's closure cells, its module globals and Python builtins.
Out: a ``compiler.ir.PrimFunc``.
Guarantees: every statement carries the span (file, line, character col) of the DSL code it came from; Python
``if``/``for`` over compile-time values are resolved here; a perfect nest of T.Parallel loops becomes one Parallel;
only ``CompileError`` subclasses escape (a plain ValueError/TypeError/... a builtin raises on the user's values is an
E301 naming it; anything else is wrapped as an ``InternalCompilerError`` at the span of the statement being parsed).
"""

from __future__ import annotations

import ast
import builtins
import difflib
import inspect
import math
import operator
import sys

from tileagent.compiler import python_ast
from tileagent.compiler.diagnostics import (CompileError, DSLSyntaxError, DSLTypeError, InternalCompilerError,
                                  NameResolutionError, ResourceError, ScopeError, ShapeError, Span)
from tileagent.compiler.dtypes import DType, UnsupportedDType, dtype as as_dtype
from tileagent.compiler.ir.expr import (Expr, Load, Var, as_expr, describe, is_extern, make_binop, make_cast,
                                        make_cmp)
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.frontend_body import (check_view_aliasing, parallel_nest, snapshot, split_at_grid_syncs,
                                              vars_in, with_span)
from tileagent.compiler.frontend_loops import LoopExitParser
from tileagent.compiler.frontend_macro import bound_outside_macro, lost_rebinding
from tileagent.compiler.language import packed
from tileagent.compiler.language.allreduce import reducer_add
from tileagent.compiler.frontend_expressions import _BINOPS, ExpressionParser, _call_builtin
from tileagent.compiler.ir.stmt import (Alloc, Buffer, Evaluate, For, If, Kernel, Let, PrimFunc,
                                        Region, Stmt, Store, While)

_UNSET = object()


def prim_func(func=None, **_options):
    """Decorator: parse the function into a PrimFunc now (``@T.prim_func`` or ``@T.prim_func(...)``).

    The defining function's local variables are visible too (after the closure), so string annotations under
    ``from __future__ import annotations`` can name sizes and dtypes the body never mentions."""
    if func is None:
        return lambda f: parse(f, sys._getframe(1).f_locals)
    return parse(func, sys._getframe(1).f_locals)


def parse(func, enclosing: dict | None = None) -> PrimFunc:
    """Parse ``func`` (a Python function written in the DSL) into a PrimFunc. ``enclosing``: the locals of the
    function that defines it, looked up after the closure."""
    name = getattr(func, "__name__", func)
    try:
        source = source_of(func)
    except (OSError, TypeError) as e:
        raise DSLSyntaxError(f"cannot read the source of {name!r}: {e}", code="E101",
                             hint="define prim_funcs in a .py file (the DSL is parsed from source)") from None
    lines, first_line, file = source.lines, source.first_line, source.file
    try:
        fdef = source.definition()
    except SyntaxError as e:
        raise DSLSyntaxError(f"cannot parse the source of {name!r}: {e.msg}", Span(file, first_line),
                             code="E101") from None
    if not isinstance(fdef, ast.FunctionDef):
        raise DSLSyntaxError("T.prim_func must decorate a function definition", Span(file, first_line), code="E101")
    closure = dict(enclosing or {})
    for var, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        try:
            closure[var] = cell.cell_contents
        except ValueError:  # a cell not yet filled: the name is assigned after the def
            pass
    packed.reset()
    return _Parser(file, first_line, lines, closure, func.__globals__).function(fdef, func)


class Source:
    """The source of one function as ``inspect`` reads it: ``lines``, ``first_line``, ``file``; ``definition()`` its
    def statement parsed (``_parse_def``; SyntaxError when it does not parse). Nothing here changes the AST."""

    __slots__ = ("code", "lines", "first_line", "file", "_fdef")

    def __init__(self, code, lines: list[str], first_line: int, file: str):
        self.code, self.lines, self.first_line, self.file, self._fdef = code, lines, first_line, file, None

    def definition(self) -> ast.stmt:
        if self._fdef is None:
            self._fdef = _parse_def(self.lines)
        return self._fdef


_SOURCES: dict = {}  # id(code object) -> Source of a function with that very code object
_SOURCES_MAX = 512


def source_of(func) -> Source:
    """``func``'s source (``inspect.getsourcelines`` / ``getsourcefile``), read and parsed once per code object: a
    ``@T.prim_func`` nested in a ``@jit`` factory is a new function at every call of the factory but always the same
    code object, so compiling a factory at many configurations (the autotuner, a sweep of shapes) reads and parses
    its source once. The cached text is the one read when the code object was first parsed, i.e. the code that
    runs. Raises OSError or TypeError where ``inspect`` finds no source."""
    code = getattr(func, "__code__", None)
    cached = _SOURCES.get(id(code)) if code is not None else None
    if cached is not None and cached.code is code:
        return cached
    lines, first_line = inspect.getsourcelines(func)
    source = Source(code, lines, first_line, inspect.getsourcefile(func) or "<unknown>")
    if code is not None:
        if len(_SOURCES) >= _SOURCES_MAX:
            _SOURCES.clear()
        _SOURCES[id(code)] = source  # holds the code object: its id stays unique while the entry lives
    return source


def _parse_def(lines: list[str]) -> ast.stmt:
    """The first statement of ``lines`` (a def with its decorators), parsed from the text as it stands in the file.

    An indented def (nested in a function or class) is parsed as the body of an ``if 1:`` line put before it
    rather than dedented: ast columns stay file columns, and comments or string lines left of the def's
    indentation parse. Line 1 of the result is the first of ``lines``.
    """
    source = "".join(lines)
    if not lines[0][:1].isspace():
        return python_ast.parse(source).body[0]
    tree = python_ast.parse("if 1:\n" + source)
    ast.increment_lineno(tree, -1)
    return tree.body[0].body[0]


class _Parser(LoopExitParser, ExpressionParser):
    def __init__(self, file: str, first_line: int, lines: list[str], closure: dict, globals_: dict):
        self.file, self.first_line, self.lines = file, first_line, lines
        self.closure, self.globals = closure, globals_
        self.scopes: list[dict] = [{}]
        self.blocks: list[list[Stmt]] = [[]]
        self.kernel_depth = 0
        self.loop_kinds: list[str] = []  # the loops around the statement being parsed, innermost last
        # (loop vars, extents, allocations hoisted before the outermost loop) of each T.Parallel around the statement
        # being parsed
        self.parallel_frames: list[tuple[tuple, tuple, list]] = []
        self.iteration_vars: dict = {}  # T.alloc_var inside T.Parallel -> the indices of its element (loop vars)
        self.buffer_names: set[str] = set()
        self.workspaces: list[Buffer] = []
        self.views: list[tuple[Buffer, Buffer]] = []  # (view, base): T.Tensor(shape, dtype, X.data)
        self.let_values: dict = {}
        self.reducers: set = set()  # T.alloc_reducer buffers

    # -- spans and errors ------------------------------------------------------------------------------------
    def span(self, node: ast.AST) -> Span:
        """The file span of ``node``; ast's UTF-8 byte columns become character columns (see ``Span``)."""
        end_line = node.end_lineno or node.lineno
        end_col = node.col_offset if node.end_col_offset is None else node.end_col_offset
        return Span(self.file, node.lineno + self.first_line - 1, self._char_col(node.lineno, node.col_offset),
                    end_line + self.first_line - 1, self._char_col(end_line, end_col))

    def _char_col(self, line: int, byte_col: int) -> int:
        """The character offset of UTF-8 byte offset ``byte_col`` on line ``line`` (1-based) of the source."""
        text = self.lines[line - 1] if 1 <= line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def _guard(self, node: ast.AST, fn, *args):
        """Run fn; CompileErrors get this node's span if they have none, anything else becomes an internal error."""
        try:
            return fn(*args)
        except CompileError as e:
            raise e.with_span(self.span(node))
        except RecursionError:
            raise ResourceError("expression nested too deeply for the compiler", self.span(node), code="E803",
                                hint="split it with intermediate variables (v = a + b; w = v + c)") from None
        except Exception as e:  # noqa: BLE001 -- the contract: nothing but CompileError escapes
            raise InternalCompilerError(f"internal error while parsing this code: {type(e).__name__}: {e}",
                                        self.span(node)) from e

    # -- names -----------------------------------------------------------------------------------------------
    def lookup(self, name: str, node: ast.AST):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        for table in (self.closure, self.globals, vars(builtins)):
            if name in table:
                return table[name]
        known = [n for s in self.scopes for n in s] + list(self.closure) + list(self.globals)
        close = difflib.get_close_matches(name, known, n=1)
        raise NameResolutionError(f"name '{name}' is not defined", self.span(node), code="E201",
                                  hint=f"did you mean '{close[0]}'?" if close else
                                  "define it in the prim_func or pass it to the jit function")

    def bind(self, name: str, value) -> None:
        self.scopes[-1][name] = value

    def emit(self, stmt: Stmt, node: ast.AST) -> None:
        self.blocks[-1].append(with_span(stmt, self.span(node)))

    def body(self, stmts: list[ast.stmt], new_scope: bool = True) -> tuple[Stmt, ...]:
        self.blocks.append([])
        if new_scope:
            self.scopes.append({})
        try:
            for s in stmts:
                self._guard(s, self.stmt, s)
        finally:
            if new_scope:
                self.scopes.pop()
            out = self.blocks.pop()
        return tuple(out)

    # -- the function ----------------------------------------------------------------------------------------
    def function(self, fdef: ast.FunctionDef, func) -> PrimFunc:
        args = fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise DSLSyntaxError("prim_func parameters must be plain annotated names", self.span(fdef), code="E105")
        annotations = getattr(func, "__annotations__", {})
        params, dynamic = [], []
        for a in args.args:
            ann = annotations.get(a.arg, _UNSET)
            if isinstance(ann, str) and not isinstance(ann, DType) and ann not in _DTYPE_NAMES:
                ann = self._guard(a, self._string_annotation, a, ann)
            param = self._guard(a, self.param, a, ann)
            params.append(param)
            self.bind(a.arg, param)
            if isinstance(param, Buffer):
                for d in param.shape:
                    for v in vars_in(d):
                        if not any(v is x for x in dynamic):
                            dynamic.append(v)
        from tileagent.compiler.frontend_grow import grow_fragments_to_loops
        from tileagent.compiler.frontend_replicate import demote_replicated_fragments

        body = grow_fragments_to_loops(demote_replicated_fragments(self.body(fdef.body, new_scope=False)))
        if not any(isinstance(s, Kernel) for s in body):
            raise DSLSyntaxError(f"prim_func '{fdef.name}' has no `with T.Kernel(...)` scope", self.span(fdef),
                                 code="E103", hint="wrap the body in `with T.Kernel(grid..., threads=128) as bx:`")
        return self.make_func(fdef, params, body, dynamic)

    def make_func(self, fdef: ast.FunctionDef, params: list, body: tuple, dynamic: list) -> PrimFunc:
        """The PrimFunc of ``params``, then the workspaces, then the views (hidden parameters, in that order)."""
        all_params = tuple(params) + tuple(self.workspaces) + tuple(v for v, _ in self.views)
        n, w = len(params), len(self.workspaces)
        views = tuple((n + w + k, next(i for i, p in enumerate(all_params) if p is base))
                      for k, (_, base) in enumerate(self.views))
        check_view_aliasing(body, self.views)
        return PrimFunc(fdef.name, all_params, body, tuple(dynamic), self.span(fdef), tuple(range(n, n + w)), views)

    def _string_annotation(self, a: ast.arg, text: str):
        """The value of a string annotation (``from __future__ import annotations``), with errors at parameter ``a``.

        The string is parsed on its own, so its nodes are moved to ``a``'s place before they are evaluated.
        """
        try:
            tree = python_ast.parse(text.strip(), mode="eval")
        except SyntaxError as e:
            raise DSLSyntaxError(f"parameter '{a.arg}': annotation {text!r} is not a Python expression ({e.msg})",
                                 code="E105") from None
        for node in ast.walk(tree):
            ast.copy_location(node, a)
        return self.expr(tree.body)

    def param(self, a: ast.arg, ann):
        from tileagent.compiler.language.types import Tensor

        if ann is _UNSET:
            raise DSLSyntaxError(f"parameter '{a.arg}' has no annotation", code="E105",
                                 hint=f"write {a.arg}: T.Tensor((M, N), 'float16') or {a.arg}: T.int32")
        if isinstance(ann, Tensor):
            as_bytes = packed.declare(tuple(ann.shape), ann.dtype, f"parameter '{a.arg}'")
            dt = as_bytes[1] if as_bytes else self._dtype(ann.dtype, f"parameter '{a.arg}'")
            shape = []
            for d in ann.shape:
                if isinstance(d, bool) or not isinstance(d, (int, Expr)):
                    raise DSLTypeError(f"parameter '{a.arg}': shape entries must be ints or T.dynamic variables, "
                                       f"got {d!r}", code="E105")
                if isinstance(d, int) and d < 0:
                    raise ShapeError(f"parameter '{a.arg}': negative dimension {d}", code="E105")
                shape.append(d)
            shape, kind = (as_bytes[0], as_bytes[2]) if as_bytes else (tuple(shape), "")  # int4: half the last dim
            return Buffer(a.arg, shape, dt, "global", self.span(a), packed=kind)
        if isinstance(ann, (str, DType)) or _is_torch_dtype(ann):
            return Var(a.arg, self._dtype(ann, f"parameter '{a.arg}'"))
        raise DSLTypeError(f"parameter '{a.arg}' is annotated with {describe(ann)}", code="E105",
                           hint="use T.Tensor(shape, dtype) for tensors or a dtype such as T.int32 for scalars")

    @staticmethod
    def _dtype(value, what: str) -> DType:
        try:
            return as_dtype(value)
        except UnsupportedDType as e:
            raise DSLTypeError(f"{what}: {e}", code="E302") from None

    # -- statements ------------------------------------------------------------------------------------------
    def stmt(self, node: ast.stmt) -> None:
        method = getattr(self, f"stmt_{type(node).__name__}", None)
        if method is None:
            raise DSLSyntaxError(f"`{type(node).__name__}` statements are not supported in a prim_func",
                                 code="E101", hint=_UNSUPPORTED_HINTS.get(type(node).__name__, ""))
        method(node)

    def stmt_Pass(self, node):
        pass

    def stmt_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Constant):  # docstring or bare literal
            return
        value = self.expr(node.value)
        self._emit_value(value, node, None)

    def _emit_value(self, value, node, name):
        from tileagent.compiler.language.kernel import AllocSpec, KernelSpec

        if isinstance(value, Stmt):
            self.emit(value, node)
        elif is_extern(value):  # T.call_extern(...) as a statement
            self.emit(Evaluate(value), node)
        elif isinstance(value, list) and value and all(isinstance(v, Stmt) for v in value):  # an expansion
            for v in value:  # (T.tvm_thread_allreduce: compiler.language.allreduce)
                self.emit(v, node)
        elif isinstance(value, AllocSpec):
            self.allocate(value, name or f"buf{len(self.buffer_names)}", node)
        elif isinstance(value, KernelSpec):
            raise DSLSyntaxError("T.Kernel must open a `with` block", code="E103",
                                 hint="write `with T.Kernel(...) as bx:` and put the kernel body inside")

    def allocate(self, spec, name: str, node: ast.AST) -> Buffer:
        if spec.scope == "global" and spec.init is None:
            return self.allocate_workspace(spec, name, node)
        if self.kernel_depth == 0:
            raise DSLSyntaxError(f"allocation of '{name}' outside T.Kernel", code="E505",
                                 hint="allocate shared memory and fragments inside `with T.Kernel(...)`")
        base, k = name, 1
        while name in self.buffer_names:
            name, k = f"{base}_{k}", k + 1
        self.buffer_names.add(name)
        init = spec.init if spec.scope == "global" or spec.init is None else make_cast(as_expr(spec.init, spec.dtype),
                                                                                       spec.dtype)  # global: address
        if spec.scope == "var" and self.parallel_frames:
            # T.alloc_var inside T.Parallel (TileLang: a scalar of each iteration): a fragment over the loop nest's
            # extents, allocated before the outermost T.Parallel, whose element [loop vars] each iteration uses
            loop_vars = tuple(v for f in self.parallel_frames for v in f[0])
            extents = tuple(e for f in self.parallel_frames for e in f[1])
            buf = Buffer(name, extents, spec.dtype, "fragment", self.span(node))
            self.parallel_frames[0][2].append(with_span(Alloc(buf, None), self.span(node)))
            self.iteration_vars[buf] = loop_vars
            self.bind(base, buf)
            if init is not None:  # set by each iteration where the allocation stands
                self.store(buf, loop_vars, init, node)
            return buf
        buf = Buffer(name, spec.shape, spec.dtype, spec.scope, self.span(node), packed=spec.packed)
        self.emit(Alloc(buf, init, view_of=spec.view_of), node)
        self.bind(base, buf)
        if getattr(spec, "reducer", False):  # T.alloc_reducer: `buf[i] += v` adds atomically (language.allreduce)
            self.reducers.add(buf)
        return buf

    def allocate_workspace(self, spec, name: str, node: ast.AST) -> Buffer:
        """``T.alloc_global``: a global buffer the runtime allocates per call; a hidden parameter after the others."""
        if self.kernel_depth:
            raise DSLSyntaxError(f"T.alloc_global '{name}' must be outside T.Kernel (at the top of the prim_func)",
                                 code="E505", hint="allocate workspaces before the first `with T.Kernel(...)`")
        if name in self.buffer_names:
            raise DSLSyntaxError(f"a buffer named '{name}' already exists", code="E102")
        self.buffer_names.add(name)
        buf = Buffer(name, spec.shape, spec.dtype, "global", self.span(node))
        self.workspaces.append(buf)
        self.bind(name, buf)
        return buf

    def declare_view(self, name: str, spec, node: ast.AST) -> Buffer:
        """``name = T.Tensor(shape, dtype, X.data)``: a global buffer over X's storage with its own shape (TileLang's
        reshaped view: ``kernel_flat = T.Tensor((KH * KW * C, F), dtype, kernel.data)``); a hidden parameter the
        runtime binds to ``X.view(shape)``, so every backend sees one more contiguous global tensor. Same dtype and
        (where both are static) the same number of elements as X."""
        base = spec.data.buffer
        for v, b in self.views:  # a view of a view views the same storage
            if v is base:
                base = b
        dtype = self._dtype(spec.dtype, f"T.Tensor '{name}'")
        if dtype != base.dtype:
            raise DSLTypeError(f"view '{name}' of '{base.name}': dtype {dtype} differs from {base.dtype}", code="E302",
                               hint=f"a view keeps its base's dtype; write T.Tensor(shape, {base.dtype}, "
                                    f"{base.name}.data)")
        shape = []
        for d in spec.shape:
            if isinstance(d, bool) or not isinstance(d, (int, Expr)):
                raise DSLTypeError(f"view '{name}': shape entries must be ints or size expressions, got {d!r}",
                                   code="E105")
            shape.append(d)
        sizes = [static_int(d) for d in (*shape, *base.shape)]
        if None not in sizes and math.prod(sizes[:len(shape)]) != math.prod(sizes[len(shape):]):
            raise ShapeError(f"view '{name}' {tuple(shape)} has {math.prod(sizes[:len(shape)])} elements but "
                             f"'{base.name}' {tuple(base.shape)} has {math.prod(sizes[len(shape):])}", code="E402",
                             hint="a view reshapes its whole base tensor")
        if name in self.buffer_names:
            raise DSLSyntaxError(f"a buffer named '{name}' already exists", code="E102")
        self.buffer_names.add(name)
        view = Buffer(name, tuple(shape), dtype, "global", self.span(node))
        self.views.append((view, base))
        self.bind(name, view)
        return view

    def stmt_Assign(self, node: ast.Assign):
        if len(node.targets) == 1:
            self.assign(node.targets[0], node.value, node)
            return
        value = self.expr(node.value)  # a = b = v: v once, then each target left to right, as Python does
        for target in node.targets:
            self.assign_value(target, value, node)

    def stmt_AnnAssign(self, node: ast.AnnAssign):
        if node.value is None:
            raise DSLSyntaxError("a bare annotation declares nothing in a prim_func", code="E102",
                                 hint="use T.alloc_var(dtype) for a scalar variable")
        self.assign(node.target, node.value, node, cast_to=self.expr(node.annotation))

    def assign(self, target: ast.expr, value_node: ast.expr, node: ast.stmt, cast_to=None):
        value = self.expr(value_node)
        if cast_to is not None and isinstance(value, (Expr, int, float)) and not isinstance(value, bool):
            value = make_cast(value, self._dtype(cast_to, "annotation"))
        self.assign_value(target, value, node)

    def assign_value(self, target: ast.expr, value, node: ast.stmt):
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value, node)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                raise DSLSyntaxError("tuple assignment needs a tuple of the same length", code="E102")
            if all(isinstance(t, ast.Name) for t in target.elts):
                for t, v in zip(target.elts, value):
                    self.bind(t.id, v)
            else:  # elements too (a swap): every value is read before any store, as in Python
                for t, v in zip(target.elts, snapshot(self, value, node)):
                    self.assign_value(t, v, node)
        elif isinstance(target, ast.Subscript):
            ref = self.expr(target)
            if isinstance(ref, Region):
                raise DSLSyntaxError("cannot assign to a slice", code="E102",
                                     hint="use T.fill(buf[...], v), T.copy(src, dst) or a T.Parallel loop")
            ref = packed.target(ref, tile=False)
            if not isinstance(ref, Load):
                raise DSLSyntaxError(f"cannot assign to an element of {describe(ref)}", code="E102")
            self.store(ref.buffer, ref.indices, value, node)
        else:
            raise DSLSyntaxError(f"cannot assign to `{ast.unparse(target)}`", code="E102")

    def _current(self, name: str):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def store(self, buf: Buffer, indices, value, node):
        if not isinstance(value, (Expr, int, float)):
            raise DSLTypeError(f"cannot store {describe(value)} into {buf.name}", code="E309",
                               hint="tiles move with T.copy; element stores need a scalar value")
        packed.check_store(buf)
        self.emit(Store(buf, tuple(indices), make_cast(as_expr(value, buf.dtype), buf.dtype)), node)

    def stmt_AugAssign(self, node: ast.AugAssign):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise DSLSyntaxError(f"operator {type(node.op).__name__} is not supported", code="E101")
        target = node.target
        if isinstance(target, ast.Subscript):
            ref = packed.target(self.expr(target), tile=False)
            if not isinstance(ref, Load):
                raise DSLSyntaxError(f"cannot update `{ast.unparse(target)}` in place", code="E102",
                                     hint="in-place updates work on single elements inside T.Parallel")
            if ref.buffer in self.reducers and op is operator.add:
                return self.emit(reducer_add(ref, self.expr(node.value)), node)
            self.store(ref.buffer, ref.indices, self._operate(op, ref, self.expr(node.value)), node)
        elif isinstance(target, ast.Name):
            self.assign_name(target.id, self._operate(op, self.expr(target), self.expr(node.value)), node)
        else:
            raise DSLSyntaxError(f"cannot update `{ast.unparse(target)}`", code="E102")

    def assign_name(self, name: str, value, node):
        """``name = value``: a store into an alloc_var, an allocation, a let-binding, or a compile-time binding."""
        from tileagent.compiler.language.kernel import AllocSpec
        from tileagent.compiler.language.types import Tensor
        from tileagent.compiler.language.warp_specialize import BarrierSet

        current = self._current(name)
        if isinstance(current, Buffer) and current in self.iteration_vars:
            self.store(current, self.iteration_vars[current], value, node)
        elif isinstance(current, Buffer) and current.scope == "var":
            self.store(current, (0,), value, node)
        elif isinstance(value, AllocSpec):
            self.allocate(value, name, node)
        elif isinstance(value, Tensor) and value.data is not None:
            self.declare_view(name, value, node)
        elif isinstance(value, BarrierSet):
            value.name = name
            self.bind(name, value)
        elif isinstance(value, Expr) and self.kernel_depth and not _is_constant(value):
            # also a compile-time value bound outside that the new value reads (`acc = 0.0`, then `acc = acc + X[c]`
            # in a T.serial loop: each iteration read 0.0, and so did the code after it; played LLM 47)
            carried = isinstance(node, ast.AugAssign) or any(
                isinstance(n, ast.Name) and n.id == name for n in ast.walk(getattr(node, "value", node)))
            if (isinstance(current, Var) and name not in self.scopes[-1] and not bound_outside_macro(self, name)) \
                    or (carried and lost_rebinding(self, name)):
                raise DSLSyntaxError(f"cannot reassign '{name}' inside a nested block: it is bound outside",
                                     code="E102", hint=f"for a loop-carried scalar use {name} = T.alloc_var(dtype)")
            var = Var(name, value.dtype)
            self.emit(Let(var, value), node)
            self.let_values[var] = value  # slice extents may be differences of let-bound bounds
            self.bind(name, var)
        elif lost_rebinding(self, name):
            raise DSLSyntaxError(f"cannot reassign '{name}' inside a nested block: it is bound outside, and the new "
                                 f"value would be lost at the block's end", code="E102",
                                 hint=f"for a value that changes at run time use {name} = T.alloc_var(dtype)")
        else:
            self.bind(name, value)

    def stmt_If(self, node: ast.If):
        cond = self.expr(node.test)
        if not isinstance(cond, Expr):  # compile-time: pick the branch now
            for s in node.body if cond else node.orelse:
                self._guard(s, self.stmt, s)
            return
        if cond.dtype != "bool":
            cond = make_cmp("!=", cond, 0)
        then_body, else_body = self.body(node.body), self.body(node.orelse)
        self.emit(If(cond, then_body, else_body), node)

    def stmt_While(self, node: ast.While):
        """``while cond:`` on a runtime condition (a compile-time one would unroll forever or not at all: E104)."""
        if node.orelse:
            raise DSLSyntaxError("while ... else is not supported", code="E101")
        before = len(self.blocks[-1])
        cond = self.expr(node.test)
        self.emitted_nothing(before, "a while condition")
        if not isinstance(cond, Expr):
            raise DSLTypeError(f"`while {ast.unparse(node.test)}`: the condition is a compile-time value ({cond!r}); "
                               f"a prim_func's while loop tests a runtime value", code="E104",
                               hint="use a Python for loop over compile-time values, or T.serial")
        if not self.kernel_depth:
            raise DSLSyntaxError("while loop outside T.Kernel", code="E505")
        if cond.dtype != "bool":
            cond = make_cmp("!=", cond, 0)
        with self.in_loop("while"):
            self.emit(While(cond, self.body(node.body)), node)

    def stmt_With(self, node: ast.With):
        from tileagent.compiler.language.kernel import KernelSpec
        from tileagent.compiler.language.warp_specialize import CURRENT_WS, WsSpec

        if len(node.items) != 1:
            raise DSLSyntaxError("`with` takes one context in a prim_func", code="E101")
        item = node.items[0]
        spec = self.expr(item.context_expr)
        if isinstance(spec, WsSpec) or getattr(spec, "inline_body", False):  # T.ws(...) (language.warp_specialize),
            if not self.kernel_depth:  # T.attr(...) (language.allreduce): the statements inlined, in program order
                what = "T.ws" if isinstance(spec, WsSpec) else "T.attr"
                raise DSLSyntaxError(f"{what} outside T.Kernel", code="E505")
            token = CURRENT_WS.set(spec.threads) if isinstance(spec, WsSpec) else spec.enter()
            try:
                for s in self.body(node.body, new_scope=False):
                    self.blocks[-1].append(s)
            finally:
                CURRENT_WS.reset(token) if isinstance(spec, WsSpec) else spec.exit()
            return
        if not isinstance(spec, KernelSpec):
            raise DSLSyntaxError(f"`with` is only for T.Kernel, got {describe(spec)}", code="E101")
        if self.kernel_depth:
            raise DSLSyntaxError("T.Kernel cannot be nested inside another T.Kernel", code="E103",
                                 hint="several T.Kernel scopes may follow each other at the top of the function")
        target = item.optional_vars
        if target is not None and not isinstance(target, (ast.Name, ast.Tuple, ast.List)):
            raise DSLSyntaxError(f"`as {ast.unparse(target)}`: T.Kernel binds its block indices to a name or a "
                                 f"tuple of names", self.span(target), code="E103",
                                 hint="write `with T.Kernel(gx, gy) as (bx, by):`")
        default = ("bx", "by", "bz")
        names = [default[i] for i in range(len(spec.grid))]
        if isinstance(target, ast.Name) and len(spec.grid) == 1:
            names = [target.id]
        elif isinstance(target, (ast.Tuple, ast.List)):
            if len(target.elts) != len(spec.grid) or not all(isinstance(t, ast.Name) for t in target.elts):
                raise DSLSyntaxError(f"T.Kernel has {len(spec.grid)} grid dims but `as` names "
                                     f"{len(target.elts)} variables", code="E103")
            names = [t.id for t in target.elts]
        block_vars = tuple(Var(n, DType("int32")) for n in names)
        self.scopes.append({})
        if isinstance(target, ast.Name):
            self.bind(target.id, block_vars[0] if len(block_vars) == 1 else block_vars)
        elif target is not None:
            for n, v in zip(names, block_vars):
                self.bind(n, v)
        from tileagent.compiler.language.extras import CURRENT_BLOCK_VARS, CURRENT_THREAD_VARS, ThreadBindings

        self.kernel_depth += 1
        outer_kernel_scope, self.kernel_scope = getattr(self, "kernel_scope", None), len(self.scopes) - 1
        token = CURRENT_BLOCK_VARS.set(block_vars)  # for T.get_block_binding
        threads = ThreadBindings(spec.threads, self.let_values)
        thread_token = CURRENT_THREAD_VARS.set(threads)  # for T.get_thread_binding
        try:
            body = self.body(node.body, new_scope=False)
        finally:
            CURRENT_BLOCK_VARS.reset(token)
            CURRENT_THREAD_VARS.reset(thread_token)
            self.kernel_depth, self.kernel_scope = self.kernel_depth - 1, outer_kernel_scope
            self.scopes.pop()
        grid = tuple(spec.grid)
        for part in split_at_grid_syncs(body):  # T.sync_grid(): kernels launched one after the other
            self.emit(Kernel(grid, spec.threads, block_vars, part, thread_vars=threads.vars if threads.used else (),
                             cluster=spec.cluster), node)

    def stmt_For(self, node: ast.For):
        from tileagent.compiler.language.loops import LoopSpec

        if node.orelse:
            raise DSLSyntaxError("for ... else is not supported", code="E101")
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and self.lookup(it.func.id, it) is range:
            spec = self._guard(it, self._range, it)
        else:
            spec = self.expr(it)
        if isinstance(spec, LoopSpec):
            self.loop(node, spec)
            return
        from tileagent.compiler.language.loops import PersistentSpec

        if isinstance(spec, PersistentSpec):
            self.persistent(node, spec)
            return
        if isinstance(spec, Expr) or not hasattr(spec, "__iter__"):
            raise DSLSyntaxError(f"cannot loop over {describe(spec)}", code="E101",
                                 hint="use T.serial(n), T.Parallel(...), T.Pipelined(n, num_stages=...) or range(n)")
        for value in self._iterate(spec, it):  # a Python iterable of compile-time values: unrolled now
            self._bind_target(node.target, value)
            with self.in_loop("unrolled"):
                for s in node.body:
                    self._guard(s, self.stmt, s)

    def _range(self, node: ast.Call):
        """``range(...)`` as a loop: T.serial, with Python's signature (1 to 3 positional arguments)."""
        from tileagent.compiler.language.loops import serial

        if node.keywords:
            raise DSLTypeError("range() takes no keyword arguments", code="E301",
                               hint="write range(stop) or range(start, stop, step)")
        args = list(self._elements(node.args))
        if not 1 <= len(args) <= 3:
            raise DSLTypeError(f"range expected 1 to 3 arguments, got {len(args)}", code="E301",
                               hint="write range(stop) or range(start, stop, step)")
        return _call_builtin(serial, args, {}, "range")

    def _iterate(self, iterable, node: ast.expr):
        """The values of a compile-time Python iterable; an exception raised while iterating is an E301 at ``node``."""
        try:
            yield from iterable
        except CompileError as e:
            raise e.with_span(self.span(node))
        except Exception as e:  # noqa: BLE001 -- user code (a generator, a container) failed
            raise DSLTypeError(f"iterating over `{ast.unparse(node)}` raised {type(e).__name__}: {e}",
                               self.span(node), code="E301") from None

    def _bind_target(self, target, value):
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (tuple, list)) and \
                len(value) == len(target.elts):
            for t, v in zip(target.elts, value):
                self._bind_target(t, v)
        else:
            raise DSLSyntaxError(f"cannot unpack {describe(value)} into `{ast.unparse(target)}`", code="E102")

    def loop(self, node: ast.For, spec):
        if self.kernel_depth == 0:
            raise DSLSyntaxError("loops over DSL ranges must be inside T.Kernel", code="E505")
        t = node.target
        names = [t.id] if isinstance(t, ast.Name) else [e.id for e in getattr(t, "elts", []) if
                                                        isinstance(e, ast.Name)]
        want = len(spec.extents) if spec.kind == "parallel" else 1
        if len(names) != want or (not isinstance(t, ast.Name) and len(names) != len(t.elts)):
            raise DSLSyntaxError(f"T.{_LOOP_NAMES[spec.kind]} with {want} extent(s) needs {want} loop variable(s), "
                                 f"got `{ast.unparse(t)}`", code="E102")
        if spec.kind in ("serial", "unroll") and self.parallel_frames and _static_range(spec) is not None:
            # a sequential loop inside T.Parallel (TileLang: each parallel iteration runs it in order), with a
            # compile-time trip count: unrolled here, so the Parallel body stays element statements; as Python runs
            # it, the loop variable and the names the body rebinds (``v = v + ...``) live on in the enclosing scope
            for value in _static_range(spec):
                self.bind(names[0], value)
                with self.in_loop("unrolled"):
                    self.blocks[-1].extend(self.body(node.body, new_scope=False))
            return
        if spec.kind != "parallel" and self.parallel_frames:  # before its body, whose rebindings would be lost
            trip = spec.extent if isinstance(spec.extent, int) else "known only at run time"
            raise ScopeError(f"T.{spec.kind} loop inside T.Parallel (`{ast.unparse(node.iter)}`, {trip} "
                             f"iterations): a sequential loop runs there only as an unrolled range / T.serial / "
                             f"T.unroll of at most {UNROLL_IN_PARALLEL} compile-time iterations", code="E506",
                             hint="put sequential loops outside the T.Parallel nest (state kept per element in a "
                                  "fragment); one with a compile-time trip count of at most 64 is unrolled there and "
                                  "allowed")
        loop_vars = tuple(Var(n, DType("int32")) for n in names)
        self.scopes.append(dict(zip(names, loop_vars)))
        if spec.kind == "parallel":
            self.parallel_frames.append((loop_vars, tuple(spec.extents), []))
        self.loop_kinds.append(spec.kind)
        try:
            body = self.body(node.body)
        finally:
            self.loop_kinds.pop()
            self.scopes.pop()
            if spec.kind == "parallel":
                hoisted = self.parallel_frames.pop()[2]
        if spec.kind == "parallel":
            self.blocks[-1].extend(hoisted)  # per-iteration T.alloc_var fragments (outermost loop only)
            self.emit(parallel_nest(loop_vars, spec, body), node)
        else:
            self.emit(For(loop_vars[0], spec.start, spec.extent, spec.step, spec.kind, body,
                          dict(spec.annotations)), node)

    def persistent(self, node: ast.For, spec):
        """``for bx, by in T.Persistent(domain, wave, index, group_size)`` as TileLang expands it: a T.serial loop
        over the waves, each tile ``w * wave + index`` split into coordinates over the domain grouped by
        ``group_size`` along its last dim, the body guarded by the tile being inside the domain."""
        if self.kernel_depth == 0:
            raise DSLSyntaxError("loops over DSL ranges must be inside T.Kernel", code="E505")
        t = node.target
        names = [t.id] if isinstance(t, ast.Name) else [e.id for e in getattr(t, "elts", []) if
                                                        isinstance(e, ast.Name)]
        if len(names) != len(spec.domain) or (not isinstance(t, ast.Name) and len(names) != len(t.elts)):
            raise DSLSyntaxError(f"T.Persistent over {len(spec.domain)} dim(s) needs {len(spec.domain)} loop "
                                 f"variable(s), got `{ast.unparse(t)}`", code="E102")
        last = spec.domain[-1]
        if not isinstance(last, int):
            raise DSLTypeError("T.Persistent: the last domain extent must be a compile-time integer (it sets the "
                               "tile grouping)", code="E301", hint="give the tile counts from compile-time sizes")
        group = max(1, min(spec.group_size, last))
        grouped = [-(-last // group), *spec.domain[:-1], group]
        padded = 1
        for d in grouped:
            padded = make_binop("*", padded, d)
        waves = make_binop("//", make_binop("+", padded, make_binop("-", spec.wave_size, 1)), spec.wave_size)
        w = Var(f"{names[0]}_wave", DType("int32"))
        rem = make_binop("+", make_binop("*", w, spec.wave_size), spec.index)
        idxs = [None] * len(grouped)
        for i in range(len(grouped) - 1, 0, -1):
            idxs[i] = make_binop("%", rem, grouped[i])
            rem = make_binop("//", rem, grouped[i])
        idxs[0] = rem
        last_coord = make_binop("+", make_binop("*", idxs[0], group), idxs[-1])
        coords = [*idxs[1:-1], last_coord]
        self.scopes.append(dict(zip(names, coords)))
        try:
            with self.in_loop("persistent"):
                body = self.body(node.body)
        finally:
            self.scopes.pop()
        self.emit(For(w, 0, waves, 1, "serial", (If(make_cmp("<", last_coord, last), body, ()),), {}), node)

    def stmt_Return(self, node: ast.Return):
        if node.value is not None:
            raise DSLSyntaxError("a prim_func returns nothing; outputs are written to its tensor parameters",
                                 code="E101", hint="mark output parameters with @jit(out_idx=[...])")

    def stmt_Assert(self, node: ast.Assert):
        cond = self.expr(node.test)
        if isinstance(cond, Expr):
            raise DSLSyntaxError("assert needs a compile-time condition", code="E104")
        if not cond:
            msg = self.expr(node.msg) if node.msg is not None else ast.unparse(node.test)
            raise DSLTypeError(f"assertion failed: {msg}", code="E301")


_DTYPE_NAMES = frozenset(("float", "half", "double", "int") + __import__("tileagent.compiler.dtypes").compiler.dtypes.KNOWN)
UNROLL_IN_PARALLEL = 64  # the most iterations of a sequential loop inside T.Parallel that the frontend unrolls


def _static_range(spec) -> range | None:
    """The iterations of a T.serial/T.unroll loop whose start, extent and step are compile-time integers and whose
    trip count is at most UNROLL_IN_PARALLEL; else None."""
    start, extent, step = spec.start, spec.extent, spec.step
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, extent, step)):
        return None
    if extent > UNROLL_IN_PARALLEL:
        return None
    return range(start, start + max(extent, 0) * step, step)


_LOOP_NAMES = {"parallel": "Parallel", "pipelined": "Pipelined", "serial": "serial", "unroll": "unroll"}
_UNSUPPORTED_HINTS = {
    "FunctionDef": "define helpers outside the prim_func; call them with compile-time values",
    "Try": "errors cannot be caught inside a kernel",
    "Import": "import at module level",
    "ImportFrom": "import at module level",
}


def _is_torch_dtype(x) -> bool:
    import torch

    return isinstance(x, torch.dtype)


def _is_constant(e: Expr) -> bool:
    from tileagent.compiler.ir.expr import Const

    return isinstance(e, Const)

