"""Lazy values of the fusion lowering: the ATen graph as functions from an index to DSL text.

In: an ``AtenTrace``. Out: ``Builder(trace).run() -> [V]`` (the outputs) with ``Builder.globals`` (the inputs and
parameters, kernel arguments) and ``Builder.reduces`` (the reductions and top-k, in graph order). ``V.load(cx, idx)``
gives the DSL text of one element at index ``idx`` (a list of ``Lin``) inside a ``T.Parallel`` body being written
(``cx``: ``fusion_writer.Cx``, which owns memory reads, reductions and temporaries).

Views, permutes, slices, chunk/split, cat, expand, as_strided, diagonal, unfold and gathers (a label's logit,
embedding rows; ``views.py``), casts, where and factories (full, arange: masks such as ``tril(ones(S, S))``) only
rewrite indices; pointwise ops write float32 math (rounded to fp16/bf16 after each op where eager does); reductions
(sum, amax, amin, mean, var as two passes) and ``topk`` (argmax / argmin, and the indices of max / min along a dim, as
a top-1) are nodes the planner places in kernels. An in-place op (``copy_``, ``sub_``) is lowered out of place, and
later reads of the tensor it wrote read its result.

Guarantees: an op without a lowering raises ``Unsupported`` naming it and the reference's source line.
"""

from __future__ import annotations

import math
import operator
import re

import torch

from tileagent.drafters.builtin.aten import AtenTrace, source_line
from tileagent.drafters.builtin.index import ONE, Lin, Size, Unsupported, prod, ravel
from tileagent.drafters.builtin.pointwise_text import (expm1, log1p, power, reduction_division, round_half_even,
                                                       round_small, scalar_division)

aten = torch.ops.aten
prims = torch.ops.prims


# -- lazy values -------------------------------------------------------------------------------------------------------

FLOAT, INT, BOOL = "f", "i", "b"


def kind_of(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return BOOL
    return FLOAT if dtype.is_floating_point else INT


class V:
    """A lazy tensor: ``shape`` (Sizes), ``dtype``; ``load(cx, idx)`` gives the DSL text of one element."""

    shape: list
    dtype: torch.dtype
    node = None

    def load(self, cx, idx):
        key = (id(self), tuple(i.key() for i in idx), cx.narrow_key() if hasattr(cx, "narrow_key") else ())
        if key in cx.memo:
            return cx.memo[key]
        text = self.compute(cx, idx)
        if not _simple(text):
            text = cx.let(text)
        cx.memo[key] = text
        return text

    def compute(self, cx, idx):
        raise NotImplementedError


def _uses(text: str, name: str) -> bool:
    """Whether ``text`` mentions the identifier ``name``."""
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def _simple(text: str) -> bool:
    return text.replace("_", "").replace(".", "").replace("-", "").isalnum() or (
        text.endswith("]") and text.count("[") == 1)


class Global(V):
    """A kernel argument: an input or a parameter (read from global memory)."""

    def __init__(self, name, ref, shape, dtype, node):
        self.name, self.ref, self.shape, self.dtype, self.node = name, ref, shape, dtype, node

    def compute(self, cx, idx):
        return cx.read_global(self, ravel(idx, self.shape))


class Const(V):
    def __init__(self, value, dtype, shape=()):
        self.value, self.dtype, self.shape = value, dtype, list(shape)

    def compute(self, cx, idx):
        return literal(self.value, kind_of(self.dtype))

    def load(self, cx, idx):
        return self.compute(cx, idx)


def literal(value, kind=FLOAT) -> str:
    if kind == BOOL:
        return "True" if value else "False"
    if kind == INT:
        return str(int(value))
    value = float(value)
    if math.isinf(value):
        return "T.infinity(\"float32\")" if value > 0 else "-T.infinity(\"float32\")"
    if math.isnan(value):
        return "float(\"nan\")"
    return repr(value)


class Fn(V):
    """A value given by a Python function of the index (views, pointwise ops)."""

    def __init__(self, shape, dtype, fn, node=None):
        self.shape, self.dtype, self.fn, self.node = shape, dtype, fn, node

    def compute(self, cx, idx):
        return self.fn(cx, idx)


class Reduce(V):
    """A reduction realized per row of a kernel: ``op`` in sum/amax/amin over ``dims`` of ``src``."""

    def __init__(self, op, src: V, dims, keepdim, dtype, node, value=None):
        self.op, self.src, self.dims, self.keepdim, self.dtype, self.node = op, src, sorted(dims), keepdim, dtype, node
        self.value = value or src  # the element that is reduced (var: the squared deviation)
        n = len(src.shape)
        self.kept = [d for d in range(n) if d not in self.dims]
        self.shape = [ONE if d in self.dims else src.shape[d] for d in range(n)] if keepdim else \
            [src.shape[d] for d in self.kept]
        self.post = None  # a function of the reduced text: var divides by the count, mean is decomposed before
        self.online = None  # a sum of exp(x - b(amax(x))): (amax, x, b, shape of x - b), see Builder.shifted_exp
        self.var_of = None  # var: the mean of ``src`` whose squared deviations this sums

    def kept_index(self, idx):
        if self.keepdim:
            return [idx[d] for d in self.kept]
        return list(idx)

    def compute(self, cx, idx):
        return cx.read_reduction(self, self.kept_index(idx))


class TopK(V):
    """``topk(src, k)`` over the last dim: a pair of outputs (values, int64 indices) the kernel writes to the model's
    outputs or to workspaces ``ws`` (by part), which later kernels read like inputs (a top-k filter's k-th value)."""

    def __init__(self, src, k, node, index: int):
        self.src, self.k, self.node, self.dtype = src, k, node, src.dtype
        self.shape = list(src.shape[:-1]) + [Size(k, str(k))]
        self.ws = {0: f"tkv{index}", 1: f"tki{index}"}  # index: its place among the plan's reductions
        self.outs: dict = {}  # part -> the model's output number, where the reference returns that part


class TopKPart(V):
    """One output of a ``TopK`` (``which`` 0: values, 1: int64 indices), as a reference output of ``shape`` (the
    kernel's (rows, k) in the same order: ``argmax``'s (rows,) is k = 1 squeezed)."""

    def __init__(self, topk, which, shape=None):
        self.topk, self.which = topk, which
        self.shape = topk.shape if shape is None else shape
        self.dtype = topk.dtype if which == 0 else torch.int64
        self.node = topk.node

    def compute(self, cx, idx):
        """Other math reads the part from its workspace, written by the top-k's kernel (an earlier one)."""
        name = self.topk.ws[self.which]
        return Global(name, name, self.shape, self.dtype, self.node).compute(cx, idx)


def _where(node, path) -> str:
    line = source_line(node, path) if node is not None else ""
    name = f"aten.{node.target}" if node is not None and not isinstance(node.target, str) else str(node)
    if node is not None and hasattr(node.target, "_schema"):
        name = f"aten::{node.target._schema.name.split('::')[-1]}"
    return f"{name} at {line}" if line else name


# -- the ATen graph -> lazy values -----------------------------------------------------------------------------------

POINTWISE_1 = {
    "exp": "T.exp2({a} * LOG2E)", "exp2": "T.exp2({a})", "log": "T.log({a})", "log2": "T.log2({a})",
    "sqrt": "T.sqrt({a})", "rsqrt": "T.rsqrt({a})", "abs": "T.abs({a})", "tanh": "T.tanh({a})", "erf": "T.erf({a})",
    "sin": "T.sin({a})", "cos": "T.cos({a})",
    "sigmoid": "1.0 / (1.0 + T.exp2({a} * -LOG2E))", "neg": "(-{a})", "reciprocal": "(1.0 / {a})",
    "relu": "T.max({a}, 0.0)", "floor": "T.floor({a})", "ceil": "T.ceil({a})", "trunc": "T.if_then_else({a} < 0.0, "
    "T.ceil({a}), T.floor({a}))",
    "log1p": "", "expm1": "",  # written in Builder.pointwise (pointwise_text: exact near 0)
    "sign": "T.if_then_else({a} > 0.0, 1.0, T.if_then_else({a} < 0.0, -1.0, 0.0))",
    "round": "",  # written in Builder.pointwise (ties to even, with temporaries)
    "silu": "{a} / (1.0 + T.exp2({a} * -LOG2E))",
}
BINARY_F = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
            "maximum": "T.max({a}, {b})", "minimum": "T.min({a}, {b})", "pow": "T.pow({a}, {b})",
            "atan2": "T.atan2({a}, {b})", "fmod": "T.fmod({a}, {b})", "remainder": None}
SCALAR_OPS = {"truediv": "/", "mul": "*", "add": "+", "sub": "-"}  # Python float arithmetic on sizes
COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
LOGICAL = {"logical_and": "and", "logical_or": "or", "bitwise_and": "and", "bitwise_or": "or"}
VIEW_OPS = {"view", "_unsafe_view", "reshape", "alias", "clone", "lift_fresh_copy", "detach", "contiguous",
            "_reshape_alias"}


def _checks_only(graph) -> set:
    """The nodes that only feed input checks (``_assert_async``: one_hot's "class values must be non-negative"): a
    kernel does not raise, and the evaluator's inputs are valid."""
    out: set = set()
    for node in reversed(graph.nodes):
        if node.op == "call_function" and (_opname(node) in ("_assert_async", "_assert_scalar") or node.users and all(
                u in out for u in node.users)):
            out.add(node)
    return out


def _is_view(node) -> bool:
    """Whether ``node``'s result aliases its first operand's storage (a view: its schema's return is an alias that
    it does not write, as ``view``, ``slice``, ``diagonal``, ``transpose`` are)."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    alias = schema.returns[0].alias_info if schema is not None and schema.returns else None
    return alias is not None and not alias.is_write


def _opname(node) -> str:
    t = node.target
    if hasattr(t, "_schema"):
        return t._schema.name.split("::")[-1]
    return getattr(t, "__name__", str(t))


class Builder:
    """fx graph (symbolic ATen) -> lazy values; ``outputs`` and the kernel arguments (``globals``)."""

    def __init__(self, trace: AtenTrace):
        self.t = trace
        self.env: dict = {}
        self.globals: list[Global] = []
        self.reduces: list[V] = []
        self.order = {n: k for k, n in enumerate(trace.gm.graph.nodes)}  # graph position (in-place ops' checks)
        # a graph that ranks values (top-k) computes exp with the function eager uses (expf; torch.exp on the CPU),
        # not exp2(x * log2(e)): equal or adjacent values then compare as in eager, and the selection follows
        self.ranked = any(_opname(n) == "topk" for n in trace.gm.graph.nodes if n.op == "call_function")

    def size(self, x) -> Size:
        if isinstance(x, torch.fx.Node):
            x = self.env[x]
        return Size.of(x, self.t.hints)

    def shape_of(self, node) -> list[Size]:
        return [Size.of(s, self.t.hints) for s in node.meta["val"].shape]

    def fail(self, node, what=None):
        raise Unsupported(f"{what or 'the op ' + _opname(node)} ({_where(node, self.t.path)})")

    def run(self) -> list:
        from tileagent.drafters.builtin.templates.common import param_ref

        placeholders = iter(self.t.places)
        out = None
        checks = _checks_only(self.t.gm.graph)
        for node in self.t.gm.graph.nodes:
            if node in checks:
                continue
            if node.op == "placeholder":
                kind, ref = next(placeholders)
                val = node.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    self.env[node] = val
                    continue
                name = _safe(ref if kind == "param" else self.t.input_names[ref])
                g = Global(name, param_ref(self.t.model, ref) if kind == "param" else self.t.input_names[ref],
                           self.shape_of(node), val.dtype, node)
                g.origin, g.ref_key = kind, ref
                self.globals.append(g)
                self.env[node] = g
            elif node.op == "call_function":
                self.env[node] = self.convert(node)
                target = self.mutated(node)
                if target is not None:
                    self.env[target] = self.env[node]  # later reads of the tensor see its new value, as in eager
            elif node.op == "output":
                out = node.args[0]
        outs = out if isinstance(out, (list, tuple)) else [out]
        values = []
        for o in outs:
            v = self.env[o] if isinstance(o, torch.fx.Node) else o
            if not isinstance(v, V):
                raise Unsupported("an output that is not a tensor")
            values.append(v)
        return values

    # -- conversion ---------------------------------------------------------------------------------------------

    def mutated(self, node):
        """The graph value an in-place op (``sub_``, ``copy_``, ``clamp_min_``: its schema writes its first operand)
        overwrites, or None for an op that writes nothing. The op is lowered out of place and the value's later
        readers read the result, which is exact when the overwritten tensor is a tensor of its own: not an input (the
        kernel would have to write it back), not a view of another tensor (its base would change too) and with no view
        of it read after the write (the view was taken of the old value). Those cases raise ``Unsupported``."""
        schema = getattr(node.target, "_schema", None)
        alias = schema.arguments[0].alias_info if schema is not None and schema.arguments else None
        if alias is None or not alias.is_write or not node.args or not isinstance(node.args[0], torch.fx.Node):
            return None
        dst = node.args[0]
        if dst.op == "placeholder":
            self.fail(node, f"an in-place {_opname(node)} of an input")
        if _is_view(dst):
            self.fail(node, f"an in-place {_opname(node)} of a view")
        order = self.order
        for view in dst.users:
            if view is not node and _is_view(view) and order[view] < order[node] and any(
                    order[u] > order[node] for u in view.users):
                self.fail(node, f"an in-place {_opname(node)} of a tensor whose view is read after it")
        return dst

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return [self.arg(x) for x in a]
        return a

    def convert(self, node):
        name = _opname(node)
        args = [self.arg(a) for a in node.args]
        kw = {k: self.arg(v) for k, v in node.kwargs.items()}
        val = node.meta.get("val")
        if node.target is operator.getitem:
            return args[0][args[1]]
        if self.mutated(node) is not None:
            name = name[:-1]  # computed out of place; ``run`` rebinds the tensor it wrote to the result
        if name in ("max", "min") and isinstance(val, (list, tuple)) and len(args) > 1:
            from tileagent.drafters.builtin import ranking  # (ranking.py builds on this module)

            return ranking.max_with_indices(self, node, name, args)
        if name in ("argmax", "argmin"):
            from tileagent.drafters.builtin import ranking

            return ranking.arg_extreme(self, node, name, args, kw)
        if not isinstance(val, (torch.Tensor, list, tuple)) or name in ("sym_size", "sym_float", "sym_int"):
            return self.scalar(node, name, args)
        if not isinstance(val, torch.Tensor) and name not in ("split_with_sizes", "split", "topk", "cummax",
                                                                "cummin"):
            self.fail(node)
        shape, dtype = (self.shape_of(node), val.dtype) if isinstance(val, torch.Tensor) else (None, None)
        if name in VIEW_OPS and name not in ("view", "_unsafe_view", "reshape", "_reshape_alias"):
            return args[0]
        reshape = name in ("view", "_unsafe_view", "reshape", "_reshape_alias", "squeeze", "unsqueeze")
        if isinstance(args[0], TopKPart) and reshape and prod(shape).v == prod(args[0].shape).v:
            return TopKPart(args[0].topk, args[0].which, shape)  # the same elements in the same order
        from tileagent.drafters.builtin import scan  # (scan.py builds on this module)

        if isinstance(args[0], scan.ScanOut) and reshape and scan.reshaped(args[0], shape) is not None:
            return scan.reshaped(args[0], shape)
        if name in scan.OPS:
            return scan.scan_value(self, node, name, args, kw)
        if name == "flip":
            return scan.flip(args[0], {d % len(args[0].shape) for d in args[1]}, shape, dtype, node)
        from tileagent.drafters.builtin import views  # (views.py builds on this module)

        out = views.rewrite(self, node, name, args, kw, shape, dtype, val)
        if out is not None:
            return out
        if name in ("_to_copy", "convert_element_type", "to"):
            return self.cast(node, args[0], dtype, shape)
        if name in ("empty", "empty_like", "new_empty", "empty_strided", "empty_permuted"):
            return Const(0, dtype, shape)  # an unused output of a decomposition (saved statistics)
        if name in ("full", "scalar_tensor", "full_like", "new_full", "zeros", "ones", "zeros_like", "ones_like",
                    "new_zeros", "new_ones"):
            value = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "ones": 1, "ones_like": 1, "new_ones": 1}.get(name)
            if value is None:
                value = args[1] if name in ("full", "full_like", "new_full") else args[0]
            if isinstance(value, (torch.SymInt, torch.SymFloat)):
                self.fail(node, "a fill with a symbolic value")
            return Const(value, dtype, shape)
        if name in ("arange", "iota"):
            start, step = 0, 1
            if name == "arange":
                if len(args) == 1:
                    start = 0
                else:
                    start = args[0]
                    step = args[2] if len(args) > 2 else kw.get("step", 1)
            else:
                start, step = kw.get("start", 0), kw.get("step", 1)
            start, step = self.size(start), self.size(step)
            return Fn(shape, dtype, lambda cx, idx, a=start, b=step: cx.index_value(idx[0].scale(b) + Lin.c(a), dtype),
                      node).with_ins([])
        if name in ("mm", "bmm", "mv", "addmm"):
            from tileagent.drafters.builtin import matvec  # (matvec.py builds on this module)

            return matvec.product(self, node, name, args, kw, shape, dtype)
        if name in ("sum", "amax", "amin", "var", "mean", "prod", "any", "all", "max", "min") and \
                isinstance(val, torch.Tensor):
            return self.reduction(node, name, args, kw, shape, dtype)
        if name in ("scatter_add", "scatter_reduce", "scatter", "index_put"):
            from tileagent.drafters.builtin import scatter  # (scatter.py builds on this module)

            return scatter.lower(self, node, name, args, kw, shape, dtype)
        if name == "topk":
            src, k = args[0], args[1]
            d = (args[2] if len(args) > 2 else kw.get("dim", -1)) % len(src.shape)
            largest = args[3] if len(args) > 3 else kw.get("largest", True)
            if d != len(src.shape) - 1 or not largest or not isinstance(k, int) or k > 64:
                self.fail(node, "topk other than the k (<= 64) largest along the last dim")
            from tileagent.drafters.builtin import ranking

            tk = ranking.top(self, src, k, node)
            return [TopKPart(tk, 0), TopKPart(tk, 1)]
        return self.pointwise(node, name, args, kw, shape, dtype)

    def scalar(self, node, name, args):
        """A size computed in the graph (sym_size, arithmetic on SymInts, sym_float)."""
        val = node.meta.get("val")
        if name == "sym_size":
            return self.size(val)
        if isinstance(val, torch.SymInt):
            return Size.of(val, self.t.hints)
        if name == "sym_float" and isinstance(args[0], Size):
            return ScalarF(f"(1.0 * {args[0].t})")
        if isinstance(val, (int, float)):
            return val
        if isinstance(val, torch.SymFloat) and name in SCALAR_OPS and len(args) == 2 and all(
                isinstance(a, (ScalarF, Size, int, float)) for a in args):
            # a float of sizes (label smoothing's eps / C): Python text over the size symbols, as eager's scalar
            a, b = (a.text() if isinstance(a, ScalarF) else f"(1.0 * {a.t})" if isinstance(a, Size) else
                    literal(a) for a in args)
            return ScalarF(f"({a} {SCALAR_OPS[name]} {b})")
        self.fail(node, f"a scalar computation {name}")

    def cast(self, node, src, dtype, shape):
        sk, dk = src.kind if hasattr(src, "kind") else kind_of(src.dtype), kind_of(dtype)

        def load(cx, idx, s=src):
            if dk == INT and sk == FLOAT and dtype.itemsize <= 4:
                # through int32, not int64 (a 64-bit conversion is several GPU instructions); the two differ only
                # where the value is outside int32, where torch's own conversion is undefined
                return f"T.cast(T.cast({s.load(cx, idx)}, \"int32\"), \"{DT[dtype]}\")" if dtype != torch.int32 \
                    else f"T.cast({s.load(cx, idx)}, \"int32\")"
            text = cx.convert(s, s.load(cx, idx), dk)
            if dk == FLOAT and dtype in (torch.float16, torch.bfloat16) and kind_of(s.dtype) == FLOAT and \
                    s.dtype.itemsize > dtype.itemsize:
                return f"T.cast(T.cast({text}, \"{DT[dtype]}\"), \"float32\")"  # rounds as torch does
            if dk == INT and sk == FLOAT:
                return f"T.cast({text}, \"{DT[dtype]}\")"
            return text
        return Fn(shape, dtype, load, node).with_ins([src])

    def reduction(self, node, name, args, kw, shape, dtype):
        src = args[0]
        n = len(src.shape)
        dims = args[1] if len(args) > 1 else kw.get("dim")
        if name in ("max", "min") and (dims is None or isinstance(dims, int)) and len(args) > 1:
            self.fail(node, f"{name} along a dim with indices (argmax)")
        if dims is None or dims == []:
            dims = list(range(n))
        dims = [dims] if isinstance(dims, int) else list(dims)
        dims = sorted({d % n for d in dims}) if n else []
        keepdim = bool(args[2] if len(args) > 2 and not isinstance(args[2], (float,)) and name != "var"
                       else kw.get("keepdim", False))
        if node.target in (prims.sum.default, prims.amax.default, prims.amin.default):
            keepdim = False
        if name in ("any", "all"):
            self.fail(node)
        if name == "mean":
            count = prod(src.shape[d] for d in dims)
            r = Reduce("sum", src, dims, keepdim, torch.float32, node)
            r.post = lambda t, c=count: f"({t} * (1.0 / {c.t}))"
            r.ins = [src]
            self.reduces.append(r)
            return r
        if name == "var":
            correction = args[2] if len(args) > 2 else kw.get("correction", 1)
            correction = 1 if correction is None else correction
            count = prod(src.shape[d] for d in dims)
            mean = Reduce("sum", src, dims, True, torch.float32, node)
            mean.post = lambda t, c=count: f"({t} * (1.0 / {c.t}))"
            mean.ins = [src]
            self.reduces.append(mean)

            def dev(cx, idx, s=src, m=mean):
                a = cx.convert(s, s.load(cx, idx), FLOAT)
                b = m.load(cx, [Lin.c(0) if d in m.dims else i for d, i in enumerate(idx)])
                return f"(({a} - {b}) * ({a} - {b}))"
            value = Fn(src.shape, torch.float32, dev, node).with_ins([src, mean])
            r = Reduce("sum", src, dims, keepdim, torch.float32, node, value=value)
            corr = float(correction)
            r.post = lambda t, c=count, k=corr: f"({t} * (1.0 / ({c.t} - {k})))"
            r.ins = [value]
            r.var_of = mean  # the kernel may compute both in one pass over a long row (fusion_onepass.moments)
            self.reduces.append(r)
            return r
        op = {"sum": "sum", "amax": "amax", "amin": "amin", "max": "amax", "min": "amin", "prod": "prod"}[name]
        r = Reduce(op, src, dims, keepdim, dtype, node)
        r.ins = [src]
        if op == "sum":
            r.online = self.shifted_exp(node.args[0], dims)
        self.reduces.append(r)
        return r

    def shifted_exp(self, arg, dims):
        """``(m, x, b, shape)`` when the summed value is ``exp(x - b)`` with ``b`` computed from ``m = amax(x)`` over
        the same dims (softmax, log_softmax, logsumexp, cross-entropy after decomposition), all float32; else None.
        The kernel may then compute both in one pass over x (``fusion_writer.KernelWriter.online``)."""
        if not isinstance(arg, torch.fx.Node) or arg.target is not aten.exp.default:
            return None
        sub = arg.args[0]
        if not isinstance(sub, torch.fx.Node) or sub.target is not aten.sub.Tensor or len(sub.args) != 2 or \
                sub.kwargs.get("alpha", 1) != 1 or not all(isinstance(a, torch.fx.Node) for a in sub.args):
            return None
        x, b = (self.env[a] for a in sub.args)
        values = [x, b, self.env[sub], self.env[arg]]
        if not all(isinstance(v, V) and v.dtype == torch.float32 for v in values):
            return None
        for m in self.reduces:
            if isinstance(m, Reduce) and m.op == "amax" and m.src is x and m.value is x and m.dims == sorted(dims) \
                    and _reads(b, m):
                return m, x, b, self.env[sub].shape
        return None

    def pointwise(self, node, name, args, kw, shape, dtype):
        out_kind = kind_of(dtype)
        tensors = [a for a in args if isinstance(a, V)]
        if name in POINTWISE_1 or name in BINARY_F or name in COMPARE or name in LOGICAL or name in (
                "where", "clamp", "clamp_min", "clamp_max", "logical_not", "bitwise_not", "rsub", "true_divide",
                "gelu", "fill", "lerp", "copy", "masked_fill", "isnan"):
            pass
        else:
            self.fail(node)
        shapes = shape

        def operand(cx, a, idx, kind):
            if isinstance(a, V):
                return cx.convert(a, a.load(cx, _bcast(idx, a.shape, shapes)), kind)
            if isinstance(a, ScalarF):
                return a.text()
            if isinstance(a, Size):
                return a.t if kind == INT else f"(1.0 * {a.t})"
            if isinstance(a, bool):
                return literal(a, BOOL if kind == BOOL else FLOAT)
            if isinstance(a, (int, float)):
                return literal(a, kind)
            raise Unsupported(f"an operand {a!r} of {_where(node, self.t.path)}")

        def load(cx, idx):
            if name in POINTWISE_1:
                a = operand(cx, args[0], idx, FLOAT)
                if name == "round" and len(args) > 1 or kw.get("decimals"):
                    raise Unsupported(f"round with decimals ({_where(node, self.t.path)})")
                if name == "round":
                    return round_half_even(cx, a)
                if name in ("log1p", "expm1"):
                    return log1p(cx, a) if name == "log1p" else expm1(cx, a)
                if name == "exp" and self.ranked:
                    return f"T.exp({a})"
                if kind_of(args[0].dtype) != FLOAT and name in ("neg", "abs"):
                    a = operand(cx, args[0], idx, INT)
                    return f"(-{a})" if name == "neg" else f"T.abs({a})"
                return POINTWISE_1[name].format(a=a)
            if name in ("gelu",):
                a = operand(cx, args[0], idx, FLOAT)
                if kw.get("approximate", "none") == "tanh":
                    return f"(0.5 * {a} * (1.0 + T.tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))))"
                return f"(0.5 * {a} * (1.0 + T.erf({a} * 0.7071067811865476)))"
            if name == "isnan":
                a = operand(cx, args[0], idx, FLOAT)
                return f"({a} != {a})"
            if name in COMPARE:
                k = FLOAT if any(kind_of(a.dtype) == FLOAT for a in tensors) or any(
                    isinstance(a, float) for a in args[:2]) else INT
                return f"({operand(cx, args[0], idx, k)} {COMPARE[name]} {operand(cx, args[1], idx, k)})"
            if name in LOGICAL:
                if out_kind != BOOL:
                    self.fail(node, f"{name} on integers")
                return f"({operand(cx, args[0], idx, BOOL)} {LOGICAL[name]} {operand(cx, args[1], idx, BOOL)})"
            if name in ("logical_not", "bitwise_not"):
                if out_kind != BOOL:
                    self.fail(node, f"{name} on integers")
                return f"(not {operand(cx, args[0], idx, BOOL)})"
            if name == "where":
                c = operand(cx, args[0], idx, BOOL)
                return f"T.if_then_else({c}, {operand(cx, args[1], idx, out_kind)}, " \
                       f"{operand(cx, args[2], idx, out_kind)})"
            if name == "masked_fill":
                c = operand(cx, args[1], idx, BOOL)
                return f"T.if_then_else({c}, {operand(cx, args[2], idx, out_kind)}, " \
                       f"{operand(cx, args[0], idx, out_kind)})"
            if name in ("clamp", "clamp_min", "clamp_max"):
                lo = args[1] if name in ("clamp", "clamp_min") and len(args) > 1 else kw.get("min")
                hi = args[2] if name == "clamp" and len(args) > 2 else (args[1] if name == "clamp_max" else
                                                                        kw.get("max"))
                # clamp(round(x), lo, hi) with integer bounds within 2**22 is round(clamp(x, lo, hi)), rounded with
                # one added constant (round_small): 4 fewer compares and selects an element (int8 quantization)
                small = getattr(args[0], "round_of", None) is not None and dtype == torch.float32 and all(
                    type(v) in (int, float) and float(v).is_integer() and abs(v) <= 2 ** 22 for v in (lo, hi))
                a = operand(cx, args[0].round_of if small else args[0], idx, out_kind)
                if lo is not None:
                    a = f"T.max({a}, {operand(cx, lo, idx, out_kind)})"
                if hi is not None:
                    a = f"T.min({a}, {operand(cx, hi, idx, out_kind)})"
                return round_small(cx, a) if small else a
            if name in ("fill", "copy"):
                return operand(cx, args[1], idx, out_kind)
            if name == "rsub":
                return f"({operand(cx, args[1], idx, out_kind)} - {operand(cx, args[0], idx, out_kind)})"
            if name == "lerp":
                a, b, w = (operand(cx, x, idx, FLOAT) for x in args[:3])
                return f"({a} + {w} * ({b} - {a}))"
            k = out_kind if name not in ("div", "true_divide") else FLOAT
            if name == "div" and (kw.get("rounding_mode") is not None):
                self.fail(node, "div with a rounding mode")
            if k == BOOL:
                self.fail(node, f"{name} on booleans")
            a, b = operand(cx, args[0], idx, k), operand(cx, args[1], idx, k)
            if name in ("div", "true_divide") and type(args[1]) is float and isinstance(args[0], V) and \
                    math.isfinite(args[1]) and args[1] != 0:
                return scalar_division(a, b)
            if name in ("div", "true_divide") and isinstance(args[1], Reduce) and args[1].dtype == torch.float32:
                return reduction_division(a, b)
            if name in ("fmod", "remainder") and k == INT:  # % floors; fmod truncates (torch.roll's indices)
                m = cx.let(f"({a} % {b})")
                return m if name == "remainder" else \
                    f"T.if_then_else({m} != 0 and (({a} < 0) != ({b} < 0)), {m} - {b}, {m})"
            if name == "remainder":  # floats: torch's, the exact fmod moved to the divisor's sign (a phase wrap)
                m = cx.let(f"T.fmod({a}, {b})")
                return f"T.if_then_else({m} != 0.0 and (({m} < 0.0) != ({b} < 0.0)), {m} + {b}, {m})"
            if name == "pow":
                p = args[1]
                if isinstance(p, (int, float)) and not isinstance(p, bool):
                    return power(a, p)
                if isinstance(args[0], (int, float)):
                    return f"T.exp2({b} * {math.log2(args[0])!r})"
            return BINARY_F.get(name, BINARY_F.get("div")).format(a=a, b=b)

        exact = name in ("abs", "neg", "relu", "maximum", "minimum", "where") and all(
            isinstance(a, V) and a.dtype == dtype and not (isinstance(a, Reduce) and a.op == "sum")
            for a in (args[1:3] if name == "where" else args))  # a float16 sum is read as its float32 accumulation
        if dtype in (torch.float16, torch.bfloat16) and not exact:
            # eager rounds every op's result to the tensor's dtype; the ops in ``exact`` return one of their
            # operands (up to the sign), which are values of that dtype already: the rounding would change nothing
            # and costs a conversion there and back per element (``round16``: the candidate's macro, which keeps
            # the float32 value when its knob ROUND_STEPS is off, as torch.compile does)
            def rounded(cx, idx, inner=load):
                return f"round16({inner(cx, idx)}, \"{DT[dtype]}\")"
            return Fn(shape, dtype, rounded, node).with_ins(tensors)
        out = Fn(shape, dtype, load, node).with_ins(tensors)
        if name == "round" and dtype == torch.float32 and isinstance(args[0], V) and args[0].dtype == torch.float32:
            out.round_of = args[0]  # a clamp to small integer bounds after it rounds after clamping (round_small)
        return out


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def _reads(v, target) -> bool:
    """Whether the lazy value ``v`` reads ``target`` (through its operands)."""
    seen, stack = set(), [v]
    while stack:
        x = stack.pop()
        if x is target:
            return True
        if id(x) in seen or isinstance(x, (Reduce, TopK)) and x is not v:
            continue
        seen.add(id(x))
        stack.extend(a for a in getattr(x, "ins", ()) if isinstance(a, V))
    return False


def _bcast(idx, shape, out_shape):
    """The index of an operand of ``shape`` broadcast to ``out_shape``."""
    n = len(shape)
    tail = idx[len(idx) - n:] if n else []
    return [Lin.c(0) if s.v == 1 else i for s, i in zip(shape, tail)]


class ScalarF:
    """A float computed from sizes (``sym_float(n)``, arithmetic on it): its Python text over the size symbols."""

    def __init__(self, text: str):
        self._text = text

    def text(self):
        return self._text


def _with_ins(self, ins):
    self.ins = list(ins)
    return self


V.with_ins = _with_ins
V.ins = ()
DT = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
      torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8",
      torch.bool: "bool", torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in str(name))


V.kind = property(lambda self: kind_of(self.dtype))
