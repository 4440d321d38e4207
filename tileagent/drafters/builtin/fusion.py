"""The fusion lowering: an ATen graph (``aten.trace_aten``) -> DSL kernels, Inductor-like.

In: an ``AtenTrace``. Out: ``plan(trace) -> Plan`` (the kernels: each a (rows X, columns R) iteration domain with its
reductions and outputs) and ``Plan.render(knobs) -> str``, the candidate module's text.

Model. Every tensor of the graph is a lazy value ``V.load(cx, idx) -> DSL text`` of its own n-d index; an index is a
``Lin`` (a linear form over the kernel's loop atoms with floor-division / modulo atoms, simplified by value ranges as
Inductor does). Views, permutes, slices, chunk/split, cat, expand, as_strided, casts, where, factories (full, arange:
masks such as ``tril(ones(S, S))``) and gathers (a label's logit, embedding rows) only rewrite indices; pointwise ops
write float32 math; reductions (sum, amax, amin, var) are realized in the kernel whose domain is their input with the
kept dims as rows and the reduced dims as columns, in a float32 fragment per row (a sum of ``exp(x - max)`` with its
``amax`` in one pass over rows of several tiles: ``fusion_onepass.online_pair``); ``topk`` (small k) runs k
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

import torch

from tileagent.drafters.builtin.aten import AtenTrace
from tileagent.drafters.builtin.distribute import earlier_kernel
from tileagent.drafters.builtin.fusion_parts import write as write_parts
from tileagent.drafters.builtin.fusion_writer import _deps, _globals
from tileagent.drafters.builtin.index import ONE, Lin, Size, Unsupported, Var, prod, ravel, unravel
from tileagent.drafters.builtin.scan import Scan, ScanOut
from tileagent.drafters.builtin.values import Builder, Fn, Global, TopK, TopKPart, V, _where


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
        self.reverse = False  # a pointwise kernel that walks its rows from the last (after a whole-tensor reduction)
        self.reread = False  # a reversed pointwise kernel reads this reduction's tensors again (no evict_first)
        self.parts = None  # (n, P): a pointwise kernel writing its output as n parts of P columns (fusion_parts)

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

    def __init__(self, trace: AtenTrace, distribute: bool = False):
        self.t = trace
        self.distribute = distribute  # the DISTRIBUTE plan: earlier kernels of a domain, riders (distribute.py)
        b = Builder(trace)
        self.outputs = b.run()
        self.globals = b.globals
        self.env = b.env  # fx node -> lazy value (distribute.linear reads the summed expressions)
        self.kernels: list[Kernel] = []
        owner = {}
        for r in b.reduces:
            src = r.src
            dims = list(range(len(src.shape) - 1, len(src.shape))) if isinstance(r, (TopK, Scan)) else r.dims
            kept = [d for d in range(len(src.shape)) if d not in dims]
            X, R = prod(src.shape[d] for d in kept), prod(src.shape[d] for d in dims)
            last = self.kernels[-1] if self.kernels else None
            deps = _deps(r)
            early = earlier_kernel(self.kernels, owner, r, deps, X, R) if distribute else None
            if early is not None:
                last = early
            elif last is None or last.pointwise or last.X.v != X.v or last.R.v != R.v or any(
                    isinstance(d, (TopK, Scan)) and owner.get(id(d)) is last for d in deps) or isinstance(r, Scan) \
                    or any(isinstance(d, Scan) for d in last.reduces):  # a scan's kernel is its own
                last = Kernel(len(self.kernels), src, kept, dims)
                self.kernels.append(last)
            last.reduces.append(r)
            r.dims_ = dims
            owner[id(r)] = last
        self.owner = owner
        pointwise: dict = {}
        for n, o in enumerate(self.outputs):
            if isinstance(o, TopKPart):
                o.topk.outs[o.which] = n
                continue
            if isinstance(o, ScanOut):
                o.scan.outs[n] = o  # the scan kernel writes it, in the scan's dtype
                continue
            if isinstance(o, Global):
                raise Unsupported("the reference returns an input unchanged")
            deps = [d for d in _deps(o)]
            ks = [owner[id(d)] for d in deps]
            k = max(ks, key=lambda k: k.index) if ks else None
            numel = prod(o.shape)
            if k is None:
                k = self._host(o)
            if k is not None and any(isinstance(r, (Scan, TopK)) for r in k.reduces):
                k = None  # math on a scan's or top-k's result: a kernel after it reads it (a pointwise one, below)
            if k is not None and numel.v == k.X.v * k.R.v and len(o.shape):
                k.full_outs.append((n, o))
            elif k is not None and numel.v == k.X.v and not (numel.v == 1 and k.X.v == 1 and k.R.v > 1 and False):
                k.row_outs.append((n, o))
            else:
                self._pointwise_out(pointwise, n, o)
        for k in list(self.kernels):
            if not k.pointwise and k.full_outs and k.X.t == "1" and not any(isinstance(r, TopK) for r in k.reduces):
                # a reduction of the whole tensor (x / norm(x)): in its own kernel one block would walk every element
                # twice (35.9 ms for 2^26 elements on the H200); a pointwise kernel writes the full-size outputs from
                # the stored result, so the reduction's columns can split over blocks (KernelWriter.splittable)
                for n, o in k.full_outs:
                    self._pointwise_out(pointwise, n, o)
                    # its split reduction sweeps the tensor from the first tile to the last (tile kt * SPLIT + sp
                    # of every block at once): walked from the last row, the pointwise pass first reads what the
                    # reduction read last, which the L2 (50 MB on an H200) may still hold
                    pointwise[prod(o.shape).v].reverse = True
                    k.reread = True
                k.full_outs = []

    def _host(self, o: V):
        """The reduction kernel that also writes ``o``, an output that reads no reduction (the new residual ``x + r``
        next to ``rmsnorm(x + r)``), or None: the first kernel (no top-k) whose domain is ``o``'s shape and which
        reads every input ``o`` reads. It holds the row in registers when it fits (``schedule``'s ``reread``), so
        the output costs its store only; a pointwise kernel of its own would read those inputs a second time (the
        H200: add_rmsnorm_residual at 65-68% of a copy, two of its six units of traffic)."""
        reads = _globals(o)
        for k in self.kernels:
            if k.pointwise or any(isinstance(r, (TopK, Scan)) for r in k.reduces) or k.X.v == 1:
                continue
            if [s.v for s in k.anchor.shape] != [s.v for s in o.shape]:
                continue
            if reads <= set().union(*(_globals(r.value) for r in k.reduces)):
                return k
        return None

    def _pointwise_out(self, pointwise: dict, n: int, o: V) -> None:
        """Output ``n`` written by a pointwise kernel over its elements (one per element count, made on first use)."""
        key = prod(o.shape).v
        if key not in pointwise:
            shape = o.shape if len(o.shape) else [ONE]
            anchor = Fn(shape, o.dtype, None)
            kp = Kernel(len(self.kernels), anchor, list(range(len(shape) - 1)), [len(shape) - 1], pointwise=True)
            pointwise[key] = kp
            self.kernels.append(kp)
        pointwise[key].full_outs.append((n, o))

    def render_kernels(self, knobs: dict) -> tuple[list[str], str]:
        """(kernel factory texts, forward body) with the schedule ``knobs``: each kernel's factory, followed by its
        short-columns one where it has one (``fusion_short``), which forward launches instead when
        ``schedule_short`` gives it a schedule (at most ``SHORT_COLS`` columns)."""
        from tileagent.drafters.builtin.fusion_short import short_variant

        for _ in range(2):  # the first pass learns which reductions later kernels read
            texts = [(write_parts(self, k, knobs), short_variant(self, k, knobs))  # pointwise: maybe by
                     for k in self.kernels]  # parts (fusion_parts); a reduction: maybe short (fusion_short)
        factories = [f for main, short in texts for f in [main[0]] + ([short[0]] if short else [])]
        return factories, self.forward([(main[1], short[1] if short else None) for main, short in texts])

    def forward(self, calls) -> str:
        lines = [f"        {name} = {text}\n" for name, text in self.t.binds.items()]
        results = {}
        for k, ((call, outs), short) in zip(self.kernels, calls):
            lhs = ", ".join(outs)
            if short is not None:  # SHORT_COLS (a knob) or fewer columns: the columns in a loop, rows on threads
                lines.append(f"        {short[2]}\n")
                lines.append(f"        if short{k.index}:\n")
                lines.append(f"            {', '.join(short[1])} = {short[0]}\n")
                lines.append("        else:\n")
                lines.append(f"            {lhs} = {call}\n")
                continue
            lines.append(f"        {lhs} = {call}\n")
        rets = []
        for n, o in enumerate(self.outputs):
            shape = ", ".join(s.t for s in o.shape)
            rets.append(f"o{n}.view({shape}{',' if len(o.shape) == 1 else ''})" if o.shape else f"o{n}.view(())")
        lines.append(f"        return {', '.join(rets)}\n" if len(rets) > 1 else f"        return {rets[0]}\n")
        del results
        return "".join(lines)




# -- one text for every config ---------------------------------------------------------------------------------------

NUMBER = r"(?<![\w.])(\d+\.\d+|\d+)(?![\w.])"


def dims_of(trace: AtenTrace) -> dict:
    """(Python text of a tensor in forward, dim) -> its size at the trace's config, for inputs and parameters."""
    from tileagent.drafters.builtin.templates.common import param_ref

    out = {}
    for k, shape in enumerate(trace.input_shapes):
        name = trace.input_names[k] if k < len(trace.input_names) else None
        for d, s in enumerate(shape):
            if name:
                out[(name, d)] = int(s)
    for name, t in list(trace.model.named_parameters()) + list(trace.model.named_buffers()):
        for d, s in enumerate(t.shape):
            out[(param_ref(trace.model, name), d)] = int(s)
    return out


def floats_of(trace: AtenTrace) -> dict:
    """Model attributes that are numbers (``self.eps``, ``self.k``), by their forward text."""
    return {f"self.{k}": v for k, v in vars(trace.model).items() if type(v) in (float, int)
            and not k.startswith("_") and k != "training"}


DERIVED = range(2, 17)  # the factors k of a number derived from a size: size // k or size * k (half a width: d // 2)


def _derived(nums: list, tables: list, n: int) -> str | None:
    """The forward text of ``size // k`` or ``size * k`` (a size: an input's shape or an int attribute of Model, a
    ``k`` in ``DERIVED``) equal to ``nums`` at each of the ``n`` configs, exactly (a half of ``self.dim`` computed in
    forward: ``arange(self.dim // 2)``), or None. ``tables``: per config, the shapes' then the attributes' values by
    forward text (``tables[c]`` and ``tables[n + c]`` for config ``c``)."""
    for first in (0, n):
        for text in tables[first]:
            vals = [tables[first + c].get(text) for c in range(n)]
            if any(type(v) is not int or v <= 0 for v in vals):
                continue
            for k in DERIVED:
                if all(v % k == 0 and v // k == x for v, x in zip(vals, nums)):
                    return f"{text} // {k}"
                if all(v * k == x for v, x in zip(vals, nums)):
                    return f"{text} * {k}"
    return None


def _product(nums: list, dims: list) -> str | None:
    """The forward text of the product of two or more adjacent dims of one input or parameter (``x.shape[2] *
    x.shape[3]``: a view flattening them, LayerNorm over the last two dims) equal to ``nums`` at each config, or
    None. ``dims``: per config, ``dims_of``'s table."""
    for name, d in dims[0]:
        for last in range(d + 1, 8):
            keys = [(name, e) for e in range(d, last + 1)]
            if any(k not in t for t in dims for k in keys):
                break
            if all(math.prod(t[k] for k in keys) == n for t, n in zip(dims, nums)):
                return " * ".join(f"{name}.shape[{e}]" for e in range(d, last + 1))
    return None


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
        if source is None and all(n.is_integer() for n in nums) and len(set(nums)) > 1:
            source = _derived(nums, [{f"{key[0]}.shape[{key[1]}]": v for key, v in d.items()} for d in dims] +
                              [{k: v for k, v in f.items() if type(v) is int} for f in floats], len(keep))
        if source is None and all(n.is_integer() for n in nums) and len(set(nums)) > 1:
            source = _product(nums, dims)
        if source is None:
            raise Unsupported(f"a number of the fused kernels ({', '.join(values)} across configs) follows no "
                              f"input shape or Model attribute")
        name = names.setdefault(source, f"z{len(names)}")
        out[pos] = name if "." not in values[0] else f"(1.0 * {name})"
    return "".join(out), {v: k for k, v in names.items()}
