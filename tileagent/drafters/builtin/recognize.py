"""Recognize the op family of a reference from its traced graph (never from its file name).

In: a reference path (or a ``graph.Traced``). Out: ``FamilyMatch`` (the family and what its template needs) or
``None``; ``explain(path)`` gives ``(match, reason)`` with the reason in plain words when nothing matched.

Families, tried in this order:
- ``attention``: ``F.scaled_dot_product_attention`` (optionally ``is_causal``, ``scale``) on BHSD tensors or on BSHD
  tensors through ``transpose(1, 2)``, or the manual ``softmax(Q @ K^T * scale) @ V`` on BHSD tensors;
- ``gemm_epilogue``: one ``@`` / ``matmul`` / ``mm`` / ``F.linear`` / ``nn.Linear`` on fp16/bf16 operands followed by a
  pointwise epilogue (activations, scales, a bias per column, a residual of the output's shape);
- ``layernorm`` (``F.layer_norm``, ``nn.LayerNorm`` or the manual mean/variance form), ``rmsnorm`` (``F.rms_norm`` or
  ``x * rsqrt(mean(x^2) + eps)``), ``softmax`` (over the last dim, ``torch.softmax`` or manual exp/sum): over the
  last dim of one input, with pointwise work after (an activation, a weight, a bias);
- ``row_reduction``: one sum / mean / amax / amin over one dim (or adjacent dims), pointwise work before and after;
- ``elementwise``: a DAG of pointwise ops on inputs of the output's shape, per-column (``(N,)``) or per-row
  (``(..., 1)``) operands, parameters and constants.

Guarantees: a match's pointwise expressions contain only ops ``translate`` can write; constants equal to a float or
bool attribute of the model are bound to it (``Scalar.attr``), so the candidate reads ``self.<attr>`` as Model does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tileagent.drafters.builtin.graph import Expr, Traced, TraceError, strip, trace_reference, walk
from tileagent.drafters.builtin.translate import is_pointwise

FAMILIES = ("rmsnorm", "layernorm", "softmax", "elementwise", "row_reduction", "gemm_epilogue", "attention", "fusion")
DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
               torch.float64: "float64"}
LEAVES = ("input", "param", "const", "center")
VIEWS = ("view", "reshape", "unsqueeze", "squeeze", "flatten", "expand")


@dataclass
class Scalar:
    """A number the template needs: its traced value, and the Model attribute it comes from (None: a literal)."""

    value: object
    attr: str | None = None

    def code(self) -> str:
        """Python text for the candidate's forward: ``self.<attr>`` or the literal."""
        return f"self.{self.attr}" if self.attr else repr(self.value)


@dataclass
class Operand:
    """A tensor the fused expression reads besides the template's own value: an input or a parameter."""

    kind: str  # "input" | "param"
    ref: object  # input position or dotted parameter name
    name: str  # a DSL-safe name (the forward's argument or the parameter's name)
    role: str  # "full" (the output's shape), "row" (one value per column), "col" (one value per row)
    dtype: str
    leaf: Expr = field(repr=False)


@dataclass
class FamilyMatch:
    """What the recognizer found: the family and everything its template needs."""

    family: str
    summary: str
    dtype: str  # the main input's dtype name
    out_dtype: str
    out_follows_input: bool  # the output's dtype is the main input's (so DTYPES changes follow)
    subject: int | None = None  # input position of the main operand
    expr: Expr | None = field(default=None, repr=False)  # the fused pointwise expression (leaf 'center' = template)
    pre: Expr | None = field(default=None, repr=False)  # pointwise work on the subject before a reduction / softmax
    operands: list[Operand] = field(default_factory=list)
    consts: dict = field(default_factory=dict, repr=False)  # id(const Expr) -> Scalar, for bound constants
    activation: str | None = None
    eps: Scalar | None = None
    weight: str | None = None
    bias: str | None = None
    reduce_op: str | None = None
    reduce_dims: tuple = ()
    reduce_dim_attr: str | None = None
    keepdim: bool = False
    causal: Scalar | None = None
    scale: Scalar | None = None
    layout: str | None = None  # attention: "bshd" | "bhsd"
    head_dim: int | None = None
    gemm_b: Operand | None = None
    gemm_b_transposed: bool = False
    traced: Traced | None = field(default=None, repr=False)
    plan: object = field(default=None, repr=False)  # fusion: the fusion.Plan at the traced config
    plans: list = field(default_factory=list, repr=False)  # fusion: the plans at every traced config


class NoMatch(Exception):
    """Internal: this family does not match (the message says why)."""


# -- helpers -------------------------------------------------------------------------------------------------------


def _bind(value, model) -> Scalar:
    if type(value) in (float, bool):
        for name, v in vars(model).items():
            if name.startswith("_") or name == "training" or type(v) is not type(value):
                continue
            if v == value:
                return Scalar(value, name)
    return Scalar(value)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _leaf_source(e: Expr) -> tuple[Expr, tuple] | None:
    """(the input/param leaf under views, the shape it broadcasts with) or None."""
    shape = e.shape
    while e.op in VIEWS or e.op == "cast":
        if e.op == "expand":
            shape = e.args[0].shape
        elif e.op != "cast":
            shape = e.shape
        e = e.args[0]
    if e.op in ("input", "param"):
        return e, shape
    return None


def _role(shape: tuple, out: tuple, leaf: Expr) -> str | None:
    numel = 1
    for s in leaf.shape:
        numel *= s
    if tuple(shape) == tuple(out):
        return "full"
    trimmed = tuple(shape)
    while trimmed and trimmed[0] == 1:
        trimmed = trimmed[1:]
    if len(out) >= 1 and trimmed == (out[-1],) and numel == out[-1]:
        return "row"
    if len(out) >= 2 and tuple(shape)[-1:] == (1,) and tuple(shape)[:-1] == tuple(out[:-1]):
        return "col"
    return None


class _Pointwise:
    """Walk a pointwise expression: collect operands (inputs, params under views) and bind constants."""

    def __init__(self, traced: Traced, out_shape: tuple, allow=("full", "row", "col"), inputs_allowed=True):
        self.t, self.out_shape, self.allow, self.inputs_allowed = traced, out_shape, allow, inputs_allowed
        self.operands: dict[int, Operand] = {}
        self.consts: dict[int, Scalar] = {}

    def walk(self, e: Expr, stop: dict[int, Expr] | None = None) -> Expr:
        """``e`` with the nodes in ``stop`` replaced (by id) and views of leaves folded; raises NoMatch."""
        stop = stop or {}
        memo: dict[int, Expr] = {}

        def go(x):
            if not isinstance(x, Expr):
                return x
            if id(x) in memo:
                return memo[id(x)]
            if id(x) in stop:
                out = go(stop[id(x)])
            elif x.op == "const":
                self.consts[id(x)] = _bind(x.attr, self.t.model)
                out = x
            elif x.op == "center":
                out = x
            elif x.op in ("input", "param") or x.op in VIEWS:
                out = self.operand(x)
            elif is_pointwise(x):
                args = tuple(go(a) for a in x.args)
                out = Expr(x.op, args, x.attr, x.shape, x.dtype, x.kwargs)
                if x.op == "cast":
                    out = args[0]
            else:
                raise NoMatch(f"{_describe(x)} is not a pointwise op")
            memo[id(x)] = out
            return out

        return go(e)

    def operand(self, x: Expr) -> Expr:
        src = _leaf_source(x)
        if src is None:
            raise NoMatch(f"{_describe(x)} of a computed value")
        leaf, shape = src
        role = _role(shape, self.out_shape, leaf)
        if role not in self.allow:
            raise NoMatch(f"{leaf.op} {leaf.attr!r} of shape {tuple(leaf.shape)} does not broadcast like a row, a "
                          f"column or the whole output {tuple(self.out_shape)}")
        if leaf.op == "input" and not self.inputs_allowed:
            raise NoMatch("a second input takes part")
        if leaf.dtype not in DTYPE_NAMES or leaf.dtype == torch.float64:
            raise NoMatch(f"{leaf.op} {leaf.attr!r} has dtype {leaf.dtype}")
        key = (leaf.op, leaf.attr, role)
        for op in self.operands.values():
            if (op.kind, op.ref, op.role) == key:
                return op.leaf
        name = self.t.input_names[leaf.attr] if leaf.op == "input" else str(leaf.attr)
        node = Expr("operand", (), len(self.operands), shape, leaf.dtype)
        self.operands[len(self.operands)] = Operand(leaf.op, leaf.attr, _safe(name), role, DTYPE_NAMES[leaf.dtype],
                                                    node)
        return node


def _describe(e: Expr) -> str:
    if e.op == "unknown":
        return f"the op {e.attr!r}"
    if e.op in ("input", "param"):
        return f"{e.op} {e.attr!r}"
    return f"the op {e.op!r}"


def _is_input(e, k: int | None = None) -> bool:
    e = strip(e)
    return isinstance(e, Expr) and e.op == "input" and (k is None or e.attr == k)


def _const_value(e):
    return e.attr if isinstance(e, Expr) and e.op == "const" else None


def _center(shape, dtype=torch.float32) -> Expr:
    return Expr("center", (), None, tuple(shape), dtype)


def _activation(expr: Expr | None) -> str | None:
    names = []

    def go(e):
        if isinstance(e, Expr):
            for a in e.args:
                go(a)
            if e.op in ("relu", "gelu", "silu", "sigmoid", "tanh", "leaky_relu", "relu6", "softplus", "mish",
                        "hardswish", "hardsigmoid", "clamp", "exp", "erf"):
                names.append(e.op)

    go(expr)
    return "+".join(dict.fromkeys(names)) or None


def _base(traced: Traced, subject: int | None, family: str, summary: str) -> FamilyMatch:
    out = traced.output
    k = subject if subject is not None else 0
    in_dtype = traced.input_dtypes[k] if traced.input_dtypes else out.dtype
    if out.dtype not in DTYPE_NAMES or in_dtype not in DTYPE_NAMES:
        raise NoMatch(f"dtype {out.dtype} / {in_dtype} is not float16, bfloat16 or float32")
    return FamilyMatch(family=family, summary=summary, dtype=DTYPE_NAMES[in_dtype], out_dtype=DTYPE_NAMES[out.dtype],
                       out_follows_input=out.dtype == in_dtype, subject=subject, traced=traced)


# -- families --------------------------------------------------------------------------------------------------------


def _attention(t: Traced) -> FamilyMatch:
    out = strip(t.output)
    layout_out = "bhsd"
    if out.op == "transpose" and sorted(x % 4 for x in out.attr) == [1, 2]:
        out, layout_out = strip(out.args[0]), "bshd"
    if out.op == "sdpa":
        kw = out.kwargs
        if kw.get("attn_mask") is not None or kw.get("dropout_p") or kw.get("enable_gqa"):
            raise NoMatch("scaled_dot_product_attention with a mask, dropout or GQA")
        qkv, layouts = [], set()
        for x in out.args:
            x = strip(x)
            if x.op == "transpose" and sorted(a % 4 for a in x.attr) == [1, 2] and _is_input(x.args[0]):
                layouts.add("bshd")
                qkv.append(strip(x.args[0]))
            elif _is_input(x):
                layouts.add("bhsd")
                qkv.append(x)
            else:
                raise NoMatch("attention operands are computed, not inputs")
        if layouts != {layout_out}:
            raise NoMatch("attention operands and output in different layouts")
        causal = kw.get("is_causal", False)
        causal = _bind(_const_value(causal) if isinstance(causal, Expr) else causal, t.model)
        scale = kw.get("scale")
        scale = None if scale is None or _const_value(scale) is None else _bind(float(_const_value(scale)), t.model)
    elif out.op == "matmul" and layout_out == "bhsd":
        p, v = strip(out.args[0]), strip(out.args[1])
        if p.op != "softmax" or p.kwargs.get("dims") != (len(p.shape) - 1,):
            raise NoMatch("not softmax(...) @ V")
        s = strip(p.args[0])
        scale = None
        if s.op in ("mul", "div"):
            c = [_const_value(a) for a in s.args]
            if s.op == "mul" and c[1] is not None:
                s, scale = strip(s.args[0]), c[1]
            elif s.op == "mul" and c[0] is not None:
                s, scale = strip(s.args[1]), c[0]
            elif s.op == "div" and c[1] is not None:
                s, scale = strip(s.args[0]), 1.0 / c[1]
            else:
                raise NoMatch("scores scaled by a tensor")
        if s.op != "matmul":
            raise NoMatch("scores are not Q @ K^T")
        q, kt = strip(s.args[0]), strip(s.args[1])
        if not (kt.op == "transpose" and sorted(a % 4 for a in kt.attr) == [2, 3] and _is_input(kt.args[0])):
            raise NoMatch("scores are not Q @ K.transpose(-2, -1)")
        qkv = [q, strip(kt.args[0]), v]
        if not all(_is_input(x) for x in qkv):
            raise NoMatch("attention operands are computed, not inputs")
        causal = Scalar(False)
        scale = None if scale is None else _bind(float(scale), t.model)
    else:
        raise NoMatch("no scaled_dot_product_attention or softmax(Q K^T) V")
    shapes = {tuple(x.shape) for x in qkv}
    dtypes = {x.dtype for x in qkv}
    if len(shapes) != 1 or len(next(iter(shapes))) != 4:
        raise NoMatch("Q, K and V must be 4-d tensors of one shape (no GQA, no cross attention)")
    if dtypes - {torch.float16, torch.bfloat16} or len(dtypes) != 1:
        raise NoMatch("attention on tensor cores takes float16 or bfloat16 Q, K, V")
    d = next(iter(shapes))[3]
    if d % 16 or d > 256:
        raise NoMatch(f"head dim {d} is not a multiple of 16 up to 256")
    m = _base(t, qkv[0].attr, "attention", "softmax(Q K^T * scale) V" + (" (causal)" if causal.value else ""))
    if [x.attr for x in qkv] != [0, 1, 2]:
        raise NoMatch("attention inputs must be (q, k, v) in this order")
    m.causal, m.scale, m.layout, m.head_dim = causal, scale, layout_out, d
    return m


def _gemm(t: Traced, nodes: list[Expr]) -> FamilyMatch:
    mms = [e for e in nodes if e.op in ("matmul", "linear")]
    if len(mms) != 1:
        raise NoMatch(f"{len(mms)} matrix products")
    mm = mms[0]
    out_shape = t.output.shape
    a = strip(mm.args[0])
    if not (a.op == "input" and len(a.shape) >= 2):
        raise NoMatch("the matmul's left operand is not an input")
    bias = None
    if mm.op == "linear":
        b, transposed = strip(mm.args[1]), True
        bias = mm.args[2] if len(mm.args) > 2 else None
    else:
        b, transposed = strip(mm.args[1]), False
        if b.op in ("t", "transpose") and len(b.shape) == 2:
            b, transposed = strip(b.args[0]), True
    if not (b.op in ("input", "param") and len(b.shape) == 2):
        raise NoMatch("the matmul's right operand is not a 2-d input or parameter")
    cast_b = b.dtype == torch.float32 and strip(mm.args[1]) is not mm.args[1]  # fp32 master weight cast in forward
    if (a.dtype != b.dtype and not cast_b) or a.dtype not in (torch.float16, torch.bfloat16):
        raise NoMatch(f"the GEMM template takes float16 or bfloat16 operands (got {a.dtype}, {b.dtype})")
    center = _center(mm.shape)
    value = center if bias is None else Expr("add", (center, bias), None, mm.shape, mm.dtype)
    pw = _Pointwise(t, out_shape)
    expr = pw.walk(t.output, {id(mm): value})
    if tuple(out_shape) != tuple(mm.shape):
        raise NoMatch("the epilogue changes the GEMM's shape")
    m = _base(t, a.attr, "gemm_epilogue", "")
    b_name = t.input_names[b.attr] if b.op == "input" else str(b.attr)
    m.gemm_b = Operand(b.op, b.attr, _safe(b_name), "full", DTYPE_NAMES[b.dtype], b)
    m.gemm_b_transposed = transposed
    m.expr, m.operands, m.consts = expr, list(pw.operands.values()), pw.consts
    m.activation = _activation(expr)
    m.bias = next((o.name for o in m.operands if o.role == "row"), None)
    m.summary = f"{m.activation or 'identity'}(A @ {'B^T' if transposed else 'B'} ...) with a fused epilogue"
    return m


def _mean_last(e: Expr, n_dims: int) -> bool:
    return e.op == "reduce" and e.attr == "mean" and e.kwargs["dims"] == (n_dims - 1,) and e.kwargs["keepdim"]


def _square_of(e: Expr):
    e = strip(e)
    if e.op == "pow" and _const_value(e.args[1]) == 2:
        return strip(e.args[0])
    if e.op == "mul" and strip(e.args[0]) is strip(e.args[1]):
        return strip(e.args[0])
    if e.op == "square":
        return strip(e.args[0])
    return None


def _eps_of(e: Expr, stat) -> object:
    """eps when ``e`` is stat + eps (either order), else None."""
    e = strip(e)
    if e.op == "add":
        a, b = e.args
        if stat(strip(a)) and _const_value(b) is not None:
            return _const_value(b)
        if stat(strip(b)) and _const_value(a) is not None:
            return _const_value(a)
    return None


def _normalized(e: Expr, numer, stat):
    """eps when ``e`` is numer * rsqrt(stat + eps), numer / sqrt(stat + eps) or numer * (1 / sqrt(...))."""
    e = strip(e)
    if e.op == "mul":
        for x, r in (e.args, e.args[::-1]):
            r = strip(r)
            if numer(strip(x)) and r.op == "rsqrt":
                eps = _eps_of(r.args[0], stat)
                if eps is not None:
                    return eps
    if e.op == "div" and numer(strip(e.args[0])) and strip(e.args[1]).op == "sqrt":
        return _eps_of(strip(e.args[1]).args[0], stat)
    return None


def _row_family(t: Traced, nodes: list[Expr]) -> FamilyMatch:
    """rmsnorm, layernorm, softmax (rows of the subject input's last dim)."""
    for node in nodes:
        m = None
        if node.op in ("layer_norm", "rms_norm"):
            x = strip(node.args[0])
            if not (x.op == "input" and node.kwargs.get("last_dim_only")):
                raise NoMatch(f"{node.op} over more than the last dim, or of a computed value")
            family = "layernorm" if node.op == "layer_norm" else "rmsnorm"
            eps = node.args[-1]
            eps_value = _const_value(eps) if eps is not None else None
            if eps_value is None:
                eps_value = torch.finfo(x.dtype).eps if family == "rmsnorm" else 1e-5
            value = _center(node.shape)
            w, b = node.args[1], (node.args[2] if family == "layernorm" else None)
            if w is not None:
                value = Expr("mul", (value, w), None, node.shape, torch.float32)
            if b is not None:
                value = Expr("add", (value, b), None, node.shape, torch.float32)
            m = (family, x, node, value, _bind(float(eps_value), t.model))
        elif node.op in ("mul", "div"):
            n = len(node.shape)
            subject = [None]

            def numer_rms(x):
                if x.op == "input":
                    subject[0] = x
                    return True
                return False

            def stat_rms(s):
                return _mean_last(s, n) and subject[0] is not None and _square_of(s.args[0]) is subject[0]

            eps = _normalized(node, numer_rms, stat_rms)
            if eps is not None:
                m = ("rmsnorm", subject[0], node, _center(node.shape), _bind(float(eps), t.model))
            else:
                eps = _normalized(node, _centered, _variance_of)
                if eps is not None:
                    x = strip(_centered_subject(node))
                    m = ("layernorm", x, node, _center(node.shape), _bind(float(eps), t.model))
        if m is None and (node.op == "softmax" or (node.op == "div" and _manual_softmax(node) is not None)):
            z = node.args[0] if node.op == "softmax" else _manual_softmax(node)
            if node.kwargs.get("dims", (len(node.shape) - 1,)) != (len(node.shape) - 1,):
                raise NoMatch("softmax over another dim than the last")
            m = ("softmax", z, node, _center(node.shape), None)
        if m is None:
            continue
        family, x, node, value, eps = m
        pre = None
        if family == "softmax":
            inputs = {id(e): e for e in walk(x) if e.op == "input"}
            if len(inputs) != 1:
                raise NoMatch("softmax of a value computed from several inputs")
            x_in = next(iter(inputs.values()))
            pw_pre = _Pointwise(t, node.shape, allow=("full",))
            pre = pw_pre.walk(x, {id(x_in): _center(node.shape)})
            if pw_pre.operands:
                raise NoMatch("softmax of a value computed with other tensors")
            x = x_in
        if len(x.shape) < 1 or x.dtype not in DTYPE_NAMES:
            raise NoMatch("not a floating input")
        pw = _Pointwise(t, node.shape, allow=("full", "row"))
        expr = pw.walk(t.output, {id(node): value})
        match = _base(t, x.attr, family, "")
        match.expr, match.pre, match.operands, match.eps = expr, pre, list(pw.operands.values()), eps
        match.consts = {**pw.consts, **(pw_pre.consts if family == "softmax" else {})}
        match.activation = _activation(expr)
        params = [o for o in match.operands if o.kind == "param"]
        match.weight = params[0].name if params else None
        match.bias = params[1].name if len(params) > 1 else None
        match.summary = f"{match.activation or 'identity'}({family}(x){' * weight' if match.weight else ''}" \
                        f"{' + bias' if match.bias else ''})"
        return match
    raise NoMatch("no norm or softmax over the last dim")


def _centered(e: Expr) -> bool:
    """x - mean(x, -1, keepdim) with x an input."""
    return e.op == "sub" and _is_input(e.args[0]) and _mean_last(strip(e.args[1]), len(e.shape)) and \
        strip(strip(e.args[1]).args[0]) is strip(e.args[0])


def _centered_subject(node: Expr) -> Expr:
    for a in node.args:
        a = strip(a)
        if _centered(a):
            return a.args[0]
    raise NoMatch("no centered subject")


def _variance_of(s: Expr) -> bool:
    """mean((x - mean(x))^2, -1, keepdim) or x.var(-1, keepdim, unbiased=False)."""
    n = len(s.shape)
    if _mean_last(s, n):
        sq = _square_of(s.args[0])
        return sq is not None and _centered(sq)
    return s.op == "reduce" and s.attr == "var" and s.kwargs["dims"] == (n - 1,) and _is_input(s.args[0])


def _manual_softmax(node: Expr):
    """z when ``node`` is exp(z - max(z)) / sum(exp(z - max(z))) (or without the max), over the last dim."""
    e, s = strip(node.args[0]), strip(node.args[1])
    last = (len(node.shape) - 1,)
    if not (e.op == "exp" and s.op == "reduce" and s.attr == "sum" and s.kwargs["dims"] == last
            and s.kwargs["keepdim"] and strip(s.args[0]) is e):
        return None
    z = strip(e.args[0])
    if z.op == "sub":
        mx = strip(z.args[1])
        if mx.op == "reduce" and mx.attr == "amax" and mx.kwargs["dims"] == last and strip(mx.args[0]) is \
                strip(z.args[0]):
            return z.args[0]
    return e.args[0]


def _reduction(t: Traced, nodes: list[Expr]) -> FamilyMatch:
    reds = [e for e in nodes if e.op == "reduce"]
    if len(reds) != 1 or reds[0].attr not in ("sum", "mean", "amax", "amin"):
        raise NoMatch("not a single sum / mean / amax / amin")
    r = reds[0]
    dims = r.kwargs["dims"]
    if list(dims) != list(range(dims[0], dims[-1] + 1)):
        raise NoMatch("a reduction over non-adjacent dims")
    x_expr = r.args[0]
    inputs = {id(e): e for e in walk(x_expr) if e.op == "input"}
    if len(inputs) != 1:
        raise NoMatch("a reduction of a value computed from several inputs")
    x = next(iter(inputs.values()))
    if tuple(x.shape) != tuple(strip(x_expr).shape):
        raise NoMatch("a reduction of a broadcast value")
    pw_pre = _Pointwise(t, x.shape, allow=())
    pre = pw_pre.walk(x_expr, {id(x): _center(x.shape)})
    pw = _Pointwise(t, r.shape, allow=())
    expr = pw.walk(t.output, {id(r): _center(r.shape)})
    m = _base(t, x.attr, "row_reduction", f"{r.attr} over dim {dims}")
    m.pre, m.expr, m.consts = pre, expr, {**pw_pre.consts, **pw.consts}
    m.reduce_op, m.reduce_dims, m.keepdim = r.attr, dims, r.kwargs["keepdim"]
    if len(dims) == 1:
        bound = [name for name, v in vars(t.model).items() if not name.startswith("_") and type(v) is int
                 and v % len(x.shape) == dims[0]]
        m.reduce_dim_attr = bound[0] if len(bound) == 1 else None
    return m


def _elementwise(t: Traced) -> FamilyMatch:
    out = t.output
    pw = _Pointwise(t, out.shape)
    expr = pw.walk(out)
    full = [o for o in pw.operands.values() if o.kind == "input" and o.role == "full"]
    if not full:
        raise NoMatch("no input of the output's shape")
    m = _base(t, full[0].ref, "elementwise", "")
    m.expr, m.operands, m.consts = expr, list(pw.operands.values()), pw.consts
    m.activation = _activation(expr)
    m.summary = f"pointwise {m.activation or 'arithmetic'} over {len(m.operands)} operand(s)"
    return m


def explain(path_or_traced) -> tuple[FamilyMatch | None, str]:
    """(the match, '') or (None, why nothing matched, in plain words). The template families are tried first; what
    none of them matches goes to the fusion lowering (``fusion.Plan`` over the ATen graph)."""
    match, reason = _explain_families(path_or_traced)
    if match is not None or isinstance(path_or_traced, Traced):
        return match, reason
    try:
        return _fusion(path_or_traced), ""
    except FusionDeclined as e:
        return None, str(e)


class FusionDeclined(Exception):
    """The fusion lowering cannot draft the reference (the message names the op and the source line)."""


FUSION_CONFIGS = 2  # the plan must render one text at SMALL_CONFIG and the first and last configs


def _fusion(path) -> FamilyMatch:
    from tileagent.drafters.builtin.aten import trace_aten
    from tileagent.drafters.builtin.fusion import Plan, Unsupported
    from tileagent.drafters.builtin.templates import fusion as template

    try:
        small = trace_aten(path)
        configs = small.spec.configs
        picks = [configs[k] for k in sorted({0, len(configs) - 1})][:FUSION_CONFIGS]
        traces = [small] + [trace_aten(path, config) for config in picks if config != small.config]
        # the master: the config with the fewest size-1 dims (torch specializes those; the others stay symbolic)
        traces.sort(key=lambda tr: sum(s == 1 for shape in tr.input_shapes for s in shape))
        plans = [Plan(tr) for tr in traces]
        t, plan = traces[0], plans[0]
        template.lifted(plans, template.VARIANTS[0][1])  # raises when no one text serves every config
    except (Unsupported, TraceError) as e:
        raise FusionDeclined(str(e)) from e
    try:  # the DISTRIBUTE plan (knob, drafted on): kept where it renders one text for every config
        dplans = [Plan(tr, distribute=True) for tr in traces]
        template.lifted(dplans, template.VARIANTS[0][1])
    except Unsupported:
        dplans = None
    dtypes = [d for d in t.input_dtypes if d in DTYPE_NAMES] or [torch.float32]
    out_dtype = plan.outputs[0].dtype
    summary = template.describe(dplans[0] if dplans else plan)
    m = FamilyMatch(family="fusion", summary=summary, dtype=DTYPE_NAMES[dtypes[0]],
                    out_dtype=DTYPE_NAMES.get(out_dtype, str(out_dtype).replace("torch.", "")),
                    out_follows_input=out_dtype == dtypes[0])
    m.plan, m.plans, m.dplans = plan, plans, dplans
    return m


def _explain_families(path_or_traced) -> tuple[FamilyMatch | None, str]:
    try:
        t = path_or_traced if isinstance(path_or_traced, Traced) else trace_reference(path_or_traced)
    except TraceError as e:
        return None, str(e)
    if t.inplace:
        return None, f"the reference writes in place ({', '.join(sorted(set(t.inplace)))}), which no template follows"
    nodes = t.nodes()
    unknown = sorted({str(e.attr) for e in nodes if e.op == "unknown"})
    if unknown:
        return None, f"the reference uses {', '.join(unknown)}, which no built-in template covers"
    ops = {e.op for e in nodes}
    reasons = []
    if ops & {"sdpa", "matmul"}:
        tries = [_attention, lambda t: _gemm(t, nodes)]
    elif ops & {"linear"}:
        tries = [lambda t: _gemm(t, nodes)]
    elif ops & {"reduce", "softmax", "layer_norm", "rms_norm"}:
        tries = [lambda t: _row_family(t, nodes), lambda t: _reduction(t, nodes)]
    else:
        tries = [_elementwise]
    for fn in tries:
        try:
            return fn(t), ""
        except NoMatch as e:
            reasons.append(str(e))
    graph_ops = sorted(ops - set(LEAVES) - {"meta"})
    return None, f"its graph ({', '.join(graph_ops)}) matches no built-in family: {'; '.join(reasons)}"


def recognize_family(reference_path) -> FamilyMatch | None:
    """The op family of the reference at ``reference_path`` (traced, not guessed from the name), or None."""
    return explain(reference_path)[0]
