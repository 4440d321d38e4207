"""One pass over a row of several tiles for two reductions where the second reads the first (the fusion kernel
writer's one-pass statistics).

In: a ``fusion_writer.KernelWriter`` writing a kernel, the index and ``Reduce`` of the first reduction (an ``amax``, a
``sum``) and the indentation. Out: ``online_pair`` (a row's max and the sum of exponentials relative to it: softmax,
logsumexp, cross-entropy) and ``moments`` (a row's sum and the sum of squared deviations about its mean: LayerNorm,
GroupNorm, InstanceNorm): ``(index of the second reduction, the second Reduce, DSL lines)`` (``moments`` adds the
lines for a row of one tile, a plain sum then the deviations correcting it, and leaves the row's mean rather than its
sum in the register where only means read it: ``Plan.mean_stored``), or None when the kernel has no such
pair. The writer emits the lines for rows of several tiles (NK > 1) and two plain passes for a row held in registers
(``KernelWriter.one_tile_or_one_pass``). Guarantees: the lines leave both results in
``red<n>`` (BM,) fragments, as two plain passes would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tileagent.drafters.builtin.distribute import riders
from tileagent.drafters.builtin.values import FLOAT, Reduce, _bcast, _uses

if TYPE_CHECKING:
    from tileagent.drafters.builtin.fusion_writer import KernelWriter


def online_pair(w: KernelWriter, n_max: int, m: Reduce, pad: int):
    """``(n_sum, sum, lines)`` when a later reduction of this kernel is ``sum(exp(x - b))`` with ``b`` from this
    ``amax(x)`` (``Reduce.online``): the lines compute both in one pass over x, each lane keeping a running max
    ``acc`` and the sum ``accs`` of its exponentials relative to it (rescaled when the max grows), then
    ``sum = reduce_sum(accs * exp(acc - b))``. A row of several tiles is then read once, not twice (logsumexp and
    cross-entropy over a 32000-word vocabulary). None when there is no such pair or ``b`` reads more than the max.
    """
    k = w.k
    if m.op != "amax":
        return None
    total = next((s for s in k.reduces[n_max + 1:] if isinstance(s, Reduce) and s.online is not None
                  and s.online[0] is m and id(s) not in w.done), None)
    if total is None:
        return None
    n_sum = k.reduces.index(total)
    _, x, b, shape = total.online
    ninf = "-T.infinity(\"float32\")"
    idx = k.domain_index(total.src, total.dims)
    cx = w.context("tile")
    xv = cx.convert(x, x.load(cx, _bcast(idx, x.shape, shape)), FLOAT)
    stmts = [f"xv = T.if_then_else(rg < NR, {xv}, {ninf})",
             "hi = T.max(acc[i, j], xv)",
             "lo = T.min(acc[i, j], xv)",
             "e = T.if_then_else(lo == hi, 1.0, T.exp2((lo - hi) * LOG2E))  # equal (also both -inf): 1",
             "accs[i, j] = T.if_then_else(xv > acc[i, j], accs[i, j] * e + 1.0, accs[i, j] + e)",
             "acc[i, j] = hi"]
    done = set(w.done)
    w.done.add(id(m))
    cx2 = w.context("row")
    bt = cx2.convert(b, b.load(cx2, _bcast(idx, b.shape, shape)), FLOAT)
    w.done = done
    tail = cx2.lines + [f"accs[i, j] = accs[i, j] * T.exp2((acc[i, j] - {bt}) * LOG2E)  # lanes at -inf: 0"]
    if cx2.loads or any(_uses("\n".join(tail), v.name) for v in k.rvars):
        return None
    p = " " * pad
    w.allocs[f"red{n_max}"] = w.allocs[f"red{n_sum}"] = "(BM,)"
    w.allocs["acc"] = w.allocs["accs"] = "(BM, BR)"
    w.riders = riders(w, (m, total))  # later sums that ride this pass (the DISTRIBUTE plan)
    for q in w.riders:
        stmts += q.tile(w, cx, k.domain_index(q.r.src, q.r.dims))
    lines = [p + f"T.fill(acc, {ninf})", p + "T.fill(accs, 0.0)"]
    lines += [p + f"T.fill({a}{q.n}, 0.0)" for q in w.riders for a in ("ra", "rp")]
    lines += w.tile_pass(cx, stmts, pad)
    lines.append(p + f"T.reduce_max(acc, red{n_max}, dim=1)")
    lines.append(p + "for i, j in T.Parallel(BM, BR):")
    lines += [p + "    " + line for line in w.prelude("row") + tail]
    lines.append(p + f"T.reduce_sum(accs, red{n_sum}, dim=1)")
    w.done = done | {id(m), id(total)}  # the riders' row-uniform terms read both
    for q in w.riders:
        lines += q.finish(w, k.domain_index(q.r.src, q.r.dims), pad)
    w.done = done
    return n_sum, total, lines


def moments(w: KernelWriter, n_mean: int, m: Reduce, pad: int):
    """``(n_var, var, lines)`` when a later reduction of this kernel is the variance of ``m``'s values about
    ``m`` (``Reduce.var_of``: LayerNorm, GroupNorm, InstanceNorm, ``var``): the lines compute the sum and the
    sum of squared deviations in one pass over a row of several tiles, not two (the second pass re-read the
    whole row from memory: instance_norm at 49% of a copy on the H200, three reads and a write per element).
    Each lane accumulates its values shifted by its own first value ``piv`` (``s1 = sum(x - piv)``,
    ``s2 = sum((x - piv)^2)``, exact enough since ``piv`` is one of the lane's values), then the lanes combine
    exactly (Chan, Golub and LeVeque): the lane's squared deviations about its own mean ``s2 - s1^2 / n``, plus
    ``n * (lane mean - row mean)^2``. The lanes' sums are combined about one pivot of the row (the largest lane
    pivot), so that the row's sum is rounded once, at the end, not at each step of a tree of large partial sums
    (values near 1000 over 65536-value rows: the mean was off by 2x torch's error on the H200, the evaluator's
    large-mean inputs failed). None when there is no such variance."""
    k = w.k
    if m.op != "sum" or m.value is not m.src or m.post is None:
        return None
    key = (m.op, id(m.value), tuple(m.dims))
    var = next((v for v in k.reduces[n_mean + 1:] if isinstance(v, Reduce) and v.var_of is not None
                and id(v) not in w.done and (v.var_of is m or (v.var_of.op, id(v.var_of.value),
                                                                  tuple(v.var_of.dims)) == key)), None)
    if var is None or w.plan.owner.get(id(var.var_of)) is not k:
        return None
    if var.var_of is not m:  # the variance's own mean: the same values as ``m``
        w.red_alias[k.reduces.index(var.var_of)] = n_mean
        w.done.add(id(var.var_of))
    n_var = k.reduces.index(var)
    cx = w.context("tile")
    xv = cx.convert(m.value, m.value.load(cx, k.domain_index(m.src, m.dims)), FLOAT)
    p = " " * pad
    for name in (f"red{n_mean}", f"red{n_var}", "rpiv"):
        w.allocs[name] = "(BM,)"
    for name in ("acc", "acc2", "piv"):
        w.allocs[name] = "(BM, BR)"
    stmts = [f"mx = {xv}",
             "piv[i, j] = T.if_then_else(kk == 0, mx, piv[i, j])  # every lane has a value in tile 0 (NK > 1)",
             "md = T.if_then_else(rg < NR, mx - piv[i, j], 0.0)",
             "acc[i, j] = acc[i, j] + md",
             "acc2[i, j] = acc2[i, j] + md * md"]
    count = "cnt = T.cast((NR - j + BR - 1) // BR, \"float32\")  # the lane's values: its column's tiles"
    lines = [p + "T.fill(acc, 0.0)", p + "T.fill(acc2, 0.0)", p + "T.fill(piv, 0.0)"]
    lines += w.tile_pass(cx, stmts, pad)
    lines += [p + "T.reduce_max(piv, rpiv, dim=1)  # one of the row's values: the row's pivot",
              p + "for i, j in T.Parallel(BM, BR):",
              p + "    " + count,
              p + "    acc2[i, j] = acc2[i, j] - acc[i, j] * acc[i, j] / cnt  # about the lane's mean",
              p + "    acc[i, j] = (piv[i, j] - rpiv[i]) * cnt + acc[i, j]  # the lane's sum less the row pivot's",
              p + f"T.reduce_sum(acc, red{n_mean}, dim=1)",
              p + "for i, j in T.Parallel(BM, BR):",
              p + "    " + count,
              p + f"    md = acc[i, j] / cnt - red{n_mean}[i] * (1.0 / NR)",
              p + "    acc2[i, j] = acc2[i, j] + cnt * md * md",
              p + f"T.reduce_sum(acc2, red{n_var}, dim=1)",
              p + "for i in T.Parallel(BM):"]
    lines.append(p + f"    red{n_mean}[i] = rpiv[i] * NR + red{n_mean}[i]  # the row's sum, rounded once")
    return n_var, var, lines, one_tile_moments(w, n_mean, m, n_var, var, pad)


def one_tile_moments(w: KernelWriter, n_mean: int, m: Reduce, n_var: int, var: Reduce, pad: int) -> list[str]:
    """The lines of ``moments`` for a row that is one tile in registers (NK == 1): the plain sum, then one pass
    summing the squared deviations about its mean ``m0`` and the deviations ``x - m0`` themselves, which correct the
    sum to ``m0 * NR + sum(x - m0)`` (compensated two-pass), rounded once: ``m0 * NR`` is taken as ``hi * NR``, exact
    for rows up to 2**14 (``hi``: m0's leading 10 bits, Veltkamp's split), plus ``lo * NR``. The plain float32 sum
    of 48 values near 1000 put their mean off by up to 2e-4 (torch's own LayerNorm by about as much, elsewhere):
    LayerNorm over (4, 12) failed the evaluator's large-mean inputs. A sum that is not finite stays the plain one.
    Leaves the sum in ``red<n_mean>`` and the squared deviations' sum in ``red<n_var>``, as two plain passes would."""
    from tileagent.drafters.builtin.fusion_writer import COMBINE, IDENT

    k, p = w.k, " " * pad
    lines = w.plain_pass(n_mean, m, pad)
    w.done.add(id(m))  # the deviations read it
    cx = w.context("tile")
    dev = cx.convert(var.value, var.value.load(cx, k.domain_index(var.src, var.dims)), FLOAT)
    xv = cx.convert(m.value, m.value.load(cx, k.domain_index(m.src, m.dims)), FLOAT)
    stmts = [f"acc[i, j] = {COMBINE[var.op].format(a='acc[i, j]', b=f'T.if_then_else(rg < NR, {dev}, 0.0)')}",
             f"acc2[i, j] = acc2[i, j] + T.if_then_else(rg < NR, {xv} - red{n_mean}[i] * (1.0 / NR), 0.0)"]
    lines += [p + f"T.fill(acc, {IDENT[var.op]})", p + "T.fill(acc2, 0.0)"]
    lines += w.tile_pass(cx, stmts, pad)
    q = p + "    "
    return lines + [p + f"T.reduce_sum(acc, red{n_var}, dim=1)",
                    p + "T.reduce_sum(acc2, rpiv, dim=1)  # the deviations from the plain sum's mean",
                    p + "for i in T.Parallel(BM):",
                    q + f"m0 = red{n_mean}[i] * (1.0 / NR)",
                    q + "mc = m0 * 16385.0",
                    q + "hi = T.if_then_else(T.abs(m0) < 1e30, mc - (mc - m0), m0)  # m0's leading 10 bits",
                    q + "cs = hi * NR + ((m0 - hi) * NR + rpiv[i])",
                    q + f"red{n_mean}[i] = T.if_then_else(T.abs(cs) < T.infinity(\"float32\"), cs, red{n_mean}[i])"]
