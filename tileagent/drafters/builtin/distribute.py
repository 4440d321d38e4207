"""Fewer passes for loss-style graphs: the DISTRIBUTE plan of the fusion lowering (issue 14).

In: the fusion planner's reductions (``values.Reduce``) and kernels, and a ``fusion_writer.KernelWriter`` writing a
kernel with an online max / sum-of-exponentials pair (``fusion_onepass.online_pair``). Out:

- ``earlier_kernel``: the earliest kernel of a reduction's (rows, columns) domain that its operands allow (every
  reduction it reads is computed by that kernel or an earlier one), so a reduction the graph lists after others
  joins the kernel that already reads its rows: label smoothing's ``sum(log_softmax(x))`` comes after the nll's
  mean over the batch in the graph, and made a kernel of its own that read the logits again (7 launches, 4 of them
  over the batch, where 3 do the work);
- ``riders``: the later sums of that kernel whose value is ``a + u`` (``a - u``, ``-a``, ``u * (...)``), where the
  row-uniform terms ``u`` (size 1 along the reduced dims: the row's max, ``log(sum(exp))``) read the pair and ``a``
  reads no reduction of the kernel. Over a row of several tiles (NK > 1) such a sum rides the pair's one pass over
  the row: ``sum(a + u) = sum(a) + n * u`` and ``sum(f * a) = f * sum(a)``, where ``sum(a)`` alone needs no
  statistic of the row; otherwise it is a second pass that reads the row from memory again (label smoothing at
  C=21841: 43 KB a row, read twice).

Numerics: the pulled-out form cancels ``sum(a)`` against ``n * u`` (``sum(x) - C * logsumexp(x)``), which loses the
float32 accuracy of a large common offset (logits near 1000: each term near 2e7 for 21841 classes, the difference
near 2e5). Each lane therefore sums ``a`` less its own first value, and the lanes combine about one pivot ``p`` of
the row (the largest lane pivot, as ``fusion_onepass.moments`` does): ``sum(a - p) + n * ((p + u1) + u2 ...)``, every
term the size of the row's spread, not its offset. A row that is one tile in registers (NK == 1) keeps the plain
passes and the graph's own arithmetic: the rewrite only replaces a re-read of memory. Guarantees: a rider leaves
its raw sum in ``red<n>``, as its plain pass would (the reduction's ``post``, a mean's division, applies on reading).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tileagent.drafters.builtin.index import Unsupported
from tileagent.drafters.builtin.scan import Scan
from tileagent.drafters.builtin.values import FLOAT, Reduce, TopK, _bcast, _uses

if TYPE_CHECKING:
    from tileagent.drafters.builtin.fusion_writer import KernelWriter

aten = torch.ops.aten


def earlier_kernel(kernels: list, owner: dict, r, deps: list, X, R):
    """The earliest reduction kernel of ``r``'s domain (``X`` rows of ``R`` columns) at or after the kernels of
    every reduction ``r`` reads (``deps``), or None. Not a kernel with a top-k or scan (their kernels are their own),
    and not a whole-tensor reduction (X = 1) that computes one of ``deps``: its columns split over blocks only while
    its reductions are independent (``KernelWriter.splittable``)."""
    if isinstance(r, (TopK, Scan)) or any(isinstance(d, (TopK, Scan)) for d in deps):
        return None
    after = max((owner[id(d)].index for d in deps if id(d) in owner), default=-1)
    for k in kernels:
        if k.index < after or k.pointwise or k.X.v != X.v or k.R.v != R.v:
            continue
        if any(isinstance(q, (TopK, Scan)) for q in k.reduces):
            continue
        if k.X.v == 1 and any(owner.get(id(d)) is k for d in deps):
            continue
        return k
    return None


class Rider:
    """A sum ``r`` = ``factor * sum(a) + n * shift`` over the kernel's columns: ``parts`` the (sign, V) terms of
    ``a`` (read per value), ``uniform`` the (sign, V or number) row-uniform terms, ``factors`` row-uniform V's."""

    def __init__(self, n: int, r: Reduce, parts: list, uniform: list, factors: list):
        self.n, self.r, self.parts, self.uniform, self.factors = n, r, parts, uniform, factors

    def tile(self, w: KernelWriter, cx, idx) -> list[str]:
        """The statements of the rider in the pair's pass over a tile (``idx``: the summed value's index)."""
        shape = self.r.src.shape
        text = ""
        for sign, v in self.parts:
            t = cx.convert(v, v.load(cx, _bcast(idx, v.shape, shape)), FLOAT)
            text = (f"(-{t})" if sign < 0 else t) if not text else f"({text} {'+' if sign > 0 else '-'} {t})"
        n = self.n
        w.allocs[f"rp{n}"] = w.allocs[f"ra{n}"] = "(BM, BR)"
        w.allocs[f"red{n}"] = w.allocs[f"rv{n}"] = "(BM,)"
        return [f"ra{n}v = {text}",
                f"rp{n}[i, j] = T.if_then_else(kk == 0, ra{n}v, rp{n}[i, j])  # the lane's first value (NK > 1: "
                f"every lane has one in tile 0)",
                f"ra{n}[i, j] = ra{n}[i, j] + T.if_then_else(rg < NR, ra{n}v - rp{n}[i, j], 0.0)"]

    def finish(self, w: KernelWriter, idx, pad: int) -> list[str]:
        """The lines after the pass: the lanes' sums about the row's pivot, then the row-uniform terms added."""
        n, p = self.n, " " * pad
        cx = w.context("row")
        shape = self.r.src.shape
        shift = f"rv{n}[i]"
        for sign, u in self.uniform:
            t = u if isinstance(u, str) else cx.convert(u, u.load(cx, _bcast(idx, u.shape, shape)), FLOAT)
            shift = f"({shift} {'+' if sign > 0 else '-'} {t})"
        total = f"red{n}[i] + NR * {shift}"
        for f in self.factors:
            total = f"{cx.convert(f, f.load(cx, _bcast(idx, f.shape, shape)), FLOAT)} * ({total})"
        if cx.loads or any(_uses("\n".join(cx.lines + [total]), v.name) for v in w.k.rvars):
            raise Unsupported("a rider's row-uniform term reads a column")  # the plan without riders serves
        return [p + f"T.reduce_max(rp{n}, rv{n}, dim=1)  # one of the row's values: the row's pivot",
                p + "for i, j in T.Parallel(BM, BR):",
                p + "    cnt = T.cast((NR - j + BR - 1) // BR, \"float32\")  # the lane's values: its column's tiles",
                p + f"    ra{n}[i, j] = (rp{n}[i, j] - rv{n}[i]) * cnt + ra{n}[i, j]  # the lane's sum less the "
                    f"row pivot's",
                p + f"T.reduce_sum(ra{n}, red{n}, dim=1)",
                p + "for i in T.Parallel(BM):"] + [p + "    " + s for s in w.prelude("row") + cx.lines] + [
                p + f"    red{n}[i] = {total}  # sum(a - p) + n * (p + the row-uniform terms)"]


def riders(w: KernelWriter, pair: tuple) -> list[Rider]:
    """The later sums of ``w``'s kernel that can ride the pass of the online ``pair`` (its max and sum Reduces), in
    kernel order; none unless the plan is the DISTRIBUTE one. A rider's row-uniform terms may read only the pair and
    earlier kernels, and its per-value part no reduction of this kernel; a sum whose uniform terms read nothing of
    this kernel is one pass already and is left alone."""
    k, plan = w.k, w.plan
    if not plan.distribute:
        return []
    out, done = [], {id(q) for q in pair}
    start = max(k.reduces.index(q) for q in pair) + 1
    for n, r in enumerate(k.reduces[start:], start):
        if not isinstance(r, Reduce) or r.op != "sum" or r.value is not r.src or id(r) in w.done \
                or r.node is None or not r.node.args:
            continue
        split = linear(plan.env, r.node.args[0], r)
        if split is None:
            continue
        parts, uniform, factors = split
        here = [id(d) for v in [u for _, u in uniform if not isinstance(u, str)] + factors for d in _reduces(v)
                if plan.owner.get(id(d)) is k]
        if not here or any(h not in done for h in here):
            continue  # one pass already, or reads a statistic of this kernel the pass does not compute
        if any(plan.owner.get(id(d)) is k for _, v in parts for d in _reduces(v)):
            continue
        out.append(Rider(n, r, parts, uniform, factors))
    return out


def _reduces(v) -> list:
    from tileagent.drafters.builtin.fusion_writer import _deps

    return _deps(v) if not isinstance(v, (Reduce, TopK, Scan)) else [v]


def uniform(v, r: Reduce) -> bool:
    """Whether ``v`` (broadcast to ``r``'s source shape) has size 1 along every dim ``r`` reduces."""
    shape, n = r.src.shape, len(r.src.shape)
    off = n - len(v.shape)
    return off >= 0 and all(d - off < 0 or v.shape[d - off].v == 1 for d in r.dims)


def linear(env: dict, node, r: Reduce):
    """``(parts, uniform, factors)``: ``node``'s value (the summed one) as ``prod(factors) * (sum of sign * part +
    sum of sign * uniform)`` through float32 add, sub, neg and (outermost) mul by a row-uniform factor; None when
    nothing row-uniform comes out or a step is not float32 (a 16-bit step rounds: not linear)."""
    parts, uni, factors = [], [], []

    def value(a):
        return env.get(a) if isinstance(a, torch.fx.Node) else a

    def float32(a):
        v = value(a)
        return getattr(v, "dtype", None) == torch.float32

    def walk(a, sign, top):
        v = value(a)
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            uni.append((sign, repr(float(a))))
            return True
        if v is None or not hasattr(v, "shape"):
            return False
        if uniform(v, r):
            uni.append((sign, v))
            return True
        t = a.target if isinstance(a, torch.fx.Node) else None
        alpha = a.kwargs.get("alpha", 1) if t is not None else 1
        if t in (aten.add.Tensor, aten.sub.Tensor) and alpha == 1 and float32(a) and len(a.args) == 2:
            return walk(a.args[0], sign, False) and walk(a.args[1], sign if t is aten.add.Tensor else -sign, False)
        if t is aten.neg.default and float32(a):
            return walk(a.args[0], -sign, False)
        if t is aten.mul.Tensor and top and float32(a) and len(a.args) == 2:
            x, y = (value(b) for b in a.args)
            for f, rest in ((x, a.args[1]), (y, a.args[0])):
                if hasattr(f, "shape") and uniform(f, r) and getattr(f, "dtype", None) == torch.float32:
                    factors.append(f)
                    return walk(rest, sign, True)
        if getattr(v, "dtype", None) != torch.float32:
            return False
        parts.append((sign, v))
        return True

    if not walk(node, 1, True) or not parts or not (uni or factors):
        return None
    return parts, uni, factors
