"""The fusion lowering: an ATen graph (``aten.trace_aten``) -> DSL kernels, Inductor-like.

In: an ``AtenTrace``. Out: ``plan(trace) -> Plan`` (the kernels: each a (rows X, columns R) iteration domain with its
reductions and outputs) and ``Plan.render(knobs) -> str``, the candidate module's text.

Model. Every tensor of the graph is a lazy value ``V.load(cx, idx) -> DSL text`` of its own n-d index; an index is a
``Lin`` (a linear form over the kernel's loop atoms with floor-division / modulo atoms, simplified by value ranges as
Inductor does). Views, permutes, slices, chunk/split, cat, expand, as_strided, casts, where, factories (full, arange:
masks such as ``tril(ones(S, S))``) and gathers (a label's logit, embedding rows) only rewrite indices; pointwise ops
write float32 math; reductions (sum, amax, amin, var) are realized in the kernel whose domain is their input with the
kept dims as rows and the reduced dims as columns, in a float32 fragment per row; ``topk`` (small k) runs k
max/argmax rounds over a row in registers. Kernels are grouped greedily: a reduction joins the previous kernel when
its (X, R) domain is the same; a value read by a later kernel is stored to a float32 buffer that the next kernel
reads; an output is written by the kernel of its last reduction when it has that domain's size (X * R or X), else by
a pointwise kernel of its own.

Sizes. The trace is symbolic (``s0, s1...`` from the inputs' and parameters' shapes); every size is a ``Size``: its
value at the traced config (which decides simplifications and tile patterns) and its Python text over the symbols
(which the kernel factories receive as compile-time arguments, read from the shapes in ``forward``). ``drafts``
renders the plan at every config of the task and requires the same text, so a decision that holds at one config
only is never shipped.

Guarantees: anything outside raises ``Unsupported`` naming the op and the reference's source line.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv

from tileagent.drafters.builtin.aten import AtenTrace, source_line

aten = torch.ops.aten
prims = torch.ops.prims


class Unsupported(Exception):
    """The graph holds something this lowering does not write (the message names the op and the source line)."""


# -- sizes ---------------------------------------------------------------------------------------------------------


class Size:
    """An integer: its value at the traced config (``v``) and a sympy expression over the size symbols (``e``);
    ``t`` is its Python text."""

    __slots__ = ("v", "e")

    def __init__(self, v: int, e):
        self.v = int(v)
        self.e = sympy.Integer(int(v)) if e is None or isinstance(e, str) else e

    @property
    def t(self) -> str:
        return _py(self.e)

    def __repr__(self):
        return f"Size({self.v}, {self.t})"

    def __eq__(self, o):
        return isinstance(o, Size) and o.v == self.v

    def __hash__(self):
        return hash(self.v)

    @staticmethod
    def of(x, hints) -> "Size":
        if isinstance(x, Size):
            return x
        if isinstance(x, torch.SymInt):
            expr = x.node.expr
            if getattr(expr, "is_Integer", False):
                return Size(int(expr), None)
            return Size(int(x.node.hint), expr)
        return Size(int(x), None)

    def __add__(self, o):
        o = _S(o)
        return Size(self.v + o.v, self.e + o.e)

    def __sub__(self, o):
        o = _S(o)
        return Size(self.v - o.v, self.e - o.e)

    def __mul__(self, o):
        o = _S(o)
        return Size(self.v * o.v, self.e * o.e)

    def __floordiv__(self, o):
        o = _S(o)
        if self.v % o.v == 0:
            q = sympy.cancel(self.e / o.e)
            if q.is_polynomial() and sympy.denom(q) == 1:
                return Size(self.v // o.v, q)
        return Size(self.v // o.v, FloorDiv(self.e, o.e))

    def __mod__(self, o):
        o = _S(o)
        if self.e.is_Integer and o.e.is_Integer:
            return Size(self.v % o.v, None)
        return Size(self.v % o.v, self.e - o.e * FloorDiv(self.e, o.e))

    def __neg__(self):
        return Size(-self.v, -self.e)


def _S(x) -> Size:
    return x if isinstance(x, Size) else Size(int(x), None)


ZERO, ONE = Size(0, None), Size(1, None)


def _is_lit(s: Size) -> bool:
    return s.e.is_Integer


def _py(expr) -> str:
    """Python text of a sympy size expression (torch's FloorDiv prints as a//b)."""
    if expr.is_Integer:
        return str(int(expr)) if int(expr) >= 0 else f"({int(expr)})"
    text = str(expr)
    for bad in ("Mod(", "Max(", "Min(", "ceiling", "floor(", "/"):
        if bad in text.replace("//", ""):
            raise Unsupported(f"a size {text} that the lowering cannot write")
    return f"({text})" if any(c in text for c in "+-*/ ") else text


def prod(sizes) -> Size:
    out = ONE
    for s in sizes:
        out = out * s
    return out


# -- index algebra ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    """A loop atom of the kernel's domain: 0 <= it < size."""

    name: str
    size: Size

    def rng(self):
        return 0, self.size.v - 1

    def text(self):
        return self.name


@dataclass(frozen=True)
class Dyn:
    """A run-time integer (a label read from memory) used as an index: lo <= it <= hi."""

    text_: str
    hi: int

    def rng(self):
        return 0, self.hi

    def text(self):
        return self.text_


@dataclass(frozen=True)
class Div:
    lin: "Lin"
    d: Size

    def rng(self):
        lo, hi = self.lin.rng()
        return lo // self.d.v, hi // self.d.v

    def text(self):
        return f"({self.lin.text()}) // {self.d.t}"


@dataclass(frozen=True)
class Mod:
    lin: "Lin"
    m: Size

    def rng(self):
        return 0, self.m.v - 1

    def text(self):
        return f"({self.lin.text()}) % {self.m.t}"


@dataclass(frozen=True)
class Lin:
    """sum(coeff * atom) + const, coefficients and constant ``Size``s; compared by value structure."""

    terms: tuple = ()  # ((atom, Size), ...) sorted by repr(atom)
    const: Size = ZERO

    @staticmethod
    def make(terms: dict, const: Size) -> "Lin":
        for a in [a for a in terms if isinstance(a, Mod)]:  # (L // d) * (c d) + (L % d) * c = L * c
            c = terms.get(a)
            if c is None:
                continue
            for b in list(terms):
                if isinstance(b, Div) and b.lin == a.lin and b.d == a.m and terms[b].v == c.v * a.m.v:
                    del terms[a], terms[b]
                    merged = Lin.make(dict(terms), const) + a.lin.scale(c)
                    return merged
        kept = tuple(sorted(((a, c) for a, c in terms.items() if c.v != 0), key=lambda ac: repr(ac[0])))
        return Lin(kept, const)

    @staticmethod
    def atom(a) -> "Lin":
        return Lin(((a, ONE),), ZERO)

    @staticmethod
    def c(v) -> "Lin":
        return Lin((), _S(v))

    def key(self):
        return (tuple((repr(a), c.v) for a, c in self.terms), self.const.v)

    def __eq__(self, o):
        return isinstance(o, Lin) and self.key() == o.key()

    def __hash__(self):
        return hash(self.key())

    def is_const(self):
        return not self.terms

    def __add__(self, o: "Lin") -> "Lin":
        terms = dict(self.terms)
        for a, c in o.terms:
            terms[a] = terms[a] + c if a in terms else c
        return Lin.make(terms, self.const + o.const)

    def __sub__(self, o: "Lin") -> "Lin":
        return self + o.scale(Size(-1, "(-1)"))

    def scale(self, k: Size) -> "Lin":
        if k.v == 0:
            return Lin.c(0)
        return Lin.make({a: c * k for a, c in self.terms}, self.const * k)

    def rng(self):
        lo = hi = self.const.v
        for a, c in self.terms:
            alo, ahi = a.rng()
            lo += min(alo * c.v, ahi * c.v)
            hi += max(alo * c.v, ahi * c.v)
        return lo, hi

    def text(self) -> str:
        parts = [a.text() if c.t == "1" else f"{a.text()} * {c.t}" for a, c in self.terms]
        if self.const.v != 0 or not parts:
            parts.append(self.const.t)
        return " + ".join(parts)

    def fdiv(self, d: Size) -> "Lin":
        if d.v == 1:
            return self
        quot, rest = {}, {}
        for a, c in self.terms:
            if c.v % d.v == 0:
                quot[a] = c // d
            else:
                rest[a] = c
        if self.const.v % d.v == 0:
            cq, cr = self.const // d, ZERO
        else:
            cq, cr = ZERO, self.const
        r = Lin.make(rest, cr)
        lo, hi = r.rng()
        out = Lin.make(quot, cq)
        if 0 <= lo and hi < d.v:
            return out
        if len(r.terms) == 1 and r.const.v == 0:
            (a, c), = r.terms
            if c.v > 0 and d.v % c.v == 0:  # (c a) // d = a // (d / c)
                inner = Lin.atom(a)
                dd = d // c
                lo, hi = inner.rng()
                if 0 <= lo and hi < dd.v:
                    return out
                if isinstance(a, Div):
                    return out + Lin.atom(Div(a.lin, a.d * dd))
                return out + Lin.atom(Div(inner, dd))
        return out + Lin.atom(Div(r, d))

    def mod(self, m: Size) -> "Lin":
        rest = {a: c for a, c in self.terms if c.v % m.v != 0}
        const = self.const % m if (self.const.v % m.v != self.const.v or self.const.v < 0) else self.const
        r = Lin.make(rest, const)
        lo, hi = r.rng()
        if 0 <= lo and hi < m.v:
            return r
        return Lin.atom(Mod(r, m))


def ravel(idx: list[Lin], shape: list[Size]) -> Lin:
    """The flat row-major offset of ``idx`` in a contiguous tensor of ``shape``."""
    out, stride = Lin.c(0), ONE
    for i, s in zip(reversed(idx), reversed(shape)):
        out = out + i.scale(stride)
        stride = stride * s
    return out


def unravel(flat: Lin, shape: list[Size]) -> list[Lin]:
    """The n-d index of flat offset ``flat`` in a contiguous tensor of ``shape``."""
    out, stride = [], ONE
    strides = []
    for s in reversed(shape):
        strides.append(stride)
        stride = stride * s
    strides.reverse()
    for k, (s, st) in enumerate(zip(shape, strides)):
        q = flat.fdiv(st)
        out.append(q if k == 0 else q.mod(s))
    return out


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
        key = (id(self), tuple(i.key() for i in idx))
        if key in cx.memo:
            return cx.memo[key]
        text = self.compute(cx, idx)
        if not _simple(text):
            text = cx.let(text)
        cx.memo[key] = text
        return text

    def compute(self, cx, idx):
        raise NotImplementedError


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
        raise Unsupported("a NaN constant")
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

    def kept_index(self, idx):
        if self.keepdim:
            return [idx[d] for d in self.kept]
        return list(idx)

    def compute(self, cx, idx):
        return cx.read_reduction(self, self.kept_index(idx))


class TopK(V):
    """``topk(src, k)`` over the last dim: a pair of outputs (values, int64 indices), never read by other math."""

    def __init__(self, src, k, node):
        self.src, self.k, self.node, self.dtype = src, k, node, src.dtype
        self.shape = list(src.shape[:-1]) + [Size(k, str(k))]


class TopKPart(V):
    def __init__(self, topk, which):
        self.topk, self.which = topk, which
        self.shape = topk.shape
        self.dtype = topk.dtype if which == 0 else torch.int64
        self.node = topk.node

    def compute(self, cx, idx):
        raise Unsupported(f"topk's result used by other math ({_where(self.node, cx.path)})")


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
    "sigmoid": "1.0 / (1.0 + T.exp2({a} * -LOG2E))", "neg": "(-{a})", "reciprocal": "(1.0 / {a})",
    "relu": "T.max({a}, 0.0)", "floor": "T.floor({a})", "ceil": "T.ceil({a})", "trunc": "T.if_then_else({a} < 0.0, "
    "T.ceil({a}), T.floor({a}))", "log1p": "T.log(1.0 + {a})", "expm1": "(T.exp2({a} * LOG2E) - 1.0)",
    "sign": "T.if_then_else({a} > 0.0, 1.0, T.if_then_else({a} < 0.0, -1.0, 0.0))",
    "round": "round_half_even({a})", "silu": "{a} / (1.0 + T.exp2({a} * -LOG2E))",
}
BINARY_F = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
            "maximum": "T.max({a}, {b})", "minimum": "T.min({a}, {b})", "pow": "T.pow({a}, {b})",
            "atan2": None, "fmod": None, "remainder": None}
COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
LOGICAL = {"logical_and": "and", "logical_or": "or", "bitwise_and": "and", "bitwise_or": "or"}
VIEW_OPS = {"view", "_unsafe_view", "reshape", "alias", "clone", "lift_fresh_copy", "detach", "contiguous",
            "_reshape_alias"}


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

    def size(self, x) -> Size:
        if isinstance(x, torch.fx.Node):
            x = self.env[x]
        return Size.of(x, self.t.hints)

    def shape_of(self, node) -> list[Size]:
        return [Size.of(s, self.t.hints) for s in node.meta["val"].shape]

    def fail(self, node, what=None):
        raise Unsupported(f"{what or 'the op ' + _opname(node)} ({_where(node, self.t.path)})")

    def run(self) -> list:
        from tileagent.drafters.builtin.templates.common import alias

        placeholders = iter(self.t.places)
        out = None
        for node in self.t.gm.graph.nodes:
            if node.op == "placeholder":
                kind, ref = next(placeholders)
                val = node.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    self.env[node] = val
                    continue
                name = _safe(ref if kind == "param" else self.t.input_names[ref])
                g = Global(name, f"self.{alias(ref)}" if kind == "param" else self.t.input_names[ref],
                           self.shape_of(node), val.dtype, node)
                g.origin, g.ref_key = kind, ref
                self.globals.append(g)
                self.env[node] = g
            elif node.op == "call_function":
                self.env[node] = self.convert(node)
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
        if not isinstance(val, (torch.Tensor, list, tuple)) or name in ("sym_size", "sym_float", "sym_int"):
            return self.scalar(node, name, args)
        if not isinstance(val, torch.Tensor) and name not in ("split_with_sizes", "split", "topk"):
            self.fail(node)
        shape, dtype = (self.shape_of(node), val.dtype) if isinstance(val, torch.Tensor) else (None, None)
        if name in VIEW_OPS and name not in ("view", "_unsafe_view", "reshape", "_reshape_alias"):
            return args[0]
        if name in ("view", "_unsafe_view", "reshape", "_reshape_alias"):
            src = args[0]
            return Fn(shape, dtype, lambda cx, idx, s=src, sh=shape: s.load(cx, unravel(ravel(idx, sh), s.shape)),
                      node).with_ins([src])
        if name in ("_to_copy", "convert_element_type", "to"):
            return self.cast(node, args[0], dtype, shape)
        if name in ("expand", "broadcast_in_dim", "expand_copy"):
            src = args[0]
            if name == "broadcast_in_dim":
                bdims = list(args[2])
            else:
                bdims = list(range(len(shape) - len(src.shape), len(shape)))
            return Fn(shape, dtype, lambda cx, idx, s=src, b=bdims: s.load(
                cx, [Lin.c(0) if s.shape[k].v == 1 else idx[b[k]] for k in range(len(s.shape))]), node).with_ins([src])
        if name in ("permute", "transpose", "t", "numpy_T"):
            src = args[0]
            n = len(src.shape)
            if name == "permute":
                perm = [d % n for d in args[1]]
            elif name == "t":
                perm = [1, 0] if n == 2 else [0]
            else:
                a, b = args[1] % n, args[2] % n
                perm = list(range(n))
                perm[a], perm[b] = perm[b], perm[a]

            def load(cx, idx, s=src, p=perm):
                src_idx = [None] * len(p)
                for k, d in enumerate(p):
                    src_idx[d] = idx[k]
                return s.load(cx, src_idx)
            return Fn(shape, dtype, load, node).with_ins([src])
        if name == "unsqueeze":
            src = args[0]
            d = args[1] % (len(src.shape) + 1)
            return Fn(shape, dtype, lambda cx, idx, s=src, d=d: s.load(cx, idx[:d] + idx[d + 1:]), node).with_ins([src])
        if name in ("squeeze", "squeeze_copy"):
            src = args[0]
            n = len(src.shape)
            dims = args[1] if len(args) > 1 else [d for d in range(n) if src.shape[d].v == 1]
            dims = [dims] if isinstance(dims, int) else list(dims)
            dims = {d % n for d in dims if src.shape[d % n].v == 1}

            def load(cx, idx, s=src, dims=dims):
                it = iter(idx)
                return s.load(cx, [Lin.c(0) if d in dims else next(it) for d in range(len(s.shape))])
            return Fn(shape, dtype, load, node).with_ins([src])
        if name in ("slice", "slice_copy"):
            src = args[0]
            n = len(src.shape)
            d = (args[1] if len(args) > 1 else 0) % n
            start = args[2] if len(args) > 2 else 0
            step = args[4] if len(args) > 4 else 1
            start = self.size(start) if start is not None else ZERO
            if start.v < 0:
                start = start + src.shape[d]
            step = self.size(step)
            return Fn(shape, dtype, lambda cx, idx, s=src, d=d, st=start, sp=step: s.load(
                cx, idx[:d] + [idx[d].scale(sp) + Lin.c(st)] + idx[d + 1:]), node).with_ins([src])
        if name in ("select",):
            src = args[0]
            n = len(src.shape)
            d = args[1] % n
            i = self.size(args[2])
            if i.v < 0:
                i = i + src.shape[d]
            return Fn(shape, dtype, lambda cx, idx, s=src, d=d, i=i: s.load(cx, idx[:d] + [Lin.c(i)] + idx[d:]),
                      node).with_ins([src])
        if name in ("split_with_sizes", "split"):
            src = args[0]
            n = len(src.shape)
            d = (args[2] if len(args) > 2 else kw.get("dim", 0)) % n
            parts, start = [], ZERO
            for part in val:
                psh = [Size.of(s, self.t.hints) for s in part.shape]
                parts.append(Fn(psh, dtype if False else part.dtype, lambda cx, idx, s=src, d=d, st=start: s.load(
                    cx, idx[:d] + [idx[d] + Lin.c(st)] + idx[d + 1:]), node).with_ins([src]))
                start = start + psh[d]
            return parts
        if name == "as_strided":
            src = args[0]
            sizes, strides = [self.size(s) for s in args[1]], [self.size(s) for s in args[2]]
            offset = self.size(args[3]) if len(args) > 3 else ZERO

            def load(cx, idx, s=src, st=strides, off=offset):
                flat = Lin.c(off)
                for i, k in zip(idx, st):
                    flat = flat + i.scale(k)
                return s.load(cx, unravel(flat, s.shape))
            return Fn(shape, dtype, load, node).with_ins([src])
        if name == "cat":
            parts = [p for p in args[0] if not (len(p.shape) == 1 and p.shape[0].v == 0)]
            d = (args[1] if len(args) > 1 else 0) % len(shape)
            bounds, start = [], ZERO
            for p in parts:
                bounds.append(start)
                start = start + p.shape[d]
            kind = kind_of(dtype)

            def load(cx, idx, parts=parts, d=d, bounds=bounds, kind=kind):
                text = cx.convert(parts[-1], parts[-1].load(cx, idx[:d] + [idx[d] - Lin.c(bounds[-1])] + idx[d + 1:]),
                                  kind)
                for p, b, e in reversed(list(zip(parts[:-1], bounds[:-1], bounds[1:]))):
                    v = cx.convert(p, p.load(cx, idx[:d] + [idx[d] - Lin.c(b)] + idx[d + 1:]), kind)
                    text = f"T.if_then_else({idx[d].text()} < {e.t}, {v}, {text})"
                return text
            return Fn(shape, dtype, load, node).with_ins(parts)
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
        if name in ("gather",):
            src, d, index = args[0], args[1] % len(args[0].shape), args[2]

            def load(cx, idx, s=src, d=d, ix=index):
                dyn = Dyn(cx.int_value(ix, ix.load(cx, idx)), s.shape[d].v - 1)
                return s.load(cx, idx[:d] + [Lin.atom(dyn)] + idx[d + 1:])
            return Fn(shape, dtype, load, node).with_ins([src, index])
        if name == "embedding":
            weight, index = args[0], args[1]

            def load(cx, idx, w=weight, ix=index):
                dyn = Dyn(cx.int_value(ix, ix.load(cx, idx[:-1])), w.shape[0].v - 1)
                return w.load(cx, [Lin.atom(dyn), idx[-1]])
            return Fn(shape, dtype, load, node).with_ins([weight, index])
        if name == "index" and len(args) > 1:
            src, indices = args[0], args[1]
            if sum(i is not None for i in indices) != 1 or any(i is not None for i in indices[1:]) and \
                    indices[0] is not None:
                self.fail(node, "advanced indexing with several index tensors")
            d = next(k for k, i in enumerate(indices) if i is not None)
            ix = indices[d]
            r = len(ix.shape)

            def load(cx, idx, s=src, d=d, ix=ix, r=r):
                dyn = Dyn(cx.int_value(ix, ix.load(cx, idx[d:d + r])), s.shape[d].v - 1)
                return s.load(cx, idx[:d] + [Lin.atom(dyn)] + idx[d + r:])
            return Fn(shape, dtype, load, node).with_ins([src, ix])
        if name in ("sum", "amax", "amin", "var", "mean", "prod", "any", "all", "max", "min") and \
                isinstance(val, torch.Tensor):
            return self.reduction(node, name, args, kw, shape, dtype)
        if name == "topk":
            src, k = args[0], args[1]
            d = (args[2] if len(args) > 2 else kw.get("dim", -1)) % len(src.shape)
            largest = args[3] if len(args) > 3 else kw.get("largest", True)
            if d != len(src.shape) - 1 or not largest or not isinstance(k, int) or k > 64:
                self.fail(node, "topk other than the k (<= 64) largest along the last dim")
            tk = TopK(src, k, node)
            tk.ins = [src]
            self.reduces.append(tk)
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
            return ScalarF(args[0])
        if isinstance(val, (int, float)):
            return val
        self.fail(node, f"a scalar computation {name}")

    def cast(self, node, src, dtype, shape):
        sk, dk = src.kind if hasattr(src, "kind") else kind_of(src.dtype), kind_of(dtype)

        def load(cx, idx, s=src):
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
        if name in ("prod", "any", "all"):
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
            self.reduces.append(r)
            return r
        op = {"sum": "sum", "amax": "amax", "amin": "amin", "max": "amax", "min": "amin"}[name]
        r = Reduce(op, src, dims, keepdim, dtype, node)
        r.ins = [src]
        self.reduces.append(r)
        return r

    def pointwise(self, node, name, args, kw, shape, dtype):
        out_kind = kind_of(dtype)
        tensors = [a for a in args if isinstance(a, V)]
        if name in POINTWISE_1 or name in BINARY_F or name in COMPARE or name in LOGICAL or name in (
                "where", "clamp", "clamp_min", "clamp_max", "logical_not", "bitwise_not", "rsub", "true_divide",
                "gelu", "fill", "lerp", "copy", "masked_fill"):
            pass
        else:
            self.fail(node)
        if name in BINARY_F and BINARY_F[name] is None:
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
                if kind_of(args[0].dtype) != FLOAT and name in ("neg", "abs"):
                    a = operand(cx, args[0], idx, INT)
                    return f"(-{a})" if name == "neg" else f"T.abs({a})"
                return POINTWISE_1[name].format(a=a)
            if name in ("gelu",):
                a = operand(cx, args[0], idx, FLOAT)
                if kw.get("approximate", "none") == "tanh":
                    return f"(0.5 * {a} * (1.0 + T.tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))))"
                return f"(0.5 * {a} * (1.0 + T.erf({a} * 0.7071067811865476)))"
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
                a = operand(cx, args[0], idx, out_kind)
                lo = args[1] if name in ("clamp", "clamp_min") and len(args) > 1 else kw.get("min")
                hi = args[2] if name == "clamp" and len(args) > 2 else (args[1] if name == "clamp_max" else
                                                                        kw.get("max"))
                if lo is not None:
                    a = f"T.max({a}, {operand(cx, lo, idx, out_kind)})"
                if hi is not None:
                    a = f"T.min({a}, {operand(cx, hi, idx, out_kind)})"
                return a
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
            if name == "pow":
                p = args[1]
                if isinstance(p, (int, float)) and not isinstance(p, bool):
                    return _pow(a, p)
                if isinstance(args[0], (int, float)):
                    return f"T.exp2({b} * {math.log2(args[0])!r})"
            return BINARY_F.get(name, BINARY_F.get("div")).format(a=a, b=b)

        if dtype in (torch.float16, torch.bfloat16):  # eager rounds every op's result to the tensor's dtype
            def rounded(cx, idx, inner=load):
                return f"T.cast(T.cast({inner(cx, idx)}, \"{DT[dtype]}\"), \"float32\")"
            return Fn(shape, dtype, rounded, node).with_ins(tensors)
        return Fn(shape, dtype, load, node).with_ins(tensors)


def _pow(a: str, p) -> str:
    if p == 1:
        return a
    if p == 2:
        return f"({a} * {a})"
    if p == 3:
        return f"({a} * {a} * {a})"
    if p == 0.5:
        return f"T.sqrt({a})"
    if p == -0.5:
        return f"T.rsqrt({a})"
    if p == -1:
        return f"(1.0 / {a})"
    if p == 0:
        return "1.0"
    return f"T.pow({a}, {float(p)!r})"


def _bcast(idx, shape, out_shape):
    """The index of an operand of ``shape`` broadcast to ``out_shape``."""
    n = len(shape)
    tail = idx[len(idx) - n:] if n else []
    return [Lin.c(0) if s.v == 1 else i for s, i in zip(shape, tail)]


class ScalarF:
    """A float computed from sizes (sym_float(n)): its Python text."""

    def __init__(self, size: Size):
        self.size = size

    def text(self):
        return f"(1.0 * {self.size.t})"


def _with_ins(self, ins):
    self.ins = list(ins)
    return self


V.with_ins = _with_ins
V.ins = ()
DT = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
      torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8",
      torch.bool: "bool"}


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in str(name))


V.kind = property(lambda self: kind_of(self.dtype))
Reduce.kind = property(lambda self: FLOAT)
IDENT = {"sum": "0.0", "amax": "-T.infinity(\"float32\")", "amin": "T.infinity(\"float32\")"}
COMBINE = {"sum": "{a} + {b}", "amax": "T.max({a}, {b})", "amin": "T.min({a}, {b})"}
REDUCE_FN = {"sum": "T.reduce_sum", "amax": "T.reduce_max", "amin": "T.reduce_min"}


class Kernel:
    """One DSL kernel: rows X (kept dims) x columns R (reduced dims) of its anchor, or a pointwise output's
    leading dims x its last dim."""

    def __init__(self, index, anchor: V, kept, dims, pointwise=False):
        self.index, self.anchor, self.pointwise = index, anchor, pointwise
        self.xvars = [Var(f"x{k}", anchor.shape[d]) for k, d in enumerate(kept)]
        self.rvars = [Var(f"r{k}", anchor.shape[d]) for k, d in enumerate(dims)]
        self.kept, self.dims = kept, dims
        self.X = prod(anchor.shape[d] for d in kept)
        self.R = prod(anchor.shape[d] for d in dims)
        xl = [Lin.c(0) if v.size.v == 1 else Lin.atom(v) for v in self.xvars]
        rl = [Lin.c(0) if v.size.v == 1 else Lin.atom(v) for v in self.rvars]
        self.row = ravel(xl, [v.size for v in self.xvars])
        self.col = ravel(rl, [v.size for v in self.rvars])
        idx = [None] * len(anchor.shape)
        for d, lin in zip(kept, xl):
            idx[d] = lin
        for d, lin in zip(dims, rl):
            idx[d] = lin
        self.flat = ravel(idx, anchor.shape)  # the anchor's flat offset at the domain point
        self.reduces: list = []
        self.full_outs: list = []  # (output number, V)
        self.row_outs: list = []
        self.realize: list = []  # reductions stored for later kernels

    def domain_index(self, src: V, dims) -> list:
        """``src``'s index at the domain point, its ``dims`` along the columns, the others along the rows."""
        kept = [d for d in range(len(src.shape)) if d not in dims]
        xi = unravel(self.row, [src.shape[d] for d in kept]) if kept else []
        ri = unravel(self.col, [src.shape[d] for d in dims]) if dims else []
        idx = [None] * len(src.shape)
        for d, lin in zip(kept, xi):
            idx[d] = lin
        for d, lin in zip(dims, ri):
            idx[d] = lin
        return idx


class Plan:
    """The kernels of a reference, in launch order, and its outputs."""

    def __init__(self, trace: AtenTrace):
        self.t = trace
        b = Builder(trace)
        self.outputs = b.run()
        self.globals = b.globals
        self.kernels: list[Kernel] = []
        owner = {}
        for r in b.reduces:
            src = r.src
            dims = list(range(len(src.shape) - 1, len(src.shape))) if isinstance(r, TopK) else r.dims
            kept = [d for d in range(len(src.shape)) if d not in dims]
            X, R = prod(src.shape[d] for d in kept), prod(src.shape[d] for d in dims)
            last = self.kernels[-1] if self.kernels else None
            deps = _deps(r)
            if last is None or last.pointwise or last.X.v != X.v or last.R.v != R.v or any(
                    isinstance(d, TopK) and owner.get(id(d)) is last for d in deps):
                last = Kernel(len(self.kernels), src, kept, dims)
                self.kernels.append(last)
            last.reduces.append(r)
            r.dims_ = dims
            owner[id(r)] = last
        self.owner = owner
        pointwise: dict = {}
        for n, o in enumerate(self.outputs):
            if isinstance(o, TopKPart):
                o.topk.__dict__.setdefault("outs", {})[o.which] = n
                continue
            if isinstance(o, Global):
                raise Unsupported("the reference returns an input unchanged")
            deps = [d for d in _deps(o)]
            ks = [owner[id(d)] for d in deps]
            k = max(ks, key=lambda k: k.index) if ks else None
            numel = prod(o.shape)
            if k is not None and numel.v == k.X.v * k.R.v and len(o.shape):
                k.full_outs.append((n, o))
            elif k is not None and numel.v == k.X.v and not (numel.v == 1 and k.X.v == 1 and k.R.v > 1 and False):
                k.row_outs.append((n, o))
            else:
                key = numel.v
                if key not in pointwise:
                    shape = o.shape if len(o.shape) else [ONE]
                    anchor = Fn(shape, o.dtype, None)
                    kp = Kernel(len(self.kernels), anchor, list(range(len(shape) - 1)), [len(shape) - 1],
                                pointwise=True)
                    pointwise[key] = kp
                    self.kernels.append(kp)
                pointwise[key].full_outs.append((n, o))
        for k in self.kernels:
            for r in k.reduces:
                if isinstance(r, TopK) and len(getattr(r, "outs", {})) != 2:
                    raise Unsupported(f"topk with an output unused or used by other math ({_where(r.node, trace.path)})")

    def render_kernels(self, knobs: dict) -> tuple[list[str], str]:
        """(kernel factory texts, forward body) with the schedule ``knobs``."""
        for _ in range(2):  # the first pass learns which reductions later kernels read
            texts = [KernelWriter(self, k, knobs).write() for k in self.kernels]
        return [t[0] for t in texts], self.forward([t[1] for t in texts])

    def forward(self, calls) -> str:
        lines = [f"        {name} = {text}\n" for name, text in self.t.binds.items()]
        results = {}
        for k, (call, outs) in zip(self.kernels, calls):
            lhs = ", ".join(outs)
            lines.append(f"        {lhs} = {call}\n")
        rets = []
        for n, o in enumerate(self.outputs):
            shape = ", ".join(s.t for s in o.shape)
            rets.append(f"o{n}.view({shape}{',' if len(o.shape) == 1 else ''})" if o.shape else f"o{n}.view(())")
        lines.append(f"        return {', '.join(rets)}\n" if len(rets) > 1 else f"        return {rets[0]}\n")
        del results
        return "".join(lines)


def _deps(v) -> list:
    """The reductions (and top-k) that ``v`` reads, through pointwise ops and views."""
    out, seen = [], set()

    def go(x, top):
        if id(x) in seen:
            return
        seen.add(id(x))
        if not top and isinstance(x, (Reduce, TopK)):
            out.append(x)
            return
        if isinstance(x, TopKPart):
            out.append(x.topk)
            return
        for a in getattr(x, "ins", ()):
            go(a, False)

    go(v, True)
    return out


class Cx:
    """One T.Parallel body being written: its let statements and what it reads."""

    def __init__(self, w: "KernelWriter", mode: str):
        self.w, self.mode, self.path = w, mode, w.plan.t.path
        self.lines: list[str] = []
        self.memo: dict = {}
        self.loads: dict = {}

    def let(self, text):
        name = f"v{self.w.counter}"
        self.w.counter += 1
        self.lines.append(f"{name} = {text}")
        return name

    def convert(self, v, text, kind):
        have = getattr(v, "kind", kind_of(v.dtype)) if isinstance(v, V) else kind
        if have == kind:
            return text
        if kind == FLOAT:
            return f"T.if_then_else({text}, 1.0, 0.0)" if have == BOOL else f"T.cast({text}, \"float32\")"
        if kind == BOOL:
            return f"({text} != 0)"
        return f"T.cast({text}, \"int64\")" if have == FLOAT else f"T.if_then_else({text}, 1, 0)"

    def int_value(self, v, text):
        return self.convert(v, text, INT) if _simple(text) else self.let(self.convert(v, text, INT))

    def index_value(self, lin: Lin, dtype):
        text = lin.text()
        return text if kind_of(dtype) == INT else f"T.cast({text}, \"float32\")"

    def read_global(self, g: Global, flat: Lin):
        return self.w.read_global(self, g, flat)

    def read_reduction(self, r: Reduce, kept_idx):
        return self.w.read_reduction(self, r, kept_idx)


class KernelWriter:
    """Writes one kernel factory and its call in forward."""

    def __init__(self, plan: Plan, k: Kernel, knobs: dict):
        self.plan, self.k, self.knobs = plan, k, knobs
        self.counter = 0
        self.params: dict = {}  # name -> (declaration, forward argument)
        self.allocs: dict = {}
        self.frag_of: dict = {}
        self.done: set = set()

    # -- reads ----------------------------------------------------------------------------------------------------

    def param(self, g: Global, pitch=None):
        if pitch is None:
            name = f"g_{g.name}"
            if name not in self.params:
                self.params[name] = (f"{name}: T.Tensor(({prod(g.shape).t},), d_{g.name})", f"{g.ref}.reshape(-1)",
                                     g)
            return name
        pitches = self.__dict__.setdefault("pitches", {})
        name = pitches.setdefault((g.name, pitch.t), f"t_{g.name}_{len(pitches)}")
        if name not in self.params:
            self.params[name] = (f"{name}: T.Tensor(({(prod(g.shape) // pitch).t}, {pitch.t}), d_{g.name})",
                                 f"{g.ref}.reshape(-1, {pitch.t})", g)
        return name

    def read_global(self, cx: Cx, g: Global, flat: Lin):
        k = self.k
        if cx.mode in ("tile", "row") and kind_of(g.dtype) == FLOAT:
            numel = prod(g.shape)
            rest = flat - k.row
            if cx.mode == "row" and rest.is_const() and rest.const.v >= 0:
                return self.fragment(cx, g, ("row", rest.const))
            if cx.mode == "tile":
                rest_c = flat - k.col
                if rest_c.is_const() and rest_c.const.v >= 0:
                    return self.fragment(cx, g, ("col", rest_c.const))
                pitch = None
                last = [v for v in k.xvars if v.size.v > 1]
                if last:
                    pitch = dict(flat.terms).get(last[-1])
                if pitch is not None and pitch.v >= k.R.v and numel.v % pitch.v == 0:
                    rest_t = flat - k.row.scale(pitch) - k.col
                    if rest_t.is_const() and 0 <= rest_t.const.v and rest_t.const.v + k.R.v <= pitch.v:
                        return self.fragment(cx, g, ("tile", rest_t.const, pitch))
        text = f"{self.param(g)}[{flat.text()}]"
        return f"T.cast({text}, \"float32\")" if kind_of(g.dtype) == FLOAT else text

    def fragment(self, cx: Cx, g: Global, pattern):
        key = (g.name,) + tuple((p.v, p.t) if isinstance(p, Size) else p for p in pattern)
        if key not in self.frag_of:
            self.frag_of[key] = f"f{len(self.frag_of)}_{g.name}"
        f = self.frag_of[key]
        kind = pattern[0]
        c0 = pattern[1]
        off = "" if c0.v == 0 else f" + {c0.t}"
        if kind == "row":
            self.allocs[f] = "(BM,)"
            cx.loads[f] = f"T.copy({self.param(g)}[bm * BM{off}], {f})"
            return f"{f}[i]"
        col0 = self.col_origin()
        if kind == "col":
            self.allocs[f] = "(BR,)"
            cx.loads[f] = f"T.copy({self.param(g)}[{col0}{off}], {f})"
            return f"{f}[j]"
        self.allocs[f] = "(BM, BR)"
        cx.loads[f] = f"T.copy({self.param(g, pattern[2])}[bm * BM, {col0}{off}], {f})"
        return f"{f}[i, j]"

    def col_origin(self):
        return "bn * BR" if self.k.pointwise else "kk * BR"

    def read_reduction(self, cx: Cx, r: Reduce, kept_idx):
        k = self.k
        owner = self.plan.owner[id(r)]
        kept_shape = [r.src.shape[d] for d in range(len(r.src.shape)) if d not in r.dims]
        flat = ravel(kept_idx, kept_shape)
        post = r.post or (lambda t: t)
        if owner is k:
            if id(r) not in self.done:
                raise Unsupported(f"a reduction read before it is complete ({_where(r.node, self.plan.t.path)})")
            if flat != k.row:
                import logging
                logging.getLogger(__name__).debug("row mismatch %s vs %s", flat, k.row)
                raise Unsupported(f"a reduction read at another row than its own "
                                  f"({_where(r.node, self.plan.t.path)})")
            return post(f"red{k.reduces.index(r)}[i]")
        if r not in owner.realize:
            owner.realize.append(r)
        name = f"w{owner.index}_{owner.reduces.index(r)}"
        if name not in self.params:
            self.params[name] = (f"{name}: T.Tensor(({owner.X.t},), \"float32\")", name, None)
        return post(f"{name}[{flat.text()}]")

    # -- writing --------------------------------------------------------------------------------------------------

    def prelude(self, mode) -> list[str]:
        k = self.k
        out = ["xg = bm * BM + i"]
        stride = ONE
        xs = []
        for v in reversed(k.xvars):
            xs.append((v, stride))
            stride = stride * v.size
        for n, (v, st) in enumerate(reversed(xs)):
            q = "xg" if st.t == "1" else f"xg // {st.t}"
            out.append(f"{v.name} = {q}" if n == 0 else f"{v.name} = ({q}) % {v.size.t}")
        if mode == "tile":
            out.append(f"rg = {self.col_origin()} + j")
            stride, rs = ONE, []
            for v in reversed(k.rvars):
                rs.append((v, stride))
                stride = stride * v.size
            for n, (v, st) in enumerate(reversed(rs)):
                q = "rg" if st.t == "1" else f"rg // {st.t}"
                out.append(f"{v.name} = {q}" if n == 0 else f"{v.name} = ({q}) % {v.size.t}")
        return out

    def body(self, cx: Cx, mode: str, stmts: list[str], pad: int) -> list[str]:
        loop = "for i, j in T.Parallel(BM, BR):" if mode == "tile" else "for i in T.Parallel(BM):"
        lines = [loop] + ["    " + s for s in self.prelude(mode) + cx.lines + stmts]
        if mode == "row":
            text = "\n".join(cx.lines + stmts)
            for v in self.k.rvars:
                if _uses(text, v.name):
                    raise Unsupported("a per-row value that depends on the reduced dims")
        return [" " * pad + s for s in lines]

    def loads(self, cx: Cx, pad: int) -> list[str]:
        return [" " * pad + s for s in cx.loads.values()]

    def write(self) -> tuple[str, tuple[str, list[str]]]:
        k = self.k
        plan = self.plan
        path = plan.t.path
        body: list[str] = []
        out_params: list = []  # (name, declaration, output number or None)
        pad = 12
        if k.pointwise:
            grid = "T.ceildiv(NR, BR), T.ceildiv(NX, BM)"
            head = "(bn, bm)"
        else:
            grid = "T.ceildiv(NX, BM)"
            head = "bm"
        valid = "xg < NX and rg < NR"
        for n_red, r in enumerate(k.reduces):
            self.allocs[f"red{n_red}"] = "(BM,)"
            if isinstance(r, TopK):
                body += self.topk(r, n_red, out_params, pad)
                self.done.add(id(r))
                continue
            self.allocs["acc"] = "(BM, BR)"
            cx = Cx(self, "tile")
            idx = k.domain_index(r.src, r.dims)
            val = cx.convert(r.value, r.value.load(cx, idx), FLOAT)
            stmt = f"acc[i, j] = {COMBINE[r.op].format(a='acc[i, j]', b=f'T.if_then_else(rg < NR, {val}, {IDENT[r.op]})')}"
            body.append(" " * pad + f"T.fill(acc, {IDENT[r.op]})")
            body.append(" " * pad + "for kk in T.serial(NK):")
            body += self.loads(cx, pad + 4)
            body += self.body(cx, "tile", [stmt], pad + 4)
            body.append(" " * pad + f"{REDUCE_FN[r.op]}(acc, red{n_red}, dim=1)")
            self.done.add(id(r))
        # per-row outputs and the reductions later kernels read
        rows = [(f"o{n}", o, n) for n, o in k.row_outs]
        if rows or k.realize:
            cx = Cx(self, "row")
            stmts = []
            for name, o, n in rows:
                idx = unravel(k.row, o.shape) if o.shape else []
                val = o.load(cx, idx)
                if ravel(idx, o.shape) != k.row and o.shape:
                    raise Unsupported("a per-row output in another order than the rows")
                self.allocs[f"f_{name}"] = "(BM,)"
                stmts.append(f"f_{name}[i] = {cx.convert(o, val, o.kind if o.kind != BOOL else INT)}")
                out_params.append((name, f"{name}: T.Tensor(({k.X.t},), \"{DT[o.dtype]}\")", n))
            if stmts:
                body += self.loads(cx, pad)
                body += self.body(cx, "row", stmts, pad)
            for name, o, n in rows:
                body.append(" " * pad + f"T.copy(f_{name}, {name}[bm * BM])")
            for r in k.realize:
                name = f"w{k.index}_{k.reduces.index(r)}"
                body.append(" " * pad + f"T.copy(red{k.reduces.index(r)}, {name}[bm * BM])")
                out_params.append((name, f"{name}: T.Tensor(({k.X.t},), \"float32\")", None))
        if k.full_outs:
            cx = Cx(self, "tile")
            stmts, stores = [], []
            for n, o in k.full_outs:
                name = f"o{n}"
                idx = unravel(k.flat, o.shape)
                val = o.load(cx, idx)
                tile = k.flat == k.row.scale(k.R) + k.col and o.kind == FLOAT
                if tile:
                    self.allocs[f"f_{name}"] = "(BM, BR)"
                    stmts.append(f"f_{name}[i, j] = {cx.convert(o, val, FLOAT)}")
                    stores.append(f"T.copy(f_{name}, {name}[bm * BM, {self.col_origin()}])")
                    out_params.append((name, f"{name}: T.Tensor(({k.X.t}, {k.R.t}), \"{DT[o.dtype]}\")", n))
                else:
                    v = cx.convert(o, val, o.kind)
                    stmts.append(f"if {valid}:")
                    stmts.append(f"    {name}[{k.flat.text()}] = T.cast({v}, \"{DT[o.dtype]}\")")
                    out_params.append((name, f"{name}: T.Tensor(({prod(o.shape).t},), \"{DT[o.dtype]}\")", n))
            if k.pointwise:
                body += self.loads(cx, pad)
                body += self.body(cx, "tile", stmts, pad)
                body += [" " * pad + s for s in stores]
            else:
                body.append(" " * pad + "for kk in T.serial(NK):")
                body += self.loads(cx, pad + 4)
                body += self.body(cx, "tile", stmts, pad + 4)
                body += [" " * (pad + 4) + s for s in stores]
        return self.assemble(grid, head, body, out_params)

    def topk(self, r: TopK, n_red, out_params, pad):
        k = self.k
        self.allocs["work"] = "(BM, BR)"
        self.allocs["cand"] = "(BM, BR)"
        self.allocs[f"arg{n_red}"] = "(BM,)"
        cx = Cx(self, "tile")
        idx = k.domain_index(r.src, r.dims_)
        val = cx.convert(r.src, r.src.load(cx, idx), FLOAT)
        lines = [" " * pad + "for kk in T.serial(1):  # top-k needs the whole row in registers (NK == 1)"]
        lines += self.loads(cx, pad + 4)
        lines += self.body(cx, "tile", [f"work[i, j] = T.if_then_else(rg < NR, {val}, -T.infinity(\"float32\"))"],
                           pad + 4)
        vals, inds = f"o{r.outs[0]}", f"o{r.outs[1]}"
        kk = r.k
        out_params.append((vals, f"{vals}: T.Tensor(({k.X.t}, {kk}), \"{DT[r.dtype]}\")", r.outs[0]))
        out_params.append((inds, f"{inds}: T.Tensor(({k.X.t}, {kk}), \"int64\")", r.outs[1]))
        p = " " * pad
        lines += [p + f"for t in T.serial({kk}):",
                  p + f"    T.reduce_max(work, red{n_red}, dim=1)",
                  p + "    for i, j in T.Parallel(BM, BR):",
                  p + f"        cand[i, j] = T.if_then_else(work[i, j] == red{n_red}[i], T.cast(j, \"float32\"), "
                      f"1e30)",
                  p + f"    T.reduce_min(cand, arg{n_red}, dim=1)",
                  p + "    for i in T.Parallel(BM):",
                  p + "        if bm * BM + i < NX:",
                  p + f"            {vals}[bm * BM + i, t] = T.cast(red{n_red}[i], \"{DT[r.dtype]}\")",
                  p + f"            {inds}[bm * BM + i, t] = T.cast(arg{n_red}[i], \"int64\")",
                  p + "    for i, j in T.Parallel(BM, BR):",
                  p + f"        work[i, j] = T.if_then_else(T.cast(j, \"float32\") == arg{n_red}[i], "
                      f"-T.infinity(\"float32\"), work[i, j])"]
        return lines

    def assemble(self, grid, head, body, out_params):
        k = self.k
        ins = list(self.params.items())
        sig = [decl for _, (decl, _, _) in ins] + [decl for _, decl, _ in out_params]
        n_in = len(ins)
        out_idx = list(range(n_in, n_in + len(out_params)))
        syms = sorted(s for s in self.plan.t.binds if _uses("\n".join(sig + body) + k.X.t + k.R.t, s))
        dts = sorted({f"d_{g.name}" for _, (_, _, g) in ins if g is not None})
        fname = f"kernel{k.index}"
        allocs = [" " * 12 + f"{n} = T.alloc_fragment({shape}, \"float32\")" for n, shape in self.allocs.items()]
        fast = any(DT.get(o.dtype) in ("float16", "bfloat16") for _, o in k.full_outs + k.row_outs)
        text = [f"@tileagent.jit(out_idx={out_idx}{', ' + FAST_MATH if fast else ''})",
                f"def {fname}({', '.join(syms + dts + ['BM', 'BR', 'THREADS'])}):",
                f"    NX = {k.X.t}",
                f"    NR = {k.R.t}",
                "    NK = (NR + BR - 1) // BR",
                "",
                "    @T.prim_func",
                f"    def main({', '.join(sig)}):",
                f"        with T.Kernel({grid}, threads=THREADS) as {head}:"] + allocs + body + ["", "    return main"]
        args = ", ".join(syms + [f"TL_DTYPE[{g.ref}.dtype]" for g in
                                 sorted({g.name: g for _, (_, _, g) in ins if g is not None}.values(),
                                        key=lambda g: g.name)])
        topk = any(isinstance(r, TopK) for r in k.reduces)
        sched = f"schedule({k.X.t}, {k.R.t}, {'True' if k.pointwise else 'False'}, {'True' if topk else 'False'})"
        call = f"{fname}({args}{', ' if args else ''}*{sched})({', '.join(arg for _, (_, arg, _) in ins)})"
        outs = [f"o{n}" if n is not None else name for name, _, n in out_params]
        return "\n".join(text) + "\n", (call, outs)


def _uses(text: str, name: str) -> bool:
    import re

    return re.search(rf"\b{re.escape(name)}\b", text) is not None


FAST_MATH = "pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True}"


# -- one text for every config ---------------------------------------------------------------------------------------

NUMBER = r"(?<![\w.])(\d+\.\d+|\d+)(?![\w.])"


def dims_of(trace: AtenTrace) -> dict:
    """(Python text of a tensor in forward, dim) -> its size at the trace's config, for inputs and parameters."""
    from tileagent.drafters.builtin.templates.common import alias

    out = {}
    for k, shape in enumerate(trace.input_shapes):
        name = trace.input_names[k] if k < len(trace.input_names) else None
        for d, s in enumerate(shape):
            if name:
                out[(name, d)] = int(s)
    for name, t in list(trace.model.named_parameters()) + list(trace.model.named_buffers()):
        for d, s in enumerate(t.shape):
            out[(f"self.{alias(name)}", d)] = int(s)
    return out


def floats_of(trace: AtenTrace) -> dict:
    """Model attributes that are numbers (``self.eps``, ``self.k``), by their forward text."""
    return {f"self.{k}": v for k, v in vars(trace.model).items() if type(v) in (float, int)
            and not k.startswith("_") and k != "training"}


def lift(plans: list, texts: list[str]) -> tuple[str, dict]:
    """One text for every config: numbers that differ between the configs' texts become names bound in forward from
    the shape (or float attribute) that has those values at every config. Returns (text, {name: forward text}).

    Raises:
        Unsupported: the texts differ in more than numbers, or a number follows no shape or attribute.
    """
    import re

    master = plans[0].t
    base_dims = dims_of(master)
    keep = [0]
    for k in range(1, len(plans)):
        dims = dims_of(plans[k].t)
        if any(dims.get(key) == 1 and v != 1 for key, v in base_dims.items()):
            continue  # a size-1 dim there: torch specializes it; the general kernels serve it
        keep.append(k)
    parts = [re.split(NUMBER, texts[k]) for k in keep]
    if any(len(p) != len(parts[0]) for p in parts):
        raise Unsupported("the fused kernels differ in structure between configs (a size decides the plan)")
    dims = [dims_of(plans[k].t) for k in keep]
    floats = [floats_of(plans[k].t) for k in keep]
    names: dict = {}
    out = list(parts[0])
    for pos in range(len(parts[0])):
        values = [p[pos] for p in parts]
        if pos % 2 == 0:
            if len(set(values)) != 1:
                raise Unsupported("the fused kernels differ in structure between configs (a size decides the plan)")
            continue
        if len(set(float(v) for v in values)) == 1:
            continue
        nums = [float(v) for v in values]
        source = None
        if all(n.is_integer() for n in nums):
            for key in base_dims:
                if all(d.get(key) == n for d, n in zip(dims, nums)):
                    source = f"{key[0]}.shape[{key[1]}]"
                    break
        if source is None:
            for key in floats[0]:
                if all(f.get(key) == n for f, n in zip(floats, nums)):
                    source = key
                    break
        if source is None:
            raise Unsupported(f"a number of the fused kernels ({', '.join(values)} across configs) follows no "
                              f"input shape or Model attribute")
        name = names.setdefault(source, f"z{len(names)}")
        out[pos] = name if "." not in values[0] else f"(1.0 * {name})"
    return "".join(out), {v: k for k, v in names.items()}
