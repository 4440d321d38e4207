"""The kernel writer of the fusion lowering: how one kernel of a ``fusion.Plan`` is written as DSL text.

In: the plan (its kernels, outputs and which kernel owns each value), one of its ``Kernel``s and the schedule knobs.
Out: ``KernelWriter(plan, k, knobs).write() -> (the kernel factory's text, (its call in forward, the names it
returns))``. ``Cx`` is one ``T.Parallel`` body being written: its let statements, memoized reads and the tiles it
loads; values (``values.V``) read memory, reductions and temporaries through it. The plan (``fusion``) decides what
each kernel computes; this module decides how (passes over a row's tiles, block-uniform operands, reductions split
across blocks, pipelined passes when the knobs ask). Guarantees: anything it cannot write raises ``Unsupported``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch

from tileagent.drafters.builtin.fusion_onepass import moments, online_pair
from tileagent.drafters.builtin.fusion_split import IN_PLACE, pass_loads, scopes
from tileagent.drafters.builtin.fusion_parts import col_gather, fragment_key, part_outs
from tileagent.drafters.builtin.fusion_stash import stash
from tileagent.drafters.builtin.scan import Scan, ScanOut, scan_lines
from tileagent.drafters.builtin.index import ONE, Dyn, Lin, Size, Unsupported, Var, prod, ravel, unravel
from tileagent.drafters.builtin.pointwise_text import ON_CUDA
from tileagent.drafters.builtin.views import span

SHORT_ROW = 1024  # uniform_col: a row-uniform fragment only for rows longer than this when it moves every row


def _names(text: str) -> set[str]:
    """The identifiers in an index's text."""
    return set(re.findall(r"\b[A-Za-z_]\w*\b", text))
from tileagent.drafters.builtin.values import (BOOL, DT, FLOAT, INT, Global, Reduce, TopK, TopKPart, V, _simple, _uses,
                                               _where, kind_of)

if TYPE_CHECKING:
    from tileagent.drafters.builtin.fusion import Kernel, Plan

Reduce.kind = property(lambda self: FLOAT)
IDENT = {"sum": "0.0", "amax": "-T.infinity(\"float32\")", "amin": "T.infinity(\"float32\")", "prod": "1.0"}
COMBINE = {"sum": "{a} + {b}", "amax": "T.max({a}, {b})", "amin": "T.min({a}, {b})", "prod": "{a} * {b}"}
REDUCE_FN = {"sum": "T.reduce_sum", "amax": "T.reduce_max", "amin": "T.reduce_min", "prod": "T.reduce_prod"}


def _globals(v) -> set:
    """The names of the inputs and parameters ``v`` reads, through pointwise ops, views and reductions."""
    out, seen, stack = set(), set(), [v]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Global):
            out.add(x.name)
        stack.extend(a for a in getattr(x, "ins", ()) if isinstance(a, V))
        if isinstance(x, (Reduce, TopK, Scan)):
            stack.append(x.value if isinstance(x, Reduce) else x.src)
    return out


def _deps(v) -> list:
    """The reductions (and top-k) that ``v`` reads, through pointwise ops and views."""
    out, seen = [], set()

    def go(x, top):
        if id(x) in seen:
            return
        seen.add(id(x))
        if not top and isinstance(x, (Reduce, TopK, Scan)):
            out.append(x)
            return
        if isinstance(x, (TopKPart, ScanOut)):
            out.append(x.topk if isinstance(x, TopKPart) else x.scan)
            return
        for a in getattr(x, "ins", ()):
            go(a, False)

    go(v, True)
    return out


class Cx:
    """One T.Parallel body being written: its let statements and what it reads."""

    def __init__(self, w: "KernelWriter", mode: str):
        self.w, self.mode, self.path = w, mode, w.plan.t.path
        self.lines: list[str] = []
        self.memo: dict = {}
        self.loads: dict = {}
        self.gathers: dict = {}  # row-gathered fragment -> its statement (``KernelWriter.row_gather``)
        self.narrow: dict = {}  # loop atom -> (lo, hi): its values where the value being written is used

    def narrowed(self, lin: Lin, lo: Size, hi: Size):
        """A context in which ``lin``'s loop atom (``lin`` = atom + constant) takes only the values that put
        ``lin`` in [lo, hi) (a cat's part is read where the index falls in the part)."""
        import contextlib

        @contextlib.contextmanager
        def scope():
            saved = dict(self.narrow)
            if len(lin.terms) == 1 and lin.terms[0][1].v == 1 and isinstance(lin.terms[0][0], Var):
                a = lin.terms[0][0]
                alo, ahi = self.narrow.get(a, a.rng())
                self.narrow[a] = (max(alo, lo.v - lin.const.v), min(ahi, hi.v - 1 - lin.const.v))
            try:
                yield
            finally:
                self.narrow = saved
        return scope()

    def narrow_key(self):
        return tuple(sorted((repr(a), r) for a, r in self.narrow.items()))

    def let(self, text):
        name = f"v{self.w.counter}"
        self.w.counter += 1
        self.lines.append(f"{name} = {text}")
        return name

    def convert(self, v, text, kind):
        have = getattr(v, "kind", kind_of(v.dtype)) if isinstance(v, V) else kind
        if have == kind:
            return text
        if kind == FLOAT:
            return f"T.if_then_else({text}, 1.0, 0.0)" if have == BOOL else f"T.cast({text}, \"float32\")"
        if kind == BOOL:
            return f"({text} != 0)"
        return f"T.cast({text}, \"int64\")" if have == FLOAT else f"T.if_then_else({text}, 1, 0)"

    def int_value(self, v, text):
        return self.convert(v, text, INT) if _simple(text) else self.let(self.convert(v, text, INT))

    def index_value(self, lin: Lin, dtype):
        text = lin.text()
        return text if kind_of(dtype) == INT else f"T.cast({text}, \"float32\")"

    def read_global(self, g: Global, flat: Lin):
        return self.w.read_global(self, g, flat)

    def read_reduction(self, r: Reduce, kept_idx):
        return self.w.read_reduction(self, r, kept_idx)


class KernelWriter:
    """Writes one kernel factory and its call in forward."""

    def __init__(self, plan: Plan, k: Kernel, knobs: dict):
        self.plan, self.k, self.knobs = plan, k, knobs
        self.counter = 0
        self.params: dict = {}  # name -> (declaration, forward argument)
        self.allocs: dict = {}
        self.alloc_dtype: dict = {}  # fragment -> its dtype when not float32 (an integer output's tile)
        self.shared: set = set()  # tiles allocated in shared memory (a scan's, read across threads)
        self.frag_of: dict = {}
        self.done: set = set()
        self.red_alias: dict = {}  # reduction number -> the earlier one computing the same values
        self.hoisted: dict = {}  # tile loads done once before the passes when a row is one tile (NK == 1)
        self.split_reduces: list = []  # (number, op, partials buffer) of a kernel split along its columns
        self.split_at = 0
        self.allocs2: list = []
        self.passes = 0  # pipelined passes written so far
        self.staged_once: set = set()  # tiles some pipelined pass copies
        self.stage_alias: dict = {}  # a later pass's own name for a tile -> the tile (tile_pass)
        self.stage_sizes: list = []  # per pipelined pass: the elements of its tiles (Python text)
        self.block_lets: dict = {}  # text -> (name, let statement) of row-uniform values at the block's first row
        self.row_div: list = []  # strides BM must divide (uniform_col)

    # -- reads ----------------------------------------------------------------------------------------------------

    def context(self, mode: str) -> Cx:
        """A new T.Parallel body ("tile": (BM, BR) values, "row": BM values)."""
        return Cx(self, mode)

    def param(self, g: Global, pitch=None):
        if pitch is None:
            name = f"g_{g.name}"
            if name not in self.params:
                self.params[name] = (f"{name}: T.Tensor(({prod(g.shape).t},), d_{g.name})", f"{g.ref}.reshape(-1)",
                                     g)
            return name
        pitches = self.__dict__.setdefault("pitches", {})
        name = pitches.setdefault((g.name, pitch.t), f"t_{g.name}_{len(pitches)}")
        if name not in self.params:
            self.params[name] = (f"{name}: T.Tensor(({(prod(g.shape) // pitch).t}, {pitch.t}), d_{g.name})",
                                 f"{g.ref}.reshape(-1, {pitch.t})", g)
        return name

    def read_global(self, cx: Cx, g: Global, flat: Lin):
        k = self.k
        if cx.mode in ("tile", "row") and kind_of(g.dtype) == FLOAT:
            numel = prod(g.shape)
            rest = flat - k.row
            if cx.mode == "row" and rest.is_const() and rest.const.v >= 0:
                return self.fragment(cx, g, ("row", rest.const))
            if cx.mode == "tile":
                rest_c = flat - k.col
                if rest_c.is_const() and rest_c.const.v >= 0:
                    return self.fragment(cx, g, ("col", rest_c.const))
                pitch = None
                last = [v for v in k.xvars if v.size.v > 1]
                if last:
                    pitch = dict(flat.terms).get(last[-1])
                if pitch is not None and pitch.v >= k.R.v and numel.v % pitch.v == 0:
                    rest_t = flat - k.row.scale(pitch) - k.col
                    if rest_t.is_const() and 0 <= rest_t.const.v and rest_t.const.v + k.R.v <= pitch.v:
                        return self.fragment(cx, g, ("tile", rest_t.const, pitch))
                    if rest_t.is_const() and self.in_row(cx, k.col + rest_t, pitch):
                        # a tile shifted along the row (rotate_half's cat of the row's halves): the copy reads
                        # outside the row too (0 there), but every value used lies in the row
                        return self.fragment(cx, g, ("tile", rest_t.const, pitch))
                gathered = col_gather(self, cx, g, flat, pitch) if pitch is not None and k.pointwise else None
                if gathered is not None:  # x[row, col // s]: a fragment of the tile's columns over s
                    return gathered
        if cx.mode == "tile" and k.pointwise and kind_of(g.dtype) == FLOAT:
            gathered = self.row_gather(cx, g, flat)
            if gathered is not None:
                return gathered
        if cx.mode == "tile" and kind_of(g.dtype) in (FLOAT, BOOL):
            uniform = self.uniform_col(cx, g, flat)
            if uniform is not None:
                return uniform
        text = f"{self.param(g)}[{flat.text()}]"
        return f"T.cast({text}, \"float32\")" if kind_of(g.dtype) == FLOAT else text

    @staticmethod
    def in_row(cx: Cx, col: Lin, pitch: Size) -> bool:
        """Whether ``col`` lies in [0, pitch) on every lane whose value is used (the ranges ``cx.narrow`` gives the
        loop atoms where a value is read under a condition, as a cat's parts are)."""
        lo, hi = span(cx, col)
        return 0 <= lo and hi < pitch.v

    def row_gather(self, cx: Cx, g: Global, flat: Lin):
        """A read whose index depends on the row atoms only (BatchNorm's running statistics per channel, read at
        ``(row // H) % C``): a (BM,) fragment gathered once per row before the tile's loop, so the tile's values
        share its registers (and what is computed from them alone) instead of a load per value (BatchNorm eval on
        16x64x256x256: four loads and a square root per value). None when ``flat`` reads a column atom, a value
        bound inside the T.Parallel body, or no row atom at all."""
        names = _names(flat.text())
        xs = names & {v.name for v in self.k.xvars}
        if not xs or names - xs - set(self.plan.t.binds) - set(self.params) - {"T"} or "[" in flat.text():
            return None
        key = (g.name, "rowg", flat.text())
        if key not in self.frag_of:
            self.frag_of[key] = f"f{len(self.frag_of)}_{g.name}"
        f = self.frag_of[key]
        self.allocs[f] = "(BM,)"
        cx.gathers[f] = f"        {f}[i] = T.cast({self.param(g)}[{flat.text()}], \"float32\")"
        cx.loads[next(iter(cx.gathers))] = "\n".join(["for i in T.Parallel(BM):"] +  # one loop for all of them
                                                      ["    " + s for s in self.prelude("row")] +
                                                      ["    if xg < NX:"] + list(cx.gathers.values()))
        return f"{f}[i]"

    def uniform_col(self, cx: Cx, g: Global, flat: Lin):
        """``flat = base(row) + column``, ``base`` one value for the block's rows when BM divides the stride of the
        outermost row dims it reads (cos/sin per position under the heads of a rotary embedding, a padding mask per
        batch under its heads and queries, an embedding row per token with BM = 1): a (BR,) fragment loaded with one
        T.copy from ``base`` at the block's first row (vector loads) instead of an element read per value. Adds
        the stride to ``self.row_div`` (schedule's ``div``); None when ``flat`` is not of that form, or when a
        pointwise kernel's base moves with every row of rows of at most ``SHORT_ROW`` values (the frames of an
        STFT: BM = 1 made 96k blocks of 400 values, 49% of a copy on the H200): element reads then, any BM."""
        k = self.k
        rest = flat - k.col
        if rest.is_const():
            return None
        innermost = k.xvars[-1].name if k.xvars else None
        if k.pointwise and k.R.v <= SHORT_ROW and all(not isinstance(a, Dyn) for a, _ in rest.terms) and \
                any(innermost in _names(a.text()) for a, _ in rest.terms):
            return None
        strides, stride = {}, ONE
        for v in reversed(k.xvars):
            strides[v.name] = stride
            stride = stride * v.size
        terms, involved = [], set()
        for a, c in rest.terms:
            text = a.text()
            names = _names(text)
            xs = names & set(strides)
            other = names - xs - set(self.plan.t.binds) - set(self.params) - {"T"}
            if other or not xs or (not isinstance(a, Var) and "[" in text and not isinstance(a, Dyn)):
                return None  # reads a loop atom of the columns, or a value bound inside the T.Parallel body
            involved |= xs
            text = re.sub(r"\bx(\d+)\b", r"bx\1", text)
            if isinstance(a, Dyn):  # a run-time row index (a token id): a let, so the copy's start stays linear
                name = f"bd{len(self.block_lets)}"
                self.block_lets.setdefault(text, (name, f"{name} = {text}"))
                text = self.block_lets[text][0]
            terms.append(text if c.t == "1" else f"{text} * {c.t}")
        div = min((strides[n] for n in involved), key=lambda s: s.v)
        self.row_div.append(div)
        base = " + ".join(terms + ([rest.const.t] if rest.const.v else []))
        key = (g.name, "ucol", base)
        if key not in self.frag_of:
            self.frag_of[key] = f"f{len(self.frag_of)}_{g.name}"
        f = self.frag_of[key]
        self.allocs[f] = "(BR,)"
        if kind_of(g.dtype) == BOOL:
            self.alloc_dtype[f] = "bool"
        cx.loads[f] = f"T.copy({self.param(g)}[{base} + {self.col_origin()}], {f})"
        return f"{f}[j]" if kind_of(g.dtype) == BOOL else f"T.cast({f}[j], \"float32\")"

    def fragment(self, cx: Cx, g: Global, pattern):
        key = fragment_key(self, g, pattern)
        if key not in self.frag_of:
            self.frag_of[key] = f"f{len(self.frag_of)}_{g.name}"
        f = self.frag_of[key]
        kind = pattern[0]
        c0 = pattern[1]
        off = "" if c0.v == 0 else f" + {c0.t}"
        if kind == "row":
            self.allocs[f] = "(BM,)"
            cx.loads[f] = f"T.copy({self.param(g)}[bm * BM{off}], {f})"
            return f"{f}[i]"
        col0 = self.col_origin()
        if kind == "col":
            self.allocs[f] = "(BR,)"
            cx.loads[f] = f"T.copy({self.param(g)}[{col0}{off}], {f})"
            return f"{f}[j]"
        self.allocs[f] = "(BM, BR)"
        cx.loads[f] = f"T.copy({self.param(g, pattern[2])}[bm * BM, {col0}{off}], {f})"
        if g.dtype != torch.float32:  # the tile in the input's dtype: half the registers of float32 for fp16/bf16
            self.alloc_dtype[f] = f"$d_{g.name}"
            return f"T.cast({f}[i, j], \"float32\")"
        return f"{f}[i, j]"

    def col_origin(self):
        return "bn * BR" if self.k.pointwise else "kk * BR"

    def read_reduction(self, cx: Cx, r: Reduce, kept_idx):
        k = self.k
        owner = self.plan.owner[id(r)]
        kept_shape = [r.src.shape[d] for d in range(len(r.src.shape)) if d not in r.dims]
        flat = ravel(kept_idx, kept_shape)
        post = r.post or (lambda t: t)
        if owner is k:
            if id(r) not in self.done:
                raise Unsupported(f"a reduction read before it is complete ({_where(r.node, self.plan.t.path)})")
            if flat != k.row:
                import logging
                logging.getLogger(__name__).debug("row mismatch %s vs %s", flat, k.row)
                raise Unsupported(f"a reduction read at another row than its own "
                                  f"({_where(r.node, self.plan.t.path)})")
            n = k.reduces.index(r)
            return post(f"red{self.red_alias.get(n, n)}[i]")
        if r not in owner.realize:
            owner.realize.append(r)
        name = f"w{owner.index}_{owner.reduces.index(r)}"
        if name not in self.params:
            self.params[name] = (f"{name}: T.Tensor(({owner.X.t},), \"float32\")", name, None)
        return post(f"{name}[{flat.text()}]")

    # -- writing --------------------------------------------------------------------------------------------------

    def prelude(self, mode) -> list[str]:
        k = self.k
        out = ["xg = bm * BM + i", *_unflatten("xg", k.xvars)]
        if mode == "tile":
            out += [f"rg = {self.col_origin()} + j", *_unflatten("rg", k.rvars)]
        return out

    def block_prelude(self) -> list[str]:
        """The row atoms at the block's first row (``bx0``... of ``bxg = bm * BM``), as kernel-level lets."""
        return ["bxg = bm * BM"] + [line.replace("xg", "bxg").replace(f"{v.name} =", f"b{v.name} =", 1)
                                    for line, v in zip(self.prelude("row")[1:], self.k.xvars)]

    def body(self, cx: Cx, mode: str, stmts: list[str], pad: int) -> list[str]:
        loop = "for i, j in T.Parallel(BM, BR):" if mode == "tile" else "for i in T.Parallel(BM):"
        lines = [loop] + ["    " + s for s in self.prelude(mode) + cx.lines + stmts]
        if mode == "row":
            text = "\n".join(cx.lines + stmts)
            for v in self.k.rvars:
                if _uses(text, v.name):
                    raise Unsupported("a per-row value that depends on the reduced dims")
        return [" " * pad + s for s in lines]

    def loads(self, cx: Cx, pad: int, looped: bool = False) -> list[str]:
        """The tile loads of a pass; in a pass over column tiles they run per tile only when a row spans several
        tiles (NK > 1), else once before every pass (``hoisted``)."""
        if not looped or not cx.loads:
            return [" " * pad + line for s in cx.loads.values() for line in s.split("\n")]
        for f, s in cx.loads.items():
            self.hoisted[f] = s.replace("kk * BR", "0")
        return [" " * pad + "if NK > 1:"] + [" " * (pad + 4) + s for s in cx.loads.values()]

    def write(self) -> tuple[str, tuple[str, list[str]]]:
        k = self.k
        body: list[str] = []
        out_params: list = []  # (name, declaration, output number or None)
        pad = 12
        if k.pointwise:  # a row of one tile: the row blocks along x (no limit of 65535; assemble's let bn, bm)
            grid = "T.ceildiv(NX, BM) if NK == 1 else T.ceildiv(NR, BR), 1 if NK == 1 else T.ceildiv(NX, BM)"
            head = "(g0, g1)"
        else:
            grid = "T.ceildiv(NX, BM)"
            head = "bm"
        valid = "xg < NX and rg < NR"
        split = self.splittable()
        if split:
            grid, head = "T.ceildiv(NX, BM), SPLIT", "(bm, sp)"
        seen = {}
        for n_red, r in enumerate(k.reduces):
            if isinstance(r, TopK):
                self.allocs[f"red{n_red}"] = "(BM,)"
                body += self.topk(r, n_red, out_params, pad)
                self.done.add(id(r))
                continue
            if isinstance(r, Scan):
                body += scan_lines(self, r, n_red, out_params, pad)
                self.done.add(id(r))
                continue
            if id(r) in self.done:  # the sum of an online pair, written with its max
                continue
            key = (r.op, id(r.value), tuple(r.dims))
            if key in seen:  # the same reduction again (a decomposition's mean and its var's mean): one pass
                self.red_alias[n_red] = seen[key]
                self.done.add(id(r))
                continue
            seen[key] = n_red
            pair = None if split else online_pair(self, n_red, r, pad + 4)
            if pair is not None:
                n_sum, total, online = pair
                seen[(total.op, id(total.value), tuple(total.dims))] = n_sum
                body += self.one_tile_or_one_pass(n_red, r, n_sum, total, online, pad,
                                                  "the max, then the sum", "one pass over x, a running max and "
                                                  "rescaled sum")
                continue
            mom = None if split else moments(self, n_red, r, pad + 4)
            if mom is not None:
                n_var, var, lines, one = mom
                body += self.one_tile_or_one_pass(n_red, r, n_var, var, lines, pad, "the mean, the deviations",
                                                  "one pass, shifted sums per lane combined exactly", one)
                continue
            self.allocs[f"red{n_red}"] = "(BM,)"
            self.allocs["acc"] = "(BM, BR)"
            cx = Cx(self, "tile")
            idx = k.domain_index(r.src, r.dims)
            val = cx.convert(r.value, r.value.load(cx, idx), FLOAT)
            masked = f'T.if_then_else(rg < NR, {val}, {IDENT[r.op]})'
            stmt = f"acc[i, j] = {COMBINE[r.op].format(a='acc[i, j]', b=masked)}"
            if split:  # this block's share of the column tiles; a partial per row, combined by the second scope
                body.append(" " * pad + f"T.fill(acc, {IDENT[r.op]})")
                body.append(" " * pad + "for kt in T.serial(CH):")
                body.append(" " * pad + "    kk = kt * SPLIT + sp  # all blocks read adjacent tiles at once")
                # the tiles' start written out (not through the let kk): the compiler bounds it by the grid and
                # the loop, so when SPLIT * CH tiles cover the columns exactly no load is guarded; a guarded load
                # is a branch of its own, which ptxas does not hoist: one 16-byte load in flight per thread
                # (frobenius_norm on the H200: 59% of a copy)
                body += pass_loads(cx, pad + 4)
                # no mask either when the tiles cover the columns exactly: the per-value compare and select
                # interleaved with the loads made ptxas issue 3 of a tile's 8 loads at a time (48 of 128 bytes)
                exact = f"acc[i, j] = {COMBINE[r.op].format(a='acc[i, j]', b=val)}"
                body += self.body(cx, "tile", ["if EXACT:", "    " + exact, "else:", "    " + stmt], pad + 4)
                del self.allocs[f"red{n_red}"]
                self.allocs[f"pr{n_red}"] = "(BM,)"
                ws = f"ws{k.index}_{n_red}"
                body.append(" " * pad + f"{REDUCE_FN[r.op]}(acc, pr{n_red}, dim=1)")
                body += [" " * pad + "if not IN_PLACE:", " " * pad + f"    T.copy(pr{n_red}, {ws}[sp, bm * BM])"]
                out_params.append((ws, f"{ws}: T.Tensor((SPLIT, {k.X.t}), \"float32\")", None))
                self.split_reduces.append((n_red, r.op, ws))
            else:
                body += self.plain_pass(n_red, r, pad, cx, stmt)
            self.done.add(id(r))
        self.split_at = len(body)
        allocs_before = set(self.allocs)
        body += self.row_outputs(out_params, pad)
        if k.full_outs:
            cx = Cx(self, "tile")
            stmts, stores = [], []
            for n, o in k.full_outs:
                if k.parts:  # one tile per part (fusion_parts)
                    part_outs(self, cx, n, o, stmts, stores, out_params)
                    continue
                name = f"o{n}"
                idx = unravel(k.flat, o.shape)
                val = o.load(cx, idx)
                tile = k.flat == k.row.scale(k.R) + k.col and o.kind in (FLOAT, INT)
                if tile:  # a fragment of the output's values, stored with T.copy: full-width vector stores
                    self.allocs[f"f_{name}"] = "(BM, BR)"
                    if o.kind == FLOAT:
                        stmts.append(f"f_{name}[i, j] = {cx.convert(o, val, FLOAT)}")
                    else:  # integers: a fragment of the output's dtype (an int8 output stored a byte per store)
                        self.alloc_dtype[f"f_{name}"] = DT[o.dtype]
                        stmts.append(f"f_{name}[i, j] = T.cast({cx.convert(o, val, INT)}, \"{DT[o.dtype]}\")")
                    stores.append(f"T.copy(f_{name}, {name}[bm * BM, {self.col_origin()}])")
                    out_params.append((name, f"{name}: T.Tensor(({k.X.t}, {k.R.t}), \"{DT[o.dtype]}\")", n))
                else:
                    v = cx.convert(o, val, o.kind)
                    stmts.append(f"if {valid}:")
                    stmts.append(f"    {name}[{k.flat.text()}] = T.cast({v}, \"{DT[o.dtype]}\")")
                    out_params.append((name, f"{name}: T.Tensor(({prod(o.shape).t},), \"{DT[o.dtype]}\")", n))
            if k.pointwise:
                rows = ((lambda t: t.replace("[bm * BM,", "[((NX + BM - 1) // BM - 1 - bmr) * BM,")) if k.reverse
                        else (lambda t: t))
                body += [rows(s) for s in self.loads(cx, pad)]
                body += self.body(cx, "tile", stmts, pad)
                body += [" " * pad + rows(s) for s in stores]
            else:
                lines = self.tile_pass(cx, stmts, pad, stores)
                if _rereads(body + lines):
                    # the output pass after a pass over the same row's tiles walks them from the last: its first
                    # reads are the tiles the pass before read last, which the L2 may still hold (instance_norm
                    # reads its 256 KB rows twice; the same order read each tile back after a whole row's traffic)
                    lines = [line.replace("kk * BR", "(NK - 1 - kk) * BR") for line in lines]
                body += lines
        self.allocs2 = [n for n in self.allocs if n not in allocs_before]
        kept = None if split or k.pointwise else stash(body)  # tiles kept in shared memory between two passes
        if kept:
            body, self.stash_allocs, self.stash_lines = kept
        return self.assemble(grid, head, body, out_params)

    def row_outputs(self, out_params: list, pad: int) -> list[str]:
        """The lines writing the per-row outputs and storing the reductions later kernels read (after the passes)."""
        k, body = self.k, []
        rows = [(f"o{n}", o, n) for n, o in k.row_outs]
        if rows or k.realize:
            cx = Cx(self, "row")
            stmts = []
            for name, o, n in rows:
                idx = unravel(k.row, o.shape) if o.shape else []
                val = o.load(cx, idx)
                if ravel(idx, o.shape) != k.row and o.shape:
                    raise Unsupported("a per-row output in another order than the rows")
                self.allocs[f"f_{name}"] = "(BM,)"
                stmts.append(f"f_{name}[i] = {cx.convert(o, val, o.kind if o.kind != BOOL else INT)}")
                out_params.append((name, f"{name}: T.Tensor(({k.X.t},), \"{DT[o.dtype]}\")", n))
            if stmts:
                body += self.loads(cx, pad)
                body += self.body(cx, "row", stmts, pad)
            for name, o, n in rows:
                body.append(" " * pad + f"T.copy(f_{name}, {name}[bm * BM])")
            for r in k.realize:
                name = f"w{k.index}_{k.reduces.index(r)}"
                n = k.reduces.index(r)
                body.append(" " * pad + f"T.copy(red{self.red_alias.get(n, n)}, {name}[bm * BM])")
                out_params.append((name, f"{name}: T.Tensor(({k.X.t},), \"float32\")", None))
        return body

    def one_tile_or_one_pass(self, n_first: int, first: Reduce, n_second: int, second: Reduce, fused: list[str],
                             pad: int, one_tile: str, tiles: str, one: list[str] | None = None) -> list[str]:
        """Two reductions where the second reads the first (max then sum of exp; mean then variance): two plain
        passes (or ``one``, the lines of both) when the row is one tile in registers, else ``fused``, the lines of
        one pass computing both."""
        lines = [" " * pad + f"if NK == 1:  # the row is one tile in registers: {one_tile}"]
        if one is None:
            lines += self.plain_pass(n_first, first, pad + 4)
            self.done.add(id(first))
            one = self.plain_pass(n_second, second, pad + 4)
        lines += one
        self.done.add(id(first))
        if getattr(self, "riders", None):  # the sums that ride the pass over several tiles: plain passes here
            self.done.add(id(second))
            for q in self.riders:
                lines += self.plain_pass(q.n, q.r, pad + 4)
                self.done.add(id(q.r))
            self.riders = []
        lines.append(" " * pad + f"else:  # several tiles: {tiles}")
        lines += fused
        self.done.add(id(second))
        return lines

    def tile_pass(self, cx: Cx, stmts: list[str], pad: int, tail=()) -> list[str]:
        """A pass over a row's column tiles: the loop, the tile copies, the T.Parallel body with ``stmts``, then
        ``tail`` (stores) in the loop. A pass that copies tiles is a software pipeline (``NS`` stages: with NK > 1
        the next tiles load, cp.async into shared memory, while this one is used; with one tile the copy is hoisted
        and the loop runs once on registers). Each pipeline needs shared tiles of its own (the compiler pipelines
        no copy into a buffer another pipeline also fills): a tile an earlier pass copied too is renamed here to an
        alias (``stage_alias``) that is its own shared buffer when NS > 1 and the same register tile otherwise."""
        if not cx.loads:
            head = " " * pad + "for kk in T.serial(NK):"
            return [head] + self.body(cx, "tile", stmts, pad + 4) + [" " * (pad + 4) + t for t in tail]
        self.passes += 1
        self.stage_sizes.append(" + ".join("BR" if self.allocs.get(f) == "(BR,)" else "BM * BR" for f in cx.loads))
        rename = {}
        for f in cx.loads:
            if f in self.staged_once:
                rename[f] = f"{f}_{self.passes}"
                self.stage_alias[rename[f]] = f
            self.staged_once.add(f)
        copies = self.loads(cx, pad + 4, looped=True)
        lines = [" " * pad + "for kk in T.Pipelined(NK, num_stages=NS):"] + copies + \
            self.body(cx, "tile", stmts, pad + 4) + [" " * (pad + 4) + t for t in tail]
        if rename:
            pattern = re.compile(r"\b(" + "|".join(map(re.escape, rename)) + r")\b")
            lines = [pattern.sub(lambda m: rename[m.group(1)], line) for line in lines]
        return lines

    def plain_pass(self, n_red: int, r: Reduce, pad: int, cx: Cx | None = None, stmt: str | None = None) -> list:
        """One pass over the row's column tiles accumulating reduction ``r`` into ``red<n_red>``."""
        k = self.k
        self.allocs[f"red{n_red}"] = "(BM,)"
        self.allocs["acc"] = "(BM, BR)"
        if cx is None:
            cx = Cx(self, "tile")
            val = cx.convert(r.value, r.value.load(cx, k.domain_index(r.src, r.dims)), FLOAT)
            masked = f'T.if_then_else(rg < NR, {val}, {IDENT[r.op]})'
            stmt = f"acc[i, j] = {COMBINE[r.op].format(a='acc[i, j]', b=masked)}"
        lines = [" " * pad + f"T.fill(acc, {IDENT[r.op]})"]
        lines += self.tile_pass(cx, [stmt], pad)
        lines.append(" " * pad + f"{REDUCE_FN[r.op]}(acc, red{n_red}, dim=1)")
        return lines

    def splittable(self) -> bool:
        """Whether the columns may be split over blocks: independent sum/max/min reductions (none reads another of
        this kernel) whose results leave only per row (no full-size output in this kernel)."""
        k = self.k
        if k.pointwise or k.full_outs or not k.reduces or any(isinstance(r, (TopK, Scan)) for r in k.reduces):
            return False
        for r in k.reduces:
            extra = [r.value] if r.value is not r.src else []
            if any(self.plan.owner.get(id(d)) is k for d in _deps(r.value) + extra):
                return False
        return True

    def topk(self, r: TopK, n_red, out_params, pad):
        k = self.k
        self.allocs["work"] = "(BM, BR)"
        self.allocs["cand"] = "(BM, BR)"
        self.allocs[f"arg{n_red}"] = "(BM,)"
        cx = Cx(self, "tile")
        idx = k.domain_index(r.src, r.dims_)
        val = cx.convert(r.src, r.src.load(cx, idx), FLOAT)
        top1 = r.k == 1  # a running maximum over the row's tiles (any length); k > 1: the whole row in registers
        lines = [" " * pad + ("for kk in T.serial(NK):  # top-1: the first largest value of each tile, kept when "
                              "it beats the tiles before" if top1 else
                              "for kk in T.serial(1):  # top-k needs the whole row in registers (NK == 1)")]
        lines += self.loads(cx, pad + 4, looped=True)
        lines += self.body(cx, "tile", [f"work[i, j] = T.if_then_else(rg < NR, {val}, -T.infinity(\"float32\"))"],
                           pad + 4)
        # an output the reference does not return (argmax's values) is a workspace the kernel writes all the same
        vals, inds = (f"o{r.outs[w]}" if w in r.outs else r.ws[w] for w in (0, 1))
        kk = r.k
        out_params.append((vals, f"{vals}: T.Tensor(({k.X.t}, {kk}), \"{DT[r.dtype]}\")", r.outs.get(0)))
        out_params.append((inds, f"{inds}: T.Tensor(({k.X.t}, {kk}), \"int64\")", r.outs.get(1)))
        p = " " * pad
        if top1:
            return self.top1(lines, n_red, vals, inds, r.dtype, p)
        lines += [p + f"for t in T.serial({kk}):",
                  p + f"    T.reduce_max(work, red{n_red}, dim=1)",
                  p + "    for i, j in T.Parallel(BM, BR):",
                  p + f"        cand[i, j] = T.if_then_else(work[i, j] == red{n_red}[i], T.cast(j, \"float32\"), "
                      f"1e30)",
                  p + f"    T.reduce_min(cand, arg{n_red}, dim=1)",
                  p + "    for i in T.Parallel(BM):",
                  p + "        if bm * BM + i < NX:",
                  p + f"            {vals}[bm * BM + i, t] = T.cast(red{n_red}[i], \"{DT[r.dtype]}\")",
                  p + f"            {inds}[bm * BM + i, t] = T.cast(arg{n_red}[i], \"int64\")",
                  p + "    for i, j in T.Parallel(BM, BR):",
                  p + f"        work[i, j] = T.if_then_else(T.cast(j, \"float32\") == arg{n_red}[i], "
                      f"-T.infinity(\"float32\"), work[i, j])"]
        return lines

    def top1(self, lines, n_red, vals, inds, dtype, p):
        """The top-1 (argmax) of rows of any length: per tile its largest value and that value's first column, which
        replace the row's so far only when larger (so the first of equal ones stays, as torch's argmax)."""
        self.allocs[f"best{n_red}"] = "(BM,)"
        self.allocs[f"bix{n_red}"] = "(BM,)"
        self.alloc_dtype[f"bix{n_red}"] = "int32"
        q = p + "    "
        return [p + f"T.fill(best{n_red}, -T.infinity(\"float32\"))", p + f"T.fill(bix{n_red}, 0)"] + lines + [
            q + f"T.reduce_max(work, red{n_red}, dim=1)",
            q + "for i, j in T.Parallel(BM, BR):",
            q + f"    cand[i, j] = T.if_then_else(work[i, j] == red{n_red}[i], T.cast(j, \"float32\"), 1e30)",
            q + f"T.reduce_min(cand, arg{n_red}, dim=1)",
            q + "for i in T.Parallel(BM):",
            q + f"    bix{n_red}[i] = T.if_then_else(red{n_red}[i] > best{n_red}[i], kk * BR + "
                f"T.cast(arg{n_red}[i], \"int32\"), bix{n_red}[i])",
            q + f"    best{n_red}[i] = T.max(best{n_red}[i], red{n_red}[i])",
            p + "for i in T.Parallel(BM):",
            p + "    if bm * BM + i < NX:",
            p + f"        {vals}[bm * BM + i, 0] = T.cast(best{n_red}[i], \"{DT[dtype]}\")",
            p + f"        {inds}[bm * BM + i, 0] = T.cast(bix{n_red}[i], \"int64\")"]

    def assemble(self, grid, head, body, out_params):
        k = self.k
        ins = list(self.params.items())
        sig = [decl for _, (decl, _, _) in ins] + [decl for _, decl, _ in out_params]
        n_in = len(ins)
        out_idx = list(range(n_in, n_in + len(out_params)))
        syms = sorted(s for s in self.plan.t.binds if _uses("\n".join(sig + body) + k.X.t + k.R.t, s))
        dts = sorted({f"d_{g.name}" for _, (_, _, g) in ins if g is not None})
        fname = f"kernel{k.index}"
        split = bool(self.split_reduces)
        on_cuda = _uses("\n".join(body), ON_CUDA)  # torch's device-dependent rounding (pointwise_text.scalar_division)
        factory_args = syms + dts + [ON_CUDA] * on_cuda + ["BM", "BR", "THREADS"] + (["SPLIT"] if split else [])
        dt = self.alloc_dtype
        staged = [n for n in self.hoisted if n in self.allocs] if self.stage_sizes and not k.pointwise else []
        allocs = [" " * 12 + (f"{n} = T.alloc_shared({shape}, {_dtype_text(dt.get(n, 'float32'))}) if NS > 1 else "
                              if n in staged else f"{n} = ") +
                  f"T.alloc_{'shared' if n in self.shared else 'fragment'}({shape}, "
                  f"{_dtype_text(dt.get(n, 'float32'))})"
                  for n, shape in self.allocs.items() if not split or n not in self.allocs2]
        allocs += [" " * 12 + f"{a} = T.alloc_shared({self.allocs[f]}, {_dtype_text(dt.get(f, 'float32'))}) if NS > 1 "
                   f"else {f}  # the same tile, staged for another pipeline" for a, f in self.stage_alias.items()
                   if f in staged]
        staged += [a for a, f in self.stage_alias.items() if f in staged]
        if split:  # the second scope, or the row outputs in the first (fusion_split)
            body = scopes(self, body)
        if k.pointwise and k.reverse:  # before the row lets; copies take the row inline, bounded by the grid
            allocs.insert(0, " " * 12 + "bm = (NX + BM - 1) // BM - 1 - bmr")
        if k.pointwise:  # bmr: rows from the last (the let bm above)
            allocs.insert(0, " " * 12 + f"bn, {'bmr' if k.reverse else 'bm'} = (0, g0) if NK == 1 else (g0, g1)")
        if self.row_div:  # the block's first row, where the row-uniform fragments are read (uniform_col)
            allocs += [" " * 12 + s for s in self.block_prelude()]
            allocs += [" " * 12 + let for _, let in self.block_lets.values()]
        allocs += getattr(self, "stash_allocs", [])
        if self.hoisted:
            allocs += [" " * 12 + "if NK == 1:  # the whole row is one tile: load it once for every pass"]
            allocs += [" " * 16 + s for s in self.hoisted.values()]
        fast = any(DT.get(o.dtype) in ("float16", "bfloat16") for _, o in k.full_outs + k.row_outs)
        text = [f"@tileagent.jit(out_idx={out_idx}{', ' + FAST_MATH if fast else ''})",
                f"def {fname}({', '.join(factory_args)}):",
                f"    NX = {k.X.t}",
                f"    NR = {k.R.t}",
                "    NK = (NR + BR - 1) // BR"] + (["    CH = (NK + SPLIT - 1) // SPLIT  # column tiles per block",
                                                   "    EXACT = SPLIT * CH * BR == NR  # every tile whole: no mask",
                                                   IN_PLACE]
                                                  if split else []) + (
                [f"    NS = STAGES if NK > 1 and max({', '.join(sorted(set(self.stage_sizes)))}, 0) * 4 * STAGES <= "
                 "196608 else 1  # pipeline stages: a pass's tiles in shared memory when STAGES > 1"]
                if staged else ["    NS = 1"]) + getattr(self, "stash_lines", []) + [
                "",
                "    @T.prim_func",
                f"    def main({', '.join(sig)}):",
                f"        with T.Kernel({grid}, threads=THREADS) as {head}:"] + allocs + body + ["", "    return main"]
        args = ", ".join(syms + [f"TL_DTYPE[{g.ref}.dtype]" for g in
                                 sorted({g.name: g for _, (_, _, g) in ins if g is not None}.values(),
                                        key=lambda g: g.name)] + [f"{self.plan.globals[0].ref}.is_cuda"] * on_cuda)
        topk = any(isinstance(r, TopK) and r.k > 1 for r in k.reduces)  # a top-1 streams tiles as a reduction does
        sched = f"schedule({k.X.t}, {k.R.t}, {'True' if k.pointwise else 'False'}, {'True' if topk else 'False'}" + \
            (", True" if _rereads(body) else ", False") + \
            (", 3)" if "acc2 = T.alloc_fragment" in "\n".join(allocs) else
             ", 2)" if "accs = T.alloc_fragment" in "\n".join(allocs) else ")")
        if self.row_div:
            div = min(self.row_div, key=lambda d: d.v)
            sched = sched[:-1] + f", div={div.t})"
        tiles = [f for f, shape in self.allocs.items() if shape == "(BM, BR)" and f.startswith("f") and "_" in f
                 and f[1:f.index("_")].isdigit()]  # the global tiles (fragment), named f<n>_<input>
        if tiles and all(self.alloc_dtype.get(f, "").startswith("$") for f in tiles) and all(
                g.dtype in (torch.float16, torch.bfloat16) for _, (_, _, g) in ins if g is not None):
            sched = sched[:-1] + ", half=True)"  # every row tile 16-bit: two values a register
        if k.pointwise and len(tiles) <= 2:
            sched = sched[:-1] + ", light=True)"  # few tiles a value: half the values a thread (schedule())
        if k.parts:
            sched = sched[:-1] + f", parts={k.parts[0]})"  # BR divides a part's columns where it can
        if split:  # keeps the row operands' divisor: a block's rows share the uniform operand's row (uniform_col)
            sched = f"schedule_split({k.X.t}, {k.R.t}" + (f", div={min(self.row_div, key=lambda d: d.v).t})"
                                                            if self.row_div else ")")
        call = f"{fname}({args}{', ' if args else ''}*{sched})({', '.join(arg for _, (_, arg, _) in ins)})"
        outs = [f"o{n}" if n is not None else name for name, _, n in out_params]
        return "\n".join(text) + "\n", (call, outs)


def _dtype_text(dtype: str) -> str:
    """A fragment's dtype in the kernel text: a literal, or (``$name``) the factory's dtype argument ``name``."""
    return dtype[1:] if dtype.startswith("$") else f"\"{dtype}\""


def _rereads(body: list[str]) -> bool:
    """Whether a kernel's body passes over the column tiles of a row more than once when a row spans several tiles
    (``for kk in T.serial(NK)`` loops outside the ``if NK == 1:`` branches, which work on registers)."""
    passes, skip = 0, None
    for line in body:
        indent = len(line) - len(line.lstrip())
        if skip is not None and line.strip() and indent <= skip:
            skip = None
        if skip is None and line.strip().startswith("if NK == 1:"):
            skip = indent
        elif skip is None and line.strip().startswith(("for kk in T.serial(NK)", "for kk in T.Pipelined(NK",
                                                         "for kt in T.serial(CH)")):
            passes += 1
    return passes > 1


def _unflatten(flat: str, variables) -> list[str]:
    """Lines binding each of ``variables`` (outermost first) to its coordinate in the flat index named ``flat``."""
    stride, strides = ONE, []
    for v in reversed(variables):
        strides.append((v, stride))
        stride = stride * v.size
    lines = []
    for n, (v, st) in enumerate(reversed(strides)):
        q = flat if st.t == "1" else f"{flat} // {st.t}"
        lines.append(f"{v.name} = {q}" if n == 0 else f"{v.name} = ({q}) % {v.size.t}")
    return lines


FAST_MATH = "pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True}"
