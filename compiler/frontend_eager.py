"""Frontend, eager style: a ``@jit`` function whose body *is* the kernel (TileLang v0.1.7+'s "eager" form).

In: the ``@jit``-decorated function and one call's arguments::

    @tilelang.jit
    def add(A, B, block_M, dtype=T.float32):
        M, N = T.const("M, N")        # compile-time sizes, bound from tensor shapes (or compile(M=..., N=...))
        A: T.Tensor((M, N), dtype)    # a bare annotation of a parameter declares a tensor (or scalar) parameter
        B: T.Tensor((M, N), dtype)
        C = T.empty((M, N), dtype)    # an output, allocated per call and returned
        with T.Kernel(...): ...
        return C

Out: a PrimFunc whose parameters are the annotated parameters in signature order, then the ``T.empty`` outputs (in
the order of the ``return``), and the indices of those outputs (the kernel's ``out_idx``).
Guarantees: the body is parsed as a ``T.prim_func`` body is (same checks, same diagnostics with spans); every
``T.const`` name gets its value from a keyword of the call (``compile(M=1024)``) or from the shape of the tensor
whose annotation uses it directly as a dimension; a name used before it has a value is an E104 at the line that
uses it; ``T.const``/``T.empty`` outside an eager function are E101.
"""

from __future__ import annotations

import ast
import contextvars
import functools
import inspect
from dataclasses import dataclass

from tileagent.compiler.diagnostics import DSLSyntaxError, DSLTypeError, ShapeError, Span
from tileagent.compiler.frontend import _Parser, _parse_def
from tileagent.compiler.frontend_body import vars_in
from tileagent.compiler.ir.expr import Expr
from tileagent.compiler.ir.stmt import Buffer, Kernel, PrimFunc

_EAGER = contextvars.ContextVar("tileagent_eager_parse", default=False)


class ConstVar:
    """What ``T.const("M")`` binds while the eager body is parsed: a size whose value comes from the call."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype

    def __repr__(self) -> str:
        return f"T.const({self.name!r})"

    def _unbound(self, *_):
        raise DSLTypeError(f"T.const '{self.name}' is used in an expression before it has a value: no tensor "
                           f"annotation binds it as a plain dimension and the call gave no {self.name}=...",
                           code="E104", hint=f"declare a tensor whose shape uses {self.name} directly (A: T.Tensor(("
                                             f"{self.name}, ...), dtype)), or pass {self.name}= to compile()")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = __rfloordiv__ = _unbound
    __truediv__ = __rtruediv__ = __mod__ = __rmod__ = __neg__ = __lshift__ = __rshift__ = _unbound


@dataclass(frozen=True)
class EmptySpec:
    """``T.empty(shape, dtype)``: an output tensor of an eager kernel."""

    shape: tuple
    dtype: object


def const(names: str, dtype: str = "int32"):
    """``M, N = T.const("M, N")`` (eager ``@jit`` functions only): sizes bound from the call's tensors."""
    if not _EAGER.get():
        raise DSLSyntaxError("T.const is only for eager-style @jit functions (whose body is the kernel)", code="E101",
                             hint="in a @T.prim_func, use T.dynamic('M') for a size bound at run time")
    parts = [p.strip() for p in names.split(",") if p.strip()] if isinstance(names, str) else []
    if not parts:
        raise DSLTypeError(f"T.const takes names like \"M\" or \"M, N\", got {names!r}", code="E301")
    made = tuple(ConstVar(p, dtype) for p in parts)
    return made[0] if len(made) == 1 else made


def empty(shape, dtype="float32"):
    """``C = T.empty((M, N), dtype)`` (eager ``@jit`` functions only): an output tensor, allocated per call."""
    if not _EAGER.get():
        raise DSLSyntaxError("T.empty is only for eager-style @jit functions (whose body is the kernel)", code="E101",
                             hint="in a @T.prim_func, declare outputs as T.Tensor parameters and list them in "
                                  "@jit(out_idx=[...])")
    return EmptySpec(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), dtype)


@functools.lru_cache(maxsize=256)
def _eager_info(fn) -> tuple[bool, tuple[str, ...]]:
    """(is eager style, the parameters declared by bare annotations in the body) of a @jit function."""
    try:
        lines, _ = inspect.getsourcelines(fn)
        fdef = _parse_def(lines)
    except (OSError, TypeError, SyntaxError):
        return False, ()
    if not isinstance(fdef, ast.FunctionDef):
        return False, ()
    params = {a.arg for a in fdef.args.args + fdef.args.kwonlyargs + fdef.args.posonlyargs}
    declared, eager = [], False
    for node in ast.walk(fdef):
        if node is not fdef and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any("prim_func" in ast.unparse(d) for d in node.decorator_list):
                return False, ()
    for stmt in fdef.body:
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name) \
                and stmt.target.id in params:
            declared.append(stmt.target.id)
            eager = True
    for node in ast.walk(fdef):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("const", "empty"):
            eager = True
        if isinstance(node, ast.With) and any("Kernel" in ast.unparse(i.context_expr) for i in node.items) \
                and node in fdef.body:
            eager = True
    return eager, tuple(declared)


def is_eager(fn) -> bool:
    """True for a @jit function written in the eager style (its body is the kernel)."""
    return _eager_info(fn)[0]


def tensor_params(fn) -> tuple[str, ...]:
    """The parameters an eager function declares with bare annotations (its runtime arguments), in body order."""
    return _eager_info(fn)[1]


class _EagerParser(_Parser):
    def __init__(self, *args, values: dict, consts: dict):
        super().__init__(*args)
        self.values = values  # parameter -> the call's value (tensors for declared parameters, when given)
        self.consts = dict(consts)  # T.const name -> int
        self.declared: dict[str, object] = {}  # parameter -> Buffer / Var
        self.outputs: list[Buffer] = []
        self.returned: list[Buffer] | None = None
        self._in_annotation = False

    def lookup(self, name: str, node: ast.AST):
        value = super().lookup(name, node)
        if isinstance(value, ConstVar) and (not self._in_annotation or value.name in self.consts):
            # in an annotation a bound size is its value (so `T.Tensor[[seq_len * heads, dim], ...]` is a shape
            # expression); an unbound one stays a ConstVar, which binds from the tensor where it is a plain dim
            if value.name not in self.consts:
                raise DSLTypeError(f"T.const '{value.name}' has no value yet: no tensor annotation has bound it and "
                                   f"the call gave no {value.name}=...", self.span(node), code="E104",
                                   hint=f"declare a tensor whose shape uses {value.name} directly (A: T.Tensor(("
                                        f"{value.name}, ...), dtype)) before this line, or pass {value.name}= to "
                                        f"compile()")
            return self.consts[value.name]
        return value

    def stmt_AnnAssign(self, node: ast.AnnAssign):
        if node.value is not None or not isinstance(node.target, ast.Name) or node.target.id not in self.values:
            return super().stmt_AnnAssign(node)
        name = node.target.id
        if name in self.declared:
            raise DSLSyntaxError(f"parameter '{name}' is declared twice", code="E105")
        self._in_annotation = True
        try:
            ann = self.expr(node.annotation)
        finally:
            self._in_annotation = False
        param = self._declare(name, ann, node)
        self.declared[name] = param
        self.bind(name, param)

    def _declare(self, name: str, ann, node):
        from tileagent.compiler.language.types import Tensor

        given = self.values.get(name)
        if isinstance(ann, Tensor):
            shape = []
            for dim, d in enumerate(ann.shape):
                if isinstance(d, ConstVar):
                    if d.name not in self.consts:
                        if not hasattr(given, "shape"):
                            raise DSLTypeError(f"parameter '{name}': T.const '{d.name}' has no value: pass the "
                                               f"tensor or {d.name}=... to compile()", code="E104")
                        if len(given.shape) != len(ann.shape):
                            raise ShapeError(f"parameter '{name}' is declared with {len(ann.shape)} dims but the "
                                             f"call passes a tensor of shape {tuple(given.shape)}", code="E105")
                        self.consts[d.name] = int(given.shape[dim])
                    d = self.consts[d.name]
                elif not isinstance(d, (int, Expr)) or isinstance(d, bool):
                    raise DSLTypeError(f"parameter '{name}': shape entries must be ints, T.const or T.dynamic "
                                       f"sizes, got {d!r}", code="E105")
                shape.append(d)
            return Buffer(name, tuple(shape), self._dtype(ann.dtype, f"parameter '{name}'"), "global",
                          self.span(node))
        return self.param(ast.arg(arg=name, lineno=node.lineno, col_offset=node.col_offset), ann)

    def assign_name(self, name: str, value, node):
        if isinstance(value, EmptySpec):
            if self.kernel_depth:
                raise DSLSyntaxError("T.empty must be outside T.Kernel (it declares an output tensor)", code="E505")
            shape = tuple(self.consts[d.name] if isinstance(d, ConstVar) and d.name in self.consts else d
                          for d in value.shape)
            for d in shape:
                if isinstance(d, ConstVar) or isinstance(d, bool) or not isinstance(d, (int, Expr)):
                    raise DSLTypeError(f"T.empty '{name}': shape entries must be ints or bound sizes, got {d!r}",
                                       code="E105")
            buf = Buffer(name, shape, self._dtype(value.dtype, f"T.empty '{name}'"), "global", self.span(node))
            self.outputs.append(buf)
            self.bind(name, buf)
            return
        super().assign_name(name, value, node)

    def stmt_Return(self, node: ast.Return):
        if node.value is None:
            return
        if self.kernel_depth:
            raise DSLSyntaxError("return inside T.Kernel", code="E101")
        value = self.expr(node.value)
        items = list(value) if isinstance(value, (tuple, list)) else [value]
        for v in items:
            if not isinstance(v, Buffer) or not any(v is o for o in self.outputs):
                raise DSLSyntaxError("an eager @jit function returns its T.empty outputs (one or a tuple)",
                                     code="E101", hint="declare outputs with C = T.empty(shape, dtype) and return C")
        self.returned = items

    def eager_function(self, fdef: ast.FunctionDef, params: list[str]) -> tuple[PrimFunc, tuple[int, ...]]:
        for name, value in self.values.items():
            if name not in params:
                self.bind(name, value)
        from tileagent.compiler.frontend_grow import grow_fragments_to_loops
        from tileagent.compiler.frontend_replicate import demote_replicated_fragments

        body = grow_fragments_to_loops(demote_replicated_fragments(self.body(fdef.body, new_scope=False)))
        if not any(isinstance(s, Kernel) for s in body):
            raise DSLSyntaxError(f"@jit function '{fdef.name}' has no `with T.Kernel(...)` scope", self.span(fdef),
                                 code="E103", hint="wrap the body in `with T.Kernel(grid..., threads=128) as bx:`")
        missing = [p for p in params if p not in self.declared]
        if missing:
            raise DSLSyntaxError(f"parameter(s) {', '.join(missing)} of '{fdef.name}' are not declared",
                                 self.span(fdef), code="E105")
        ins = [self.declared[p] for p in params]
        outs = self.returned if self.returned is not None else self.outputs
        outs += [o for o in self.outputs if not any(o is r for r in outs)]
        all_params = ins + outs
        dynamic = []
        for p in all_params:
            if isinstance(p, Buffer):
                for d in p.shape:
                    for v in vars_in(d):
                        if not any(v is x for x in dynamic):
                            dynamic.append(v)
        n = len(all_params)
        return self.make_func(fdef, all_params, body, dynamic), tuple(range(len(ins), n))


def _sizes_from_tensors(fdef: ast.FunctionDef, values: dict, env: dict | None = None) -> dict:
    """T.const names that a tensor annotation uses directly as a dimension, valued from the call's tensors, so that
    the body may use them before the annotation (``splitK = K // split_k`` above ``A: T.Tensor((M, K), ...)``).
    The shape may also be a name assigned earlier in the body (``B_shape = [G, K, N] if not trans_b else [G, N, K]``,
    the condition evaluated on the call's compile-time arguments, ``env``) and a dimension a plain alias of a const
    (``KH, KW = K, K``), as in TileLang's grouped GEMM, stream-K GEMM and convolution examples."""
    names = set()
    for node in ast.walk(fdef):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "const" and \
                node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.update(p.strip() for p in node.args[0].value.split(","))
    env = {**(env or {}), **values}
    assigned: dict = {}  # name -> the value node of its latest plain assignment so far
    out = {}
    for stmt in fdef.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
            if isinstance(target, ast.Name):
                assigned[target.id] = value
            elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) and \
                    len(target.elts) == len(value.elts):
                for t, v in zip(target.elts, value.elts):
                    if isinstance(t, ast.Name):
                        assigned[t.id] = v
            continue
        if not (isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name)):
            continue
        tensor = values.get(stmt.target.id)
        ann = stmt.annotation
        shape_node = None
        if isinstance(ann, ast.Call) and ann.args:
            shape_node = ann.args[0]
        elif isinstance(ann, ast.Subscript) and isinstance(ann.slice, ast.Tuple) and ann.slice.elts:
            shape_node = ann.slice.elts[0]
        shape_node = _resolve(shape_node, assigned, env)
        if not hasattr(tensor, "shape") or not isinstance(shape_node, (ast.Tuple, ast.List)) or \
                len(shape_node.elts) != len(tensor.shape):
            continue
        for dim, elt in enumerate(shape_node.elts):
            for _ in range(4):  # follow plain aliases: KH -> K
                if isinstance(elt, ast.Name) and elt.id not in names and isinstance(assigned.get(elt.id), ast.Name):
                    elt = assigned[elt.id]
            if isinstance(elt, ast.Name) and elt.id in names and elt.id not in out:
                out[elt.id] = int(tensor.shape[dim])
    return out


def _resolve(node, assigned: dict, env: dict):
    """A shape node with names of earlier assignments and conditionals on compile-time arguments resolved, as far as
    that is possible without running the body (else the node as it was)."""
    for _ in range(4):
        if isinstance(node, ast.Name) and node.id in assigned:
            node = assigned[node.id]
        elif isinstance(node, ast.IfExp):
            try:
                test = eval(compile(ast.Expression(node.test), "<shape>", "eval"), {"__builtins__": {}}, env)  # noqa: S307
            except Exception:  # noqa: BLE001 -- not decidable before the body runs
                return node
            node = node.body if test else node.orelse
        else:
            break
    return node


def parse_eager(fn, args: tuple, kwargs: dict) -> tuple[PrimFunc, tuple[int, ...], list]:
    """Parse the eager @jit function ``fn`` for one call. Returns (PrimFunc, out_idx, the call's tensor arguments in
    parameter order; empty when the call gave none)."""
    declared = tensor_params(fn)
    sig = inspect.signature(fn)
    names = set(sig.parameters)
    extra = {k: v for k, v in kwargs.items() if k not in names}
    try:
        bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in names})
    except TypeError as e:
        raise DSLTypeError(f"{fn.__name__}(): {e}", code="E301", hint=f"signature: {fn.__name__}{sig}") from None
    bound.apply_defaults()
    values = dict(bound.arguments)
    for p in sig.parameters.values():
        if p.name not in values and p.name not in declared:
            raise DSLTypeError(f"{fn.__name__}() missing the compile-time argument '{p.name}'", code="E301",
                               hint=f"signature: {fn.__name__}{sig}")
    for p in declared:
        values.setdefault(p, None)
    consts = {}
    for k, v in extra.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise DSLTypeError(f"{fn.__name__}(): {k}={v!r} is not a parameter, and a T.const value must be an int",
                               code="E301")
        consts[k] = v
    lines, first_line = inspect.getsourcelines(fn)
    file = inspect.getsourcefile(fn) or "<unknown>"
    fdef = _parse_def(lines)
    closure = {}
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            closure[var] = cell.cell_contents
        except ValueError:
            pass
    for name, value in _sizes_from_tensors(fdef, values, {**fn.__globals__, **closure}).items():
        consts.setdefault(name, value)
    parser = _EagerParser(file, first_line, lines, closure, fn.__globals__, values=values, consts=consts)
    token = _EAGER.set(True)
    try:
        func, out_idx = parser.eager_function(fdef, list(declared))
    except Exception as e:  # noqa: BLE001 -- only CompileErrors leave the frontend
        from tileagent.compiler.diagnostics import CompileError, InternalCompilerError

        if isinstance(e, CompileError):
            raise
        raise InternalCompilerError(f"internal error while parsing {fn.__name__}: {type(e).__name__}: {e}",
                                    Span(file, first_line)) from e
    finally:
        _EAGER.reset(token)
    tensors = [values[p] for p in declared]
    given = [t for t in tensors if t is not None]
    if given and len(given) != len(tensors):
        missing = [p for p, t in zip(declared, tensors) if t is None]
        raise DSLTypeError(f"{fn.__name__}(): missing tensor argument(s) {', '.join(missing)}", code="E301")
    return func, out_idx, given


def tensor_arguments(fn, args: tuple, kwargs: dict) -> list:
    """The call's values of the parameters the eager function declares (its runtime arguments), in declaration
    order; empty when the call passes none of them (``compile(M=..., ...)``)."""
    sig = inspect.signature(fn)
    bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in sig.parameters}).arguments
    values = [bound.get(p) for p in tensor_params(fn)]
    return [v for v in values if v is not None]


def cache_key(fn, args: tuple, kwargs: dict):
    """A hashable key of one eager call: its compile-time values and each tensor's dtype and shape; None when a
    value cannot be hashed."""
    def norm(v):
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            return ("tensor", str(v.dtype), tuple(v.shape), str(getattr(v, "device", "")))
        return v

    key = (tuple(norm(a) for a in args), tuple(sorted((k, norm(v)) for k, v in kwargs.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


__all__ = ["ConstVar", "EmptySpec", "cache_key", "const", "empty", "is_eager", "parse_eager", "tensor_arguments",
           "tensor_params"]
