"""Ranking ops of the fusion lowering beside ``topk``: ``argmax`` / ``argmin`` along a dim and ``max`` / ``min``
along a dim with their indices, as a top-1 (``values.TopK`` with k = 1, which the kernel writer streams over a row's
tiles).

In: the ``values.Builder`` (``b``), the ATen node and its converted arguments. Out: lazy values (``values.V``).
Guarantees: the index is the first position of the largest (smallest) value, as torch picks among equal ones; a
reduction over the whole tensor (no dim) raises ``Unsupported`` naming it.
"""

from __future__ import annotations

import operator

from tileagent.drafters.builtin.index import Size
from tileagent.drafters.builtin.values import FLOAT, Fn, Reduce, TopK, TopKPart, V, kind_of


def top(b, src, k, node) -> TopK:
    tk = TopK(src, k, node, len(b.reduces))
    tk.ins = [src]
    b.reduces.append(tk)
    return tk


def first_extreme(b, node, name, src, dim) -> TopK:
    """The top-1 of ``src`` along ``dim`` (moved last), of its negation for ``min``: its index is the first
    position of the largest (smallest) value, as torch's argmax (argmin) picks among equal ones."""
    n = len(src.shape)
    d = dim % n
    order = [k for k in range(n) if k != d] + [d]
    shape = [src.shape[k] for k in order]
    moved = src if d == n - 1 else Fn(shape, src.dtype, lambda cx, idx, s=src, o=order: s.load(
        cx, [idx[o.index(k)] for k in range(n)]), node).with_ins([src])
    if name in ("min", "argmin"):
        if kind_of(src.dtype) != FLOAT:
            b.fail(node, f"{name} of integers")
        moved = Fn(shape, src.dtype, lambda cx, idx, s=moved: f"(-{cx.convert(s, s.load(cx, idx), FLOAT)})",
                   node).with_ins([moved])
    return top(b, moved, 1, node)


def arg_extreme(b, node, name, args, kw):
    """``argmax`` / ``argmin`` along a dim: a top-1's indices (its values a workspace the kernel writes)."""
    src, dim = args[0], args[1] if len(args) > 1 else kw.get("dim")
    if dim is None or not isinstance(src, V) or not src.shape:
        b.fail(node, f"{name} over the whole tensor (give a dim)")
    return TopKPart(first_extreme(b, node, name, src, dim), 1, b.shape_of(node))


def max_with_indices(b, node, name, args):
    """``max(x, dim)`` / ``min(x, dim)`` (values, indices): the values a reduction (amax / amin) other math may
    read; the indices, when something reads them, a top-1 as ``argmax``'s."""
    src, dim = args[0], args[1]
    keepdim = bool(args[2]) if len(args) > 2 else False
    val = node.meta["val"][0]
    shape = [Size.of(s, b.t.hints) for s in val.shape]
    used = [any(u.target is operator.getitem and u.args[1] == k and u.users for u in node.users) for k in (0, 1)]
    r = None
    if used[0]:
        r = Reduce("amax" if name == "max" else "amin", src, sorted({dim % len(src.shape)}), keepdim, val.dtype,
                   node)
        r.ins = [src]
        b.reduces.append(r)
    return [r, TopKPart(first_extreme(b, node, name, src, dim), 1, shape) if used[1] else None]
