"""Matrix-vector products in the fusion lowering: ``mm`` / ``bmm`` with N = 1 or M = 1, ``mv`` and ``addmm`` of
one (``nn.Linear`` at batch 1: a decode step's GEMV), as a float32 sum of products; larger products are the GEMM
template's and are declined here, naming their shapes.

In: the ``values.Builder`` (``b``), the ATen node and its converted arguments. Out: a lazy value (``values.V``)
reading a ``values.Reduce``. Guarantees: one rounding to the output's dtype, after the bias, as cuBLAS accumulates.
"""

from __future__ import annotations

import torch

from tileagent.drafters.builtin.index import Lin, Size, ravel, unravel
from tileagent.drafters.builtin.values import FLOAT, Fn, Reduce, _bcast


def product(b, node, name, args, kw, shape, dtype):
    """``mm`` / ``bmm`` / ``mv``, or ``addmm`` (beta = alpha = 1) as the product plus the broadcast bias."""
    if name != "addmm":
        return _matvec(b, node, name, args, shape, dtype)
    if kw.get("beta", 1) != 1 or kw.get("alpha", 1) != 1:
        b.fail(node, "addmm with beta or alpha")
    prod_, bias = _matvec(b, node, "mm", args[1:3], shape, dtype), args[0]
    return Fn(shape, dtype, lambda cx, idx: f"({prod_.load(cx, idx)} + "
              f"{cx.convert(bias, bias.load(cx, _bcast(idx, bias.shape, shape)), FLOAT)})",
              node).with_ins([prod_, bias])


def _matvec(b, node, name, args, shape, dtype):
    """A matrix-vector product (``mm`` / ``bmm`` with N = 1 or M = 1, ``mv``: a decode step's GEMV, an einsum
    against a vector) as a float32 sum of products: over the rows' K for N = 1 (contiguous reads of both), over
    the columns (dim -2) for M = 1. Larger products are the GEMM template's (declined here)."""
    a_, b_ = args[0], args[1]
    if name == "mv":  # (M, K) @ (K,): the vector as a (K, 1) matrix
        b_ = Fn(list(b_.shape) + [Size(1, None)], b_.dtype, lambda cx, idx, v=b_: v.load(cx, idx[:1]),
                node).with_ins([b_])
    M, N = a_.shape[-2], b_.shape[-1]
    lead = list(a_.shape[:-2])
    K = a_.shape[-1]

    def term(cx, i, k, j, batch):
        x = cx.convert(a_, a_.load(cx, batch + [i, k]), FLOAT)
        y = cx.convert(b_, b_.load(cx, batch + [k, j]), FLOAT)
        return f"({x} * {y})"

    nb = len(lead)
    if N.v == 1:  # (..., M, K): the rows' K
        prods = Fn(lead + [M, K], torch.float32, lambda cx, idx: term(cx, idx[nb], idx[nb + 1], Lin.c(0),
                                                                        idx[:nb]), node).with_ins([a_, b_])
        dim = nb + 1
    elif M.v == 1:  # (..., K, N): down the columns, coalesced along N
        prods = Fn(lead + [K, N], torch.float32, lambda cx, idx: term(cx, Lin.c(0), idx[nb], idx[nb + 1],
                                                                        idx[:nb]), node).with_ins([a_, b_])
        dim = nb
    else:
        b.fail(node, f"{name} of {M.v} x {K.v} by {K.v} x {N.v} (a GEMM, not a matrix-vector product)")
    r = Reduce("sum", prods, [dim], False, dtype, node)
    r.ins = [prods]
    b.reduces.append(r)
    return Fn(shape, dtype, lambda cx, idx, s=r: s.load(cx, unravel(ravel(idx, shape), s.shape)),
              node).with_ins([r])
