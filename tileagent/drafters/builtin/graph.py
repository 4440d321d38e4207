"""Trace a reference's forward into a small expression graph the family recognizers can match.

In: a reference file (KernelBench format, see docs/evaluator.md). ``trace_reference(path)`` loads it with
``evaluator.spec.load_spec``, builds ``Model(*get_init_inputs(config))`` and its inputs for one config on the
``meta`` device (no memory, no compute), traces ``forward`` with ``torch.fx.symbolic_trace`` and propagates shapes.

Out: ``Traced``: the output ``Expr`` (a DAG: shared subexpressions are the same object), the inputs' names, shapes and
dtypes, the model (for binding constants to its attributes) and the reference's ``__init__`` text.

Guarantees: every fx node becomes an ``Expr`` with its shape and dtype; casts between floating dtypes become ``cast``,
no-ops (``clone``, ``detach``, ``contiguous``, dropout in eval mode) vanish, ops the recognizers do not know become
``unknown`` with the op's name in ``attr`` (never an exception); tracing failures raise ``TraceError`` with a plain
message.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from tileagent.compiler import python_ast
from tileagent.evaluator.spec import Spec, load_spec


class TraceError(Exception):
    """The reference could not be loaded or traced (the message says why)."""


@dataclass(eq=False)
class Expr:
    """One value of the traced forward: ``op`` applied to ``args`` (Exprs or Python values), with op details in
    ``attr``. Leaves: ``input`` (attr: position), ``param`` (attr: dotted name), ``const`` (attr: the number).
    Compared by identity, so a DAG keeps its sharing."""

    op: str
    args: tuple = ()
    attr: object = None
    shape: tuple | None = None
    dtype: torch.dtype | None = None
    kwargs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        if self.op in ("input", "param", "const", "unknown", "meta"):
            return f"{self.op}({self.attr!r})"
        inner = ", ".join(repr(a) for a in self.args)
        return f"{self.op}({inner}{', ' + repr(self.attr) if self.attr is not None else ''})"


@dataclass
class Traced:
    """A traced reference at one config."""

    spec: Spec
    config: dict
    model: nn.Module
    output: Expr
    input_names: list[str]
    input_shapes: list[tuple]
    input_dtypes: list[torch.dtype]
    init_source: str | None
    init_prelude: list[str]
    forward_params: str
    inplace: list = field(default_factory=list)  # in-place ops of forward (``y[:, 0].mul_(3)``), by name

    def nodes(self) -> list[Expr]:
        """Every Expr reachable from the output, each once, operands before users."""
        return walk(self.output)


def walk(e) -> list[Expr]:
    """Every Expr reachable from ``e``, each once (by identity), operands before users; [] when ``e`` is no Expr."""
    seen, order = set(), []

    def visit(x):
        if isinstance(x, Expr) and id(x) not in seen:
            seen.add(id(x))
            for a in x.args:
                visit(a)
            order.append(x)

    visit(e)
    return order


# -- op tables: fx target name -> canonical op ---------------------------------------------------------------------

UNARY = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "exp2": "exp2", "log": "log",
         "log2": "log2", "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs", "neg": "neg", "erf": "erf", "silu": "silu",
         "reciprocal": "reciprocal", "square": "square", "gelu": "gelu", "relu6": "relu6", "log1p": "log1p",
         "softplus": "softplus", "mish": "mish", "hardsigmoid": "hardsigmoid", "hardswish": "hardswish",
         "sin": "sin", "cos": "cos"}
BINARY = {"add": "add", "iadd": "add", "sub": "sub", "isub": "sub", "rsub": "rsub", "mul": "mul", "imul": "mul",
          "truediv": "div", "div": "div", "itruediv": "div", "pow": "pow", "maximum": "max", "minimum": "min"}
CLAMPS = {"clamp", "clamp_min", "clamp_max", "clip", "hardtanh", "leaky_relu"}
CASTS = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16, "double": torch.float64,
         "to": None, "type": None, "type_as": None}
NOOPS = {"clone", "detach", "contiguous", "dropout", "identity"}
LAYOUT = {"transpose", "permute", "view", "reshape", "flatten", "t", "unsqueeze", "squeeze", "expand", "getitem"}
REDUCE = {"sum", "mean", "amax", "amin", "var"}
MATMUL = {"matmul", "mm", "bmm"}
MODULE_ACTIVATIONS = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.SiLU: "silu", nn.GELU: "gelu",
                      nn.ReLU6: "relu6", nn.Softplus: "softplus", nn.Mish: "mish", nn.Hardsigmoid: "hardsigmoid",
                      nn.Hardswish: "hardswish"}


def _target_name(target) -> str:
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", str(target)).rstrip("_") or str(target)


def _norm_dims(dim, ndim: int) -> tuple[int, ...] | None:
    if dim is None:
        return tuple(range(ndim))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    if not all(isinstance(d, int) for d in dims):
        return None
    return tuple(sorted(d % ndim for d in dims))


class _Converter:
    """fx graph -> Expr DAG."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm, self.env, self.n_inputs = gm, {}, 0

    def value(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (tuple, list)):
            return type(a)(self.value(x) for x in a)
        if isinstance(a, bool) or isinstance(a, (int, float)):
            return Expr("const", attr=a)
        return a

    def run(self) -> Expr:
        out = None
        for node in self.gm.graph.nodes:
            if node.op == "output":
                out = node.args[0]
                break
            self.env[node] = self.convert(node)
        if isinstance(out, (tuple, list)):
            if len(out) != 1:
                return Expr("unknown", attr=f"{len(out)} outputs")
            out = out[0]
        return self.env[out]

    def convert(self, node: torch.fx.Node) -> Expr:
        meta = node.meta.get("tensor_meta")
        shape = tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None
        dtype = meta.dtype if meta is not None and hasattr(meta, "dtype") else None

        def mk(op, args=(), attr=None, **kwargs):
            return Expr(op, tuple(args), attr, shape, dtype, kwargs)

        if node.op == "placeholder":
            self.n_inputs += 1
            return mk("input", attr=self.n_inputs - 1)
        if node.op == "get_attr":
            return mk("param", attr=node.target)
        if node.op == "call_module":
            return self.module(node, mk)
        name = _target_name(node.target)
        args = [self.value(a) for a in node.args]
        kw = {k: self.value(v) for k, v in node.kwargs.items()}
        if name == "getattr":
            return mk("meta", attr=node.args[1])
        if shape is None:  # a non-tensor value: x.shape[-1:], x.dtype, ...
            return mk("meta", args, attr=name)
        if name in NOOPS:
            return args[0]
        if name in CASTS:
            if not (dtype and dtype.is_floating_point):
                return mk("unknown", attr=f"cast to {dtype}")
            return mk("cast", args[:1])
        if name in UNARY:
            extra = {}
            if name == "gelu":
                extra["approximate"] = _const(kw.get("approximate", "none"))
            if name == "softplus":
                extra["beta"] = _const(args[1] if len(args) > 1 else kw.get("beta", 1.0))
                extra["threshold"] = _const(args[2] if len(args) > 2 else kw.get("threshold", 20.0))
            return mk(UNARY[name], args[:1], **extra)
        if name in BINARY:
            if len(args) != 2 or set(kw) - {"inplace"}:
                return mk("unknown", attr=f"{name} with arguments {list(kw)}")
            return mk(BINARY[name], args)
        if name in CLAMPS:
            return self.clamp(name, args, kw, mk)
        if name in REDUCE:
            x = args[0]
            dim = args[1] if len(args) > 1 else kw.get("dim")
            keepdim = args[2] if len(args) > 2 else kw.get("keepdim", False)
            dims = _norm_dims(_const(dim), len(x.shape))
            if dims is None:
                return mk("unknown", attr=f"{name} over dim {dim!r}")
            if name == "var":
                correction = kw.get("correction", None)
                unbiased = kw.get("unbiased", None)
                corr = _const(correction) if correction is not None else (1 if _const(unbiased) in (None, True)
                                                                              else 0)
                if corr != 0:
                    return mk("unknown", attr="var with Bessel's correction")
                name = "var"
            return mk("reduce", (x,), attr=name, dims=dims, keepdim=bool(_const(keepdim)))
        if name in ("softmax", "log_softmax"):
            x = args[0]
            dim = args[1] if len(args) > 1 else kw.get("dim")
            dims = _norm_dims(_const(dim), len(x.shape))
            return mk(name, (x,), dims=dims)
        if name == "layer_norm":
            x = args[0]
            w = args[2] if len(args) > 2 else kw.get("weight")
            b = args[3] if len(args) > 3 else kw.get("bias")
            eps = args[4] if len(args) > 4 else kw.get("eps", Expr("const", attr=1e-5))
            norm_shape = node.args[1] if len(node.args) > 1 else node.kwargs.get("normalized_shape")
            return mk("layer_norm", (x, w, b, eps), last_dim_only=_last_dim_only(norm_shape))
        if name == "rms_norm":
            x = args[0]
            w = args[2] if len(args) > 2 else kw.get("weight")
            eps = args[3] if len(args) > 3 else kw.get("eps")
            norm_shape = node.args[1] if len(node.args) > 1 else node.kwargs.get("normalized_shape")
            return mk("rms_norm", (x, w, eps), last_dim_only=_last_dim_only(norm_shape))
        if name == "scaled_dot_product_attention":
            q, k, v = args[:3]
            return mk("sdpa", (q, k, v), attn_mask=kw.get("attn_mask", args[3] if len(args) > 3 else None),
                      dropout_p=_const(kw.get("dropout_p", 0.0)), is_causal=kw.get("is_causal", False),
                      scale=kw.get("scale"), enable_gqa=_const(kw.get("enable_gqa", False)))
        if name in MATMUL:
            return mk("matmul", args[:2])
        if name == "linear":
            return mk("linear", (args[0], args[1], args[2] if len(args) > 2 else kw.get("bias")))
        if name in LAYOUT:
            return mk(name, args[:1], attr=tuple(_const(a) for a in node.args[1:]))
        return mk("unknown", attr=name)

    def clamp(self, name, args, kw, mk):
        x = args[0]
        if name == "leaky_relu":
            slope = args[1] if len(args) > 1 else kw.get("negative_slope", 0.01)
            return mk("leaky_relu", (x,), slope=_const(slope))
        if name == "hardtanh":
            lo = args[1] if len(args) > 1 else kw.get("min_val", -1.0)
            hi = args[2] if len(args) > 2 else kw.get("max_val", 1.0)
        elif name == "clamp_min":
            lo, hi = (args[1] if len(args) > 1 else kw.get("min")), None
        elif name == "clamp_max":
            lo, hi = None, (args[1] if len(args) > 1 else kw.get("max"))
        else:
            lo = args[1] if len(args) > 1 else kw.get("min")
            hi = args[2] if len(args) > 2 else kw.get("max")
        if any(isinstance(v, Expr) and v.op != "const" for v in (lo, hi)):
            return mk("unknown", attr=f"{name} with tensor bounds")
        return mk("clamp", (x,), lo=_const(lo), hi=_const(hi))

    def module(self, node, mk) -> Expr:
        mod = self.gm.get_submodule(node.target)
        args = [self.value(a) for a in node.args]
        x = args[0] if args else None

        def param(attr):
            t = getattr(mod, attr, None)
            if t is None:
                return None
            return Expr("param", attr=f"{node.target}.{attr}", shape=tuple(t.shape), dtype=t.dtype)

        if isinstance(mod, nn.Linear):
            return mk("linear", (x, param("weight"), param("bias")))
        if isinstance(mod, nn.LayerNorm):
            return mk("layer_norm", (x, param("weight"), param("bias"), Expr("const", attr=mod.eps)),
                      last_dim_only=len(mod.normalized_shape) == 1)
        if hasattr(nn, "RMSNorm") and isinstance(mod, nn.RMSNorm):
            return mk("rms_norm", (x, param("weight"), Expr("const", attr=mod.eps)),
                      last_dim_only=len(mod.normalized_shape) == 1)
        if isinstance(mod, (nn.Dropout, nn.Identity)):
            return x
        if isinstance(mod, nn.Softmax):
            return mk("softmax", (x,), dims=_norm_dims(mod.dim, len(x.shape)))
        if isinstance(mod, nn.LeakyReLU):
            return mk("leaky_relu", (x,), slope=mod.negative_slope)
        if isinstance(mod, nn.Hardtanh) and not isinstance(mod, nn.ReLU6):
            return mk("clamp", (x,), lo=mod.min_val, hi=mod.max_val)
        for cls, op in MODULE_ACTIVATIONS.items():
            if isinstance(mod, cls):
                extra = {"approximate": mod.approximate} if op == "gelu" else {}
                if op == "softplus":
                    extra = {"beta": mod.beta, "threshold": mod.threshold}
                return mk(op, (x,), **extra)
        return mk("unknown", attr=f"nn.{type(mod).__name__}")


def _const(v):
    """A Python value from a traced argument (a const Expr's number, or the value itself)."""
    if isinstance(v, Expr) and v.op == "const":
        return v.attr
    return v


def _last_dim_only(norm_shape) -> bool:
    """Whether a normalized_shape argument names only the last dim: ``x.shape[-1:]``, ``(N,)``, ``[N]`` or ``N``."""
    if isinstance(norm_shape, int):
        return True
    if isinstance(norm_shape, (tuple, list)):
        return len(norm_shape) == 1
    if isinstance(norm_shape, torch.fx.Node) and _target_name(norm_shape.target) == "getitem":
        index = norm_shape.args[1]
        return index == slice(-1, None, None) or (isinstance(index, slice) and index.start == -1)
    return False


def _init_source(module) -> tuple[str | None, list[str]]:
    """(the text of Model.__init__, the reference's module-level lines it needs) from the reference file."""
    path = Path(module.__file__)
    text = path.read_text()
    tree = python_ast.parse(text)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None) if cls else None
    if init is None:
        return None, []
    src = ast.get_source_segment(text, init, padded=True)
    args = {a.arg for a in ast.walk(init.args) if isinstance(a, ast.arg)}
    used = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)} - args
    needed = []
    for stmt in tree.body:
        names = set()
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names = {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.Assign):
            names = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        if names & used and not (isinstance(stmt, ast.Import) and names <= {"torch"}):
            needed.append(ast.get_source_segment(text, stmt))
    return src, needed


# torch.fx's tracers patch torch.nn.Module.__call__ and __getattr__ for the duration of a trace, process-wide: two
# threads of a batch tracing at once can restore each other's patch, which then outlives both traces and breaks
# every later module call ("NameError: module is not installed as a submodule"). One trace at a time.
TRACE_LOCK = threading.Lock()


def meta_model(path, config: dict | None = None):
    """(spec, Model in eval mode, inputs) of the reference at ``path`` built on the meta device at ``config``
    (default: SMALL_CONFIG, else the first config), DTYPES applied. Raises TraceError saying what failed."""
    from tileagent.evaluator.errors import SpecError

    try:
        spec = load_spec(path, check=False)
    except SpecError as e:
        raise TraceError(f"the reference does not load: {e}") from e
    config = config if config is not None else (spec.small_config or spec.configs[0])
    try:
        init = spec.init_inputs(config)
        with torch.device("meta"):
            model = spec.module.Model(*init)
        if isinstance(spec.dtypes, torch.dtype):
            model = model.to(spec.dtypes)
        model.eval()
        inputs = spec.sample_inputs(config, 0, "meta")
        inputs = [t.to(spec._input_dtype(k, t)) for k, t in enumerate(inputs)]
    except Exception as e:  # noqa: BLE001 - any failure of the user's file is reported in words
        raise TraceError(f"building Model and its inputs on the meta device failed: {type(e).__name__}: {e}") from e
    return spec, model, inputs


def trace_reference(path, config: dict | None = None) -> Traced:
    """Load the reference at ``path`` and trace its forward at ``config`` (default: SMALL_CONFIG, else the first).

    Raises:
        TraceError: the file does not load as a spec, or torch.fx cannot trace its forward.
    """
    from torch.fx import symbolic_trace
    from torch.fx.passes.shape_prop import ShapeProp

    spec, model, inputs = meta_model(path, config)
    try:
        with TRACE_LOCK:
            gm = symbolic_trace(model)
        with contextlib.redirect_stderr(io.StringIO()):  # ShapeProp prints the traceback of an op without a meta
            ShapeProp(gm).propagate(*inputs)  # kernel before it raises (played LLM 48b: aten::bincount at start)
    except Exception as e:  # noqa: BLE001
        raise TraceError(f"torch.fx could not trace Model.forward: {type(e).__name__}: {str(e).splitlines()[0]}") \
            from e
    output = _Converter(gm).run()
    names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    forward_params = str(inspect.signature(type(model).forward))[1:-1]
    init_src, prelude = _init_source(spec.module)
    return Traced(spec, config, model, output, names, [tuple(t.shape) for t in inputs], [t.dtype for t in inputs],
                  init_src, prelude, forward_params, in_place(gm))


def in_place(gm: torch.fx.GraphModule) -> list[str]:
    """The in-place ops of a traced forward that the expression DAG cannot follow: a write (``y[k] = v``, a call of a
    name ending in one underscore, ``mul_``; one with ``inplace=True``; a module built with ``inplace=True``) to a view
    (``y[:, 0].mul_(3)`` changes ``y``) or to a value that something else reads (which then sees the old value in
    the DAG). The DAG follows values, not writes, so the families decline these (the fusion lowering follows them)."""
    out = []
    for node in gm.graph.nodes:
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if node.op == "call_module":
            mod = gm.get_submodule(node.target)
            writes, name = getattr(mod, "inplace", False) is True, f"nn.{type(mod).__name__}(inplace=True)"
        else:
            writes = node.op in ("call_function", "call_method") and (name == "setitem" or (
                name.endswith("_") and not name.endswith("__")) or node.kwargs.get("inplace") is True)
        dst = node.args[0] if writes and node.args else None
        if isinstance(dst, torch.fx.Node) and (any(u is not node for u in dst.users) or dst.op != "placeholder" and (
                _target_name(dst.target) in LAYOUT | {"narrow", "select", "chunk", "split", "unbind", "diagonal"})):
            out.append(name)
    return out



def strip(e: Expr) -> Expr:
    """``e`` without the floating casts around it."""
    while isinstance(e, Expr) and e.op == "cast":
        e = e.args[0]
    return e


