"""Pointwise kernels that write their output as n equal parts computed apart, each in statements of its own.

In: a ``fusion.Plan``, one of its pointwise ``Kernel``s and the schedule knobs. Out: ``write(plan, k, knobs) ->
(factory text, (call in forward, output names))``, as ``KernelWriter.write``: when the output is n equal parts (a
``cat`` of equal parts along the last dim: a timestep embedding's [sin, cos], rotate_half's (-x2, x1); or rows that
a nearest 2x upsampling repeats, read at ``row // n``), a second factory ``kernel<i>_parts`` whose domain is one
part's columns (rows x P) and whose tile writes every part's values, and forward calls it when the candidate's knob
``PARTS`` is on (else the whole-row kernel, which is always written too). The output is declared (rows, n, P) and
each part's tile is stored with its own T.copy (vector stores). In the parts kernel, a cat's index lies in one part
wherever it is read, so ``views`` selects that part alone: no ``if_then_else`` per element, no other part's math
(the whole-row kernel computed both sin and cos and two exp2 for every value), and values the parts share (a
timestep's ``t * freq``) are one let of the tile's body. A read ``x[row, col // s]`` (nearest upsampling along the
row) becomes a (BM, BR // s) fragment copied with vector loads and read at ``[i, j // s]`` (``col_gather``): the
whole-row kernel read 2-byte elements through a gather with 64-bit bounds checks, each twice.

Guarantees: the parts kernel computes the same values (the split is a re-tiling: output ``(x, p, c)`` is the
element ``x * n * P + p * P + c`` of the same lazy value); it is written only when it reads fewer selects and
element gathers per value than the whole-row kernel, and not for kernels walked from their last row or with boolean
outputs. ``Unsupported`` from it falls back to the whole-row kernel alone.
"""

from __future__ import annotations

import re

from tileagent.drafters.builtin.index import Div, Lin, Size, Unsupported, prod, unravel
from tileagent.drafters.builtin.values import DT, FLOAT, INT, Fn, Global, Reduce, TopK, V

KNOB = "PARTS"


def write(plan, k, knobs: dict):
    """The kernel's factory text and forward call: the whole-row kernel, and before it the parts kernel when one
    applies (see the module docstring)."""
    from tileagent.drafters.builtin.fusion_writer import KernelWriter

    whole = KernelWriter(plan, k, knobs).write()
    found = None if knobs.get("_no_parts") or not k.pointwise or k.reverse else split_of(plan, k, knobs)
    if found is None:
        return whole
    kp = _kernel(k, *found)
    try:
        text, (call, outs) = KernelWriter(plan, kp, knobs).write()
    except Unsupported:
        return whole
    if _cost(text) >= found[0] * _cost(whole[0]):  # per value, no fewer selects and gathers: not worth a factory
        return whole
    name = f"kernel{k.index}"
    text = text.replace(f"def {name}(", f"def {name}_parts(", 1)
    call = call.replace(f"{name}(", f"{name}_parts(", 1)
    n, pp, stride = kp.parts
    # the parts kernel runs where its domain is the output's, where the parts are of equal size and where the
    # fragments it merged by value (a slice's start s // 2 and a part's offset s - s // 2) are one at run time
    guard = [f"{kp.X.t} * {(pp * n).t} == {k.X.t} * {k.R.t}"] + [f"{a} == {b}" for a, b in kp.assumed]
    return text + "\n\n" + whole[0], (f"({call} if {KNOB} and {' and '.join(guard)} else {whole[1][0]})", outs)


def fragment_key(w, g: Global, pattern) -> tuple:
    """``KernelWriter.fragment``'s key of a tile of ``g``: by its offsets' values and texts; in a parts kernel by
    their values (rotate_half's x[..., s // 2:] and the second part's x at s - s // 2 are one tile), each text
    that differs from the first one's of that value noted in ``w.k.assumed`` (forward checks them)."""
    if not w.k.parts:
        return (g.name,) + tuple((p.v, p.t) if isinstance(p, Size) else p for p in pattern)
    key = (g.name,) + tuple(p.v if isinstance(p, Size) else p for p in pattern)
    texts = w.__dict__.setdefault("frag_texts", {})
    for p, q in zip(pattern, texts.setdefault(key, pattern)):
        if isinstance(p, Size) and p.t != q.t and not {(q.t, p.t), (p.t, q.t)} & set(w.k.assumed):
            w.k.assumed.append((q.t, p.t))
    return key


def _cost(text: str) -> int:
    """Selects and element reads of global tensors in a kernel's T.Parallel bodies (not its T.copy tiles)."""
    body = [line for line in text.splitlines() if "T.copy(" not in line]
    return sum(line.count("T.if_then_else(") + len(re.findall(r"\bg_\w+\[", line)) for line in body)


def split_of(plan, k, knobs: dict):
    """``(n, shape, stride, same)``: the kernel's outputs (all of one shape) as n parts, ``shape`` a part's domain
    (the rows' dims, then P columns), ``stride`` the output's values a row of that domain (n * P, as the output's
    sizes write it), ``same`` pairs of size texts equal at the traced configs that the parts kernel takes equal (a
    cat's part sizes); or None. A cat of n equal parts along the output's last dim (read through pointwise ops),
    else rows read at ``x // n`` of the innermost row atom (the whole-row kernel's reads, probed)."""
    outs = [o for _, o in k.full_outs]
    shape = [s.v for s in outs[0].shape] if outs else []
    if not outs or len(shape) < 1 or any([s.v for s in o.shape] != shape or o.kind not in (FLOAT, INT)
                                         for o in outs):
        return None
    for o in outs:
        for v in _walk(o):
            d, sizes = getattr(v, "cat", (None, None))
            if d == len(v.shape) - 1 and [s.v for s in v.shape] == shape and len(sizes) > 1 and \
                    len({s.v for s in sizes}) == 1 and sizes[0].v > 0:
                same = [(sizes[0].t, q.t) for q in sizes[1:] if q.t != sizes[0].t]  # forward checks them
                return len(sizes), list(o.shape[:-1]) + [sizes[0]], o.shape[-1], same
    if len(shape) < 2 or not k.xvars:
        return None
    inner = k.xvars[-1]
    for flat in _probe(plan, k, knobs):
        for a, _ in flat.terms:
            if isinstance(a, Div) and a.lin == Lin.atom(inner) and a.d.e.is_Integer and 2 <= a.d.v <= 8 and \
                    inner.size.v % a.d.v == 0:
                o = outs[0]
                return a.d.v, list(o.shape[:-2]) + [o.shape[-2] // a.d, o.shape[-1]], o.shape[-1] * a.d, []
    return None


def _walk(v):
    """The lazy values ``v`` reads, through pointwise ops and views (not through reductions or inputs)."""
    seen, stack = set(), [v]
    while stack:
        x = stack.pop()
        if id(x) in seen or not isinstance(x, V):
            continue
        seen.add(id(x))
        yield x
        if not isinstance(x, (Reduce, TopK, Global)):
            stack.extend(getattr(x, "ins", ()))


def _probe(plan, k, knobs) -> list:
    """The flat indices at which the whole-row kernel reads its inputs."""
    from tileagent.drafters.builtin.fusion_writer import KernelWriter

    w, seen = KernelWriter(plan, k, knobs), []
    plain = w.read_global
    w.read_global = lambda cx, g, flat: (seen.append(flat), plain(cx, g, flat))[1]
    try:
        w.write()
    except Unsupported:
        return []
    return seen


def _kernel(k, n: int, shape: list, stride: Size, same: list):
    """The parts kernel of pointwise kernel ``k``: rows x one part's P columns, writing ``k``'s outputs."""
    from tileagent.drafters.builtin.fusion import Kernel

    kp = Kernel(k.index, Fn(shape, k.anchor.dtype, None), list(range(len(shape) - 1)), [len(shape) - 1],
                pointwise=True)
    kp.parts, kp.full_outs, kp.assumed = (n, shape[-1], stride), list(k.full_outs), list(same)
    return kp


def part_outs(w, cx, number: int, o, stmts: list, stores: list, out_params: list) -> None:
    """Output ``number`` (``o``) of a parts kernel (``w.k.parts``): a tile per part, stored to (rows, n, P)."""
    k = w.k
    n, pp, stride = k.parts
    name = f"o{number}"
    for p in range(n):
        val = o.load(cx, unravel(k.row.scale(stride) + Lin.c(pp * p) + k.col, o.shape))
        f = f"f_{name}_{p}"
        w.allocs[f] = "(BM, BR)"
        if o.kind == FLOAT:
            stmts.append(f"{f}[i, j] = {cx.convert(o, val, FLOAT)}")
        else:
            w.alloc_dtype[f] = DT[o.dtype]
            stmts.append(f"{f}[i, j] = T.cast({cx.convert(o, val, INT)}, \"{DT[o.dtype]}\")")
        stores.append(f"T.copy({f}, {name}[bm * BM:bm * BM + BM, {p}, bn * BR:bn * BR + BR])")  # masked per dim
    out_params.append((name, f"{name}: T.Tensor(({k.X.t}, {n}, {pp.t}), \"{DT[o.dtype]}\")", number))


def col_gather(w, cx, g: Global, flat: Lin, pitch: Size):
    """``flat = row * pitch + col // s + c`` (s in 2, 4, 8; the part's columns in the row): a (BM, BR // s)
    fragment copied from the (rows, pitch) view at the tile's first column over s, read at ``[i, j // s]`` (the
    layout gives a thread the fragment's values its s-times-wider output columns need: one 8-byte load of four
    16-bit values for 8 output values, where the element gather read each value twice with a bounds check). None
    for any other form."""
    k = w.k
    rest = flat - k.row.scale(pitch)
    if len(rest.terms) != 1 or rest.terms[0][1].v != 1:
        return None
    a = rest.terms[0][0]
    if not isinstance(a, Div) or a.lin != k.col or not a.d.e.is_Integer or a.d.v not in (2, 4, 8):
        return None
    s, c0 = a.d.v, rest.const
    if c0.v < 0 or c0.v + (k.R.v + s - 1) // s > pitch.v or prod(g.shape).v % pitch.v:
        return None
    key = (g.name, "cdiv", c0.v, c0.t, pitch.v, pitch.t, s)
    f = w.frag_of.setdefault(key, f"f{len(w.frag_of)}_{g.name}")
    w.allocs[f] = f"(BM, BR // {s})"
    off = "" if c0.v == 0 else f" + {c0.t}"
    cx.loads[f] = f"T.copy({w.param(g, pitch)}[bm * BM, bn * (BR // {s}){off}], {f})"
    if g.dtype.itemsize != 4 or not g.dtype.is_floating_point:
        w.alloc_dtype[f] = f"$d_{g.name}"
    return f"T.cast({f}[i, j // {s}], \"float32\")"
