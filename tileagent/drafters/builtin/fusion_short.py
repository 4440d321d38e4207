"""Short reduced dims walked serially: the fusion kernel layout for reductions over a few columns whose reads run
along the innermost kept dim.

In: a ``fusion.Plan``, one of its kernels and the schedule knobs. Out: ``short_variant(plan, k, knobs)``: None, or
(the text of a factory ``kernel<n>_short``, (its call in forward, the names it returns, the let of its schedule)),
which forward launches in place of ``kernel<n>`` when ``schedule_short`` gives it a schedule: when the kernel's
column count is at most ``SHORT_COLS`` (a knob of the candidate; 0: never) and its rows make blocks of a warp or more.

Why. The fusion kernels tile rows (kept dims) x columns (reduced dims) with the columns fastest across threads,
right for a row reduction over the last dim. A reduction over a short dim that is not the innermost one reads its
input along the innermost *kept* dim instead: EmbeddingBag's mean of K gathered rows of D values is rows (B, D) x
columns K, and the tiled layout had consecutive threads read 2 bytes each from K different gathered rows (with
BR = 32 at K = 8, 75% of the lanes masked), then split the columns over blocks into a float32 workspace and a second
kernel (H200: 49-57% of a copy's bandwidth). Here a block takes BM consecutive rows, a thread a few consecutive ones
(``SHORT_PER`` values: one 16-byte vector of fp16), and walks the columns in an unrolled loop, accumulating in
registers: each column's read of the block's rows is one contiguous run, a 16-byte vector per thread, one kernel, no
workspace, no masked lanes. Bytes moved: the input once, the output once, as torch.compile's kernel does.

Eligibility (the kernel's structure, the same at every config): a kernel whose reductions are independent
sum/amax/amin/prod over rows that leave only per-row results (``KernelWriter.splittable``), with a kept dim, and
whose every read that moves along the columns is contiguous along the innermost kept dim (coefficient 1, that dim
nowhere else in the index) or does not read that dim at all (a gathered row's number, a per-(row, column) weight,
read alike by a block's consecutive rows). A read along the columns with another stride (a row reduction over the
last dim) leaves the kernel to the tiled layout. Reads of ``base + innermost`` become one ``T.copy`` per column of
the block's rows from ``base`` at the block's first row, where BM divides the innermost dim's size (``div``); a
read whose offset differs from the row number by column terms only (a sum over dim 0 of (N, C)) one ``T.copy`` from
``bm * BM`` plus those terms. Guarantees: the kernel computes what ``KernelWriter`` writes, in column order.
"""

from __future__ import annotations

import re

from tileagent.drafters.builtin.fusion_writer import (COMBINE, FAST_MATH, IDENT, Cx, KernelWriter, _dtype_text,
                                                      _names, _unflatten)
from tileagent.drafters.builtin.index import Dyn, Lin, Unsupported
from tileagent.drafters.builtin.pointwise_text import ON_CUDA
from tileagent.drafters.builtin.values import DT, FLOAT, TopK, _uses, kind_of


class NotShort(Exception):
    """The kernel does not take the short-columns layout (a read along the columns is not contiguous)."""


def short_variant(plan, k, knobs):
    """(factory text, (call, outs, the let of its schedule ``short<n>``)) of kernel ``k`` in the short-columns
    layout, or None when it does not apply."""
    inner = [v for v in k.xvars if v.size.v > 1]
    if not inner or not KernelWriter(plan, k, knobs).splittable() or \
            any(isinstance(r, TopK) or r.op not in COMBINE for r in k.reduces):
        return None
    try:
        return ShortWriter(plan, k, knobs, inner[-1]).write()
    except (NotShort, Unsupported):  # the tiled kernel alone, as before
        return None


class ShortWriter(KernelWriter):
    """Writes ``kernel<n>_short``: the block's BM rows along the threads, the columns in an unrolled loop."""

    def __init__(self, plan, k, knobs, inner):
        super().__init__(plan, k, knobs)
        self.inner = inner  # the innermost kept dim's loop atom (stride 1 in the rows)
        self.col_reads = 0  # reads along the columns that are contiguous along the rows
        self.copies: dict = {}  # fragment -> (its T.copy, whether it moves with the column)
        self.col_lets: dict = {}  # text -> (name, let, whether it moves with the column): block-uniform row numbers

    def prelude(self, mode):
        return super().prelude("row" if mode == "short" else mode)

    def read_global(self, cx: Cx, g, flat: Lin):
        if cx.mode != "short":
            return super().read_global(cx, g, flat)
        k = self.k
        xs = {v.name for v in k.xvars}
        rs = {v.name for v in k.rvars}
        known = xs | rs | set(self.plan.t.binds) | set(self.params) | {"T"}
        names = _names(flat.text())
        if kind_of(g.dtype) == FLOAT:
            rest = flat - k.row
            if not _names(rest.text()) & xs and _names(rest.text()) <= known:
                return self.copy(g, f"bm * BM + {self.base(rest)}", rest)
            coef = dict(flat.terms).get(self.inner)
            rest = flat - Lin.atom(self.inner)
            if coef is not None and coef.v == 1 and _names(rest.text()) <= known - {self.inner.name}:
                self.row_div.append(self.inner.size)  # BM divides it: the block's rows share the outer dims
                return self.copy(g, f"{self.base(rest)} + b{self.inner.name}", rest)
        moves = bool(names & rs) or not names <= known  # a let of the body may read a column atom
        coef = dict(flat.terms).get(self.inner)
        along_rows = coef is not None and coef.v == 1 and self.inner.name not in \
            _names((flat - Lin.atom(self.inner)).text())
        if moves and self.inner.name in names and not along_rows or moves and not names <= known:
            raise NotShort(f"{g.name} read along the columns with a stride")
        self.col_reads += moves and along_rows
        text = f"{self.param(g)}[{flat.text()}]"
        return f"T.cast({text}, \"float32\")" if kind_of(g.dtype) == FLOAT else text

    def base(self, rest: Lin) -> str:
        """``rest``'s text at the block's first row: x atoms as the block's (``bx``), gathered row numbers as lets
        (the copy's start stays linear in the compiler's eyes)."""
        terms = []
        for a, c in rest.terms:
            text = re.sub(r"\bx(\d+)\b", r"bx\1", a.text())
            if isinstance(a, Dyn):
                name = f"bd{len(self.col_lets)}"
                moves = bool(_names(text) & {v.name for v in self.k.rvars})
                text = self.col_lets.setdefault(text, (name, f"{name} = {text}", moves))[0]
            terms.append(text if c.t == "1" else f"{text} * {c.t}")
        return " + ".join(terms + ([rest.const.t] if rest.const.v or not terms else []))

    def copy(self, g, start: str, rest: Lin) -> str:
        """A (BM,) fragment of ``g`` copied from ``start`` (vector loads), in ``g``'s dtype."""
        key = (g.name, "short", start)
        if key not in self.frag_of:
            self.frag_of[key] = f"f{len(self.frag_of)}_{g.name}"
        f = self.frag_of[key]
        self.allocs[f] = "(BM,)"
        self.alloc_dtype[f] = f"$d_{g.name}"
        moves = bool(_names(rest.text()) & {v.name for v in self.k.rvars})
        self.copies[f] = (f"T.copy({self.param(g)}[{start}], {f})", moves)
        self.col_reads += moves
        return f"T.cast({f}[i], \"float32\")"

    def write(self):
        k = self.k
        pad = 12
        cx = Cx(self, "short")
        stmts, fills, seen = [], [], {}
        for n_red, r in enumerate(k.reduces):
            key = (r.op, id(r.value), tuple(r.dims))
            if key in seen:  # the same reduction again (a mean and a sum of the same values): one accumulator
                self.red_alias[n_red] = seen[key]
                self.done.add(id(r))
                continue
            seen[key] = n_red
            self.allocs[f"red{n_red}"] = "(BM,)"
            val = cx.convert(r.value, r.value.load(cx, k.domain_index(r.src, r.dims)), FLOAT)
            fills.append(" " * pad + f"T.fill(red{n_red}, {IDENT[r.op]})")
            stmts.append(f"red{n_red}[i] = {COMBINE[r.op].format(a=f'red{n_red}[i]', b=val)}")
            self.done.add(id(r))
        if not self.col_reads:
            raise NotShort("no contiguous read along the columns")
        once = [let for _, let, moves in self.col_lets.values() if not moves] + \
            [s for s, moves in self.copies.values() if not moves]
        per_col = [let for _, let, moves in self.col_lets.values() if moves] + \
            [s for s, moves in self.copies.values() if moves]
        q = " " * (pad + 4)
        body = [" " * pad + s for s in once] + fills + [
            " " * pad + "for kr in T.unroll(NR):  # the columns in order; unrolled: every column's loads in flight"]
        body += [q + s for s in ["rg = kr", *_unflatten("rg", k.rvars)]]
        body += [q + s for s in per_col]
        body += self.body(cx, "short", stmts, pad + 4)
        out_params: list = []
        body += self.row_outputs(out_params, pad)
        return self.assemble_short(body, out_params)

    def assemble_short(self, body: list[str], out_params: list):
        k = self.k
        ins = list(self.params.items())
        sig = [decl for _, (decl, _, _) in ins] + [decl for _, decl, _ in out_params]
        out_idx = list(range(len(ins), len(ins) + len(out_params)))
        syms = sorted(s for s in self.plan.t.binds if _uses("\n".join(sig + body) + k.X.t + k.R.t, s))
        dts = sorted({f"d_{g.name}" for _, (_, _, g) in ins if g is not None})
        on_cuda = _uses("\n".join(body), ON_CUDA)
        factory_args = syms + dts + [ON_CUDA] * on_cuda + ["BM", "THREADS"]
        allocs = [" " * 12 + f"{n} = T.alloc_fragment({shape}, {_dtype_text(self.alloc_dtype.get(n, 'float32'))})"
                  for n, shape in self.allocs.items()]
        if self.row_div:  # the block's first row, where the contiguous runs start
            allocs += [" " * 12 + s for s in self.block_prelude()]
        fast = any(DT.get(o.dtype) in ("float16", "bfloat16") for _, o in k.row_outs)
        name = f"kernel{k.index}_short"
        text = [f"@tileagent.jit(out_idx={out_idx}{', ' + FAST_MATH if fast else ''})",
                f"def {name}({', '.join(factory_args)}):",
                f"    NX = {k.X.t}",
                f"    NR = {k.R.t}",
                "",
                "    @T.prim_func",
                f"    def main({', '.join(sig)}):",
                "        with T.Kernel(T.ceildiv(NX, BM), threads=THREADS) as bm:"] + allocs + body + [
                "", "    return main"]
        args = ", ".join(syms + [f"TL_DTYPE[{g.ref}.dtype]" for g in
                                 sorted({g.name: g for _, (_, _, g) in ins if g is not None}.values(),
                                        key=lambda g: g.name)] + [f"{self.plan.globals[0].ref}.is_cuda"] * on_cuda)
        div = f", div={min(self.row_div, key=lambda d: d.v).t}" if self.row_div else ""
        sched = f"short{k.index}"
        call = f"{name}({args}{', ' if args else ''}*{sched})({', '.join(arg for _, (_, arg, _) in ins)})"
        outs = [f"o{n}" if n is not None else nm for nm, _, n in out_params]
        return "\n".join(text) + "\n", (call, outs, f"{sched} = schedule_short({k.X.t}, {k.R.t}{div})")
