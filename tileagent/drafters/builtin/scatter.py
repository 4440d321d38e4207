"""Scatters of the fusion lowering as reductions: each output element reduces the source values whose index names it.

In: one ATen scatter of the graph: ``scatter_add``, ``scatter_reduce`` (sum, amax, amin; ``include_self=True``),
``scatter`` of a number (``zeros.scatter_(1, labels, 1.0)``: a one-hot) or ``index_put`` with ``accumulate=True`` on
one dim (``index_add``, ``x.index_put_((ix,), v, accumulate=True)``). Out: ``lower(builder, ...) -> V``: the output,
``self`` combined with a ``Reduce`` over a value of the output's shape plus one dim, the scattered positions: at
``(o, l)`` the source value at position ``l`` where the index there equals ``o``'s coordinate along the dim, else the
reduction's identity. The planner places it like any reduction (rows: the output's elements, columns: the positions).

Guarantees: the result is the op's (up to the order of a float sum, in float32 as torch's CUDA kernels accumulate);
each output element reads the whole index along the dim, so the output's size along it is at most ``SCATTER_BINS`` (a
histogram, a one-hot, a small table); a larger one (``index_add`` into thousands of rows) raises ``Unsupported``, as do
forms outside the above (an index shaped unlike the output off the dim, a boolean or several index tensors,
``include_self=False``, ``mean`` / ``prod``, ``scatter`` of a tensor: which duplicate wins is the device's; a sum
into float16 / bfloat16, which eager rounds after every add in the device's order).
"""

from __future__ import annotations

import torch

from tileagent.drafters.builtin.values import DT, FLOAT, Fn, Reduce, _bcast, kind_of, literal

SCATTER_BINS = 256  # the most output positions along the dim: each reads every index value along it
IDENTITY = {"sum": 0.0, "amax": float("-inf"), "amin": float("inf")}
COMBINE = {"sum": "({a} + {b})", "amax": "T.max({a}, {b})", "amin": "T.min({a}, {b})"}


def lower(builder, node: torch.fx.Node, name: str, args: list, kw: dict, shape: list, dtype: torch.dtype):
    """The output of the scatter ``name`` (see the module docstring).

    Raises:
        Unsupported: a form outside the module docstring's, or more than ``SCATTER_BINS`` positions along the dim.
    """
    base = args[0]
    n = len(base.shape)
    if name == "index_put":
        indices = list(args[1])
        accumulate = args[3] if len(args) > 3 else kw.get("accumulate", False)
        held = [k for k, ix in enumerate(indices) if ix is not None]
        if not accumulate or len(held) != 1 or len(indices[held[0]].shape) != 1 or \
                indices[held[0]].dtype == torch.bool:
            builder.fail(node, "index_put other than an accumulation at one 1-d integer index (index_add)")
        d, index, src, op = held[0], indices[held[0]], args[2], "sum"
    else:
        d, index = args[1] % n, args[2]
        src = args[3] if len(args) > 3 else kw.get("src", kw.get("value"))
        op = {"scatter_add": "sum", "scatter": "assign"}.get(name)
        if name == "scatter_reduce":
            op = {"sum": "sum", "amax": "amax", "amin": "amin"}.get(args[4] if len(args) > 4 else kw.get("reduce"))
            if op is None or not (args[5] if len(args) > 5 else kw.get("include_self", True)):
                builder.fail(node, "scatter_reduce other than sum / amax / amin including self")
        if name == "scatter" and (hasattr(src, "load") or kw.get("reduce")):
            builder.fail(node, "scatter of a tensor (which of duplicate indices wins is the device's)")
        if len(index.shape) != n or any(index.shape[k].v != base.shape[k].v for k in range(n) if k != d):
            builder.fail(node, f"{name} with an index shaped unlike the output off dim {d}")
    if op == "sum" and dtype in (torch.float16, torch.bfloat16):
        builder.fail(node, f"{name} adding into {dtype} (eager rounds to it after every add, in the device's order: "
                           f"a float32 sum differs by more than the tolerance where many indices coincide)")
    bins = base.shape[d]
    if bins.v > SCATTER_BINS:
        builder.fail(node, f"{name} into {bins.v} positions along dim {d} (more than {SCATTER_BINS}: each output "
                           f"element would read the whole index; atomic adds are not written)")
    kind = kind_of(dtype)
    acc = torch.float32 if kind == FLOAT else dtype
    count = index.shape[0] if name == "index_put" else index.shape[d]
    if op == "assign":  # a number where some index names the element: the largest match (1) or none (0)
        op, value = "amax", None
    else:
        value = src

    def element(cx, idx, d=d, index=index, value=value, put=name == "index_put"):
        out, pos = idx[:-1], idx[-1]
        at = out[:d] + [pos] + out[d + 1:]
        ix = cx.int_value(index, index.load(cx, [pos] if put else at))
        hit = f"({ix} == {out[d].text()})"
        if value is None:
            return f"T.if_then_else({hit}, 1.0, 0.0)"
        if put:  # index_put's values broadcast to base[:d] + (count,) + base[d + 1:]
            v = value.load(cx, _bcast(at, value.shape, at)) if hasattr(value, "load") else literal(value, kind)
        else:
            v = value.load(cx, at) if hasattr(value, "load") else literal(value, kind)
        v = cx.convert(value, v, kind_of(acc)) if hasattr(value, "load") else v
        return f"T.if_then_else({hit}, {v}, {literal(IDENTITY[op], kind_of(acc))})"

    wide = Fn(list(shape) + [count], acc, element, node).with_ins(
        [a for a in (index, value) if hasattr(a, "load")])
    red = Reduce(op, wide, [n], False, acc, node)
    red.ins = [wide]
    builder.reduces.append(red)

    def load(cx, idx, base=base, red=red, src=src, scalar=value is None):
        r = red.load(cx, idx)
        if scalar:  # scatter of a number: it where an index names the element, else the base
            return f"T.if_then_else({r} > 0.0, {literal(src, kind)}, {cx.convert(base, base.load(cx, idx), kind)})"
        b = cx.convert(base, base.load(cx, idx), kind_of(acc))
        text = COMBINE[op].format(a=b, b=r)
        return f"round16({text}, \"{DT[dtype]}\")" if dtype in (torch.float16, torch.bfloat16) else text
    return Fn(shape, dtype, load, node).with_ins([base, red])
