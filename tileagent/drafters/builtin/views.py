"""View-like ops of the fusion lowering: each rewrites the index at which its operand is read, reading nothing else.

In: one ATen call of the graph (``Builder.convert``'s name, operands and result's shape and dtype). Out:
``rewrite(...) -> V | list | None``: the lazy value of a reshape, expand, permute / transpose, (un)squeeze, slice,
select, diagonal, unfold, split, as_strided, cat, gather, embedding or advanced index (``index``, ``index_select``);
None for any other op (``Builder.convert`` lowers it). Guarantees: a value reads its operands at exactly the elements
the op's ATen semantics name (no copy is made); a form outside them raises ``Unsupported`` naming the op.
"""

from __future__ import annotations

import torch

from tileagent.drafters.builtin.index import ZERO, Dyn, Lin, Size, ravel, unravel
from tileagent.drafters.builtin.values import Fn, _bcast, _nothing, kind_of


def span(cx, lin: Lin) -> tuple[int, int]:
    """The least and greatest value of ``lin`` where the value being written is used: its atoms' ranges, narrowed
    where ``cx`` reads under a condition (``fusion_writer.Cx.narrowed``)."""
    narrow = getattr(cx, "narrow", {})
    lo = hi = lin.const.v
    for a, c in lin.terms:
        alo, ahi = narrow.get(a, a.rng())
        lo += min(alo * c.v, ahi * c.v)
        hi += max(alo * c.v, ahi * c.v)
    return lo, hi


def rewrite(builder, node: torch.fx.Node, name: str, args: list, kw: dict, shape, dtype, val):
    """The lazy value of the view-like op ``name`` (see the module docstring), or None when ``name`` is not one."""
    if name in ("view", "_unsafe_view", "reshape", "_reshape_alias"):
        src = args[0]
        return Fn(shape, dtype, lambda cx, idx, s=src, sh=shape: s.load(cx, unravel(ravel(idx, sh), s.shape)),
                  node).with_ins([src])
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
        start = builder.size(start) if start is not None else ZERO
        if start.v < 0:
            start = start + src.shape[d]
        step = builder.size(step)
        return Fn(shape, dtype, lambda cx, idx, s=src, d=d, st=start, sp=step: s.load(
            cx, idx[:d] + [idx[d].scale(sp) + Lin.c(st)] + idx[d + 1:]), node).with_ins([src])
    if name in ("select",):
        src = args[0]
        n = len(src.shape)
        d = args[1] % n
        i = builder.size(args[2])
        if i.v < 0:
            i = i + src.shape[d]
        return Fn(shape, dtype, lambda cx, idx, s=src, d=d, i=i: s.load(cx, idx[:d] + [Lin.c(i)] + idx[d:]),
                  node).with_ins([src])
    if name in ("diagonal", "diagonal_copy"):  # out[..., i] = src[.., i + max(-off, 0), .., i + max(off, 0), ..]
        src = args[0]
        n = len(src.shape)
        off = builder.size(args[1] if len(args) > 1 else kw.get("offset", 0))
        d1 = (args[2] if len(args) > 2 else kw.get("dim1", 0)) % n
        d2 = (args[3] if len(args) > 3 else kw.get("dim2", 1)) % n
        at = {d1: Lin.c(ZERO - off) if off.v < 0 else Lin.c(0), d2: Lin.c(off) if off.v > 0 else Lin.c(0)}

        def load(cx, idx, s=src, at=at):
            rest = iter(idx[:-1])
            return s.load(cx, [idx[-1] + at[d] if d in at else next(rest) for d in range(len(s.shape))])
        return Fn(shape, dtype, load, node).with_ins([src])
    if name in ("unfold", "unfold_copy"):  # windows along d: out[.., j, .., k] = src[.., j * step + k, ..]
        src, d, step = args[0], args[1] % max(1, len(args[0].shape)), builder.size(args[3])

        def load(cx, idx, s=src, d=d, step=step):
            return s.load(cx, idx[:d] + [idx[d].scale(step) + idx[-1]] + idx[d + 1:-1])
        return Fn(shape, dtype, load, node).with_ins([src])
    if name in ("split_with_sizes", "split"):
        src = args[0]
        n = len(src.shape)
        d = (args[2] if len(args) > 2 else kw.get("dim", 0)) % n
        parts, start = [], ZERO
        for part in val:
            psh = [Size.of(s, builder.t.hints) for s in part.shape]
            parts.append(Fn(psh, dtype if False else part.dtype, lambda cx, idx, s=src, d=d, st=start: s.load(
                cx, idx[:d] + [idx[d] + Lin.c(st)] + idx[d + 1:]), node).with_ins([src]))
            start = start + psh[d]
        return parts
    if name == "as_strided":
        src = args[0]
        sizes, strides = [builder.size(s) for s in args[1]], [builder.size(s) for s in args[2]]
        offset = builder.size(args[3]) if len(args) > 3 else ZERO

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

        def load(cx, idx, parts=parts, d=d, bounds=bounds, kind=kind, total=shape[d]):
            lo, hi = span(cx, idx[d])
            for p, b, e in zip(parts, bounds, bounds[1:] + [total]):
                if b.v <= lo and hi < e.v:  # the index lies in this part wherever it is read (a kernel that
                    # computes the parts apart, ``fusion_parts``): the part alone, no select, no other part's math
                    with cx.narrowed(idx[d], b, e) if hasattr(cx, "narrowed") else _nothing():
                        return cx.convert(p, p.load(cx, idx[:d] + [idx[d] - Lin.c(b)] + idx[d + 1:]), kind)
            # each part is read where the index falls in it (cx.narrowed: the reads may then be tiles shifted
            # along a row, which hold the part's values exactly there)
            with cx.narrowed(idx[d], bounds[-1], total) if hasattr(cx, "narrowed") else _nothing():
                text = cx.convert(parts[-1], parts[-1].load(cx, idx[:d] + [idx[d] - Lin.c(bounds[-1])] +
                                                            idx[d + 1:]), kind)
            for p, b, e in reversed(list(zip(parts[:-1], bounds[:-1], bounds[1:]))):
                with cx.narrowed(idx[d], b, e) if hasattr(cx, "narrowed") else _nothing():
                    v = cx.convert(p, p.load(cx, idx[:d] + [idx[d] - Lin.c(b)] + idx[d + 1:]), kind)
                text = f"T.if_then_else({idx[d].text()} < {e.t}, {v}, {text})"
            return text
        out = Fn(shape, dtype, load, node).with_ins(parts)
        out.cat = (d, [p.shape[d] for p in parts])  # fusion_parts splits a kernel at equal parts
        return out
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
    if name == "index_select":  # x.index_select(d, ix) is x[(:,) * d + (ix,)] (torch.roll's gather)
        args = [args[0], [None] * (args[1] % len(args[0].shape)) + [args[2]]]
        name = "index"
    if name == "index" and len(args) > 1:
        src, indices = args[0], list(args[1]) + [None] * (len(args[0].shape) - len(args[1]))
        dims = [k for k, i in enumerate(indices) if i is not None]
        if dims != list(range(dims[0], dims[0] + len(dims))):
            builder.fail(node, "advanced indexing with index tensors on dims that are not adjacent")
        d, ixs = dims[0], [indices[k] for k in dims]
        r = max(len(ix.shape) for ix in ixs)  # the index tensors broadcast to r dims, at d in the output

        def load(cx, idx, s=src, d=d, ixs=ixs, r=r):
            at = idx[d:d + r]
            picked = [Lin.atom(Dyn(cx.int_value(ix, ix.load(cx, _bcast(at, ix.shape, at))), s.shape[d + k].v - 1))
                      for k, ix in enumerate(ixs)]
            return s.load(cx, idx[:d] + picked + idx[d + r:])
        return Fn(shape, dtype, load, node).with_ins([src, *ixs])
    return None
