"""Two blocks of a tensor-core GEMM merged into one (sm_90a): 128 x 128 tiles on one warpgroup become 128 x 256
tiles on two.

In: a checked PrimFunc and the Target (before the epilogue staging and layout inference). Out: the same function
where each eligible T.Kernel computes the tiles of two neighbouring blocks along its grid's x in one block of twice
the threads: the grid's x halves, the block index ``bx`` reads as ``2 * bx``, and every tile that follows the
output's columns (the gemm's B and accumulator, the tiles copied to or from them, the T.Parallel loops over them)
doubles along that dim. Tiles that do not depend on ``bx`` (the gemm's A) are loaded once for both.

Why: a 128 x 128 tile on one warpgroup issues two m64n128k16 wgmmas per k-step, each reading B's slice from shared
memory: with TMA's writes, 20 KB of shared-memory traffic per 128 tensor-core cycles, more than the SM's 128 bytes a
cycle. Two warpgroups on 128 x 256 (m64n256k16 each) move 32 KB per 256 cycles. On the H200 the example GEMM's main
loop took 49.9 us per 1024 of K at M = N = 4096, a 128 x 256 tile 42.7, cuBLAS 41.8 (BENCHMARKS.md, round 2 session
21).

Eligible: ``TILEAGENT_COARSEN`` is not 0; the target has wgmma and TMA in use; the kernel runs 128 threads (no
per-thread code) over a static grid whose x is even and which keeps at least ``MIN_BLOCKS`` blocks when merged; its
one T.gemm multiplies shared 16-bit A and B into a 128 x 128 fragment; its statements are allocations, fills,
copies, the gemm, loops (bounds free of ``bx``), T.use_swizzle, layout annotations and T.Parallel loops of stores.
``bx`` appears only as ``128 * bx`` plus terms free of it: in the start of a global region whose dim pairs with a
widened tile's, or in a global index next to a T.Parallel variable that walks a widened tile's dim. Anything else
leaves the kernel as written (a reduction over the columns, a value computed from ``bx``, a T.Persistent loop, a
widened tile's layout annotated other than by ``make_swizzled_layout``).
Guarantees: every output element is computed by the same operations on the same inputs, over the same K tiles in
the same order; what the program reads and writes is unchanged.
"""

from __future__ import annotations

import logging
import os
from dataclasses import fields, replace

from tileagent.compiler.ir.expr import Expr, Load, Var, make_binop
from tileagent.compiler.ir.simplify import additive_terms, depends_on, static_int
from tileagent.compiler.ir.stmt import (Alloc, AnnotateLayout, Buffer, Copy, Fill, For, Gemm, Kernel, Parallel,
                                        PrimFunc, Region, Store, UseSwizzle)
from tileagent.compiler.ir.visit import substitute, variables, walk
from tileagent.compiler.language.annotations import SwizzledLayout

log = logging.getLogger("tileagent.compiler")

ENV = "TILEAGENT_COARSEN"
WIDTH = 128  # the tile's columns, merged into 2 * WIDTH
MIN_BLOCKS = 264  # blocks the merged grid keeps at least: two per SM of a 132-SM H100 / H200


def enabled() -> bool:
    """Whether merging is on for this process (``TILEAGENT_COARSEN=0`` turns it off)."""
    return os.environ.get(ENV, "1").strip() != "0"


def coarsen_blocks(func: PrimFunc, target) -> PrimFunc:
    """``func`` with its eligible kernels merged two blocks into one (see the module docstring)."""
    from tileagent.compiler.instructions.tma import usable

    if not (enabled() and target.has("wgmma") and usable(target)):
        return func
    body = tuple(_merged(s, target) if isinstance(s, Kernel) else s for s in func.body)
    return func if all(a is b for a, b in zip(body, func.body)) else replace(func, body=body)


class _NotEligible(Exception):
    pass


def _merged(k: Kernel, target) -> Kernel:
    try:
        wide, loops = _widened_dims(k)
    except _NotEligible as e:
        log.debug("T.Kernel at line %s: two blocks not merged: %s", k.span.line if k.span else "?", e)
        return k
    log.info("T.Kernel at line %s: two blocks along x merged into one of %d threads (a 128 x 256 gemm tile on two "
             "warpgroups)", k.span.line if k.span else "?", 2 * k.threads[0])
    return _rewrite(k, wide, loops, target)


def _require(cond, why: str) -> None:
    if not cond:
        raise _NotEligible(why)


def _pairs(copy: Copy):
    """The (src dim, dst dim) pairs a copy moves along (its size-1 dims dropped, in order)."""
    src = [d for d, e in enumerate(copy.src.extents) if e != 1]
    dst = [d for d, e in enumerate(copy.dst.extents) if e != 1]
    _require(len(src) == len(dst), "a copy between tiles of different ranks")
    return list(zip(src, dst))


def _widened_dims(k: Kernel) -> tuple[dict, set]:
    """({local buffer: the dim that doubles}, {T.Parallel variables whose extent doubles}) for an eligible kernel."""
    _require(k.threads == (128, 1, 1) and not k.thread_vars and not k.cluster, "not 128 threads of tile code")
    grid = [static_int(g) for g in k.grid]
    _require(None not in grid and grid[0] % 2 == 0, "the grid is dynamic or odd along x")
    blocks = 1
    for g in grid:
        blocks *= g
    _require(blocks // 2 >= MIN_BLOCKS, f"{blocks // 2} merged blocks would be fewer than {MIN_BLOCKS}")
    stmts = list(walk(k.body))
    for s in stmts:
        _require(isinstance(s, (Alloc, AnnotateLayout, Fill, Copy, Gemm, UseSwizzle, Parallel, Store))
                 or isinstance(s, For) and s.kind in ("serial", "pipelined"), f"a {type(s).__name__} statement")
        _require(not isinstance(s, Alloc) or s.buffer.scope in ("shared", "fragment") and s.init is None,
                 "a local or var buffer")
        _require(not isinstance(s, Alloc) or s.view_of is None, "a T.reshape view")
    gemms = [s for s in stmts if isinstance(s, Gemm)]
    _require(len(gemms) == 1, f"{len(gemms)} gemms")
    g = gemms[0]
    _require(g.c.buffer.scope == "fragment" and tuple(g.c.buffer.shape) == (128, WIDTH) and g.c.extents == (128, WIDTH)
             and g.a.buffer.scope == g.b.buffer.scope == "shared" and not g.transpose_a
             and str(g.a.buffer.dtype) in ("float16", "bfloat16"), "not a 128 x 128 gemm of shared 16-bit tiles")
    bx = k.block_vars[0]
    wide = {g.c.buffer: 1, g.b.buffer: 0 if g.transpose_b else 1}
    _require(g.b.extents[wide[g.b.buffer]] == WIDTH, "B's columns are not the tile's")
    fixed = {g.a.buffer}
    loops: set = set()
    changed = True
    while changed:  # the widened dims spread through local copies and T.Parallel indices until nothing changes
        changed = False
        for s in stmts:
            if isinstance(s, Copy) and s.src.buffer.scope != "global" and s.dst.buffer.scope != "global":
                for a, b in _pairs(s):
                    for x, dx, y, dy in ((s.src, a, s.dst, b), (s.dst, b, s.src, a)):
                        if wide.get(x.buffer) == dx and y.buffer not in wide:
                            wide[y.buffer], changed = dy, True
            elif isinstance(s, Parallel):
                for ld in _local_accesses(s):
                    for d, i in enumerate(ld.indices):
                        if isinstance(i, Var) and i in s.vars:
                            if wide.get(ld.buffer) == d and i not in loops:
                                loops.add(i)
                                changed = True
                            elif i in loops and ld.buffer not in wide:
                                wide[ld.buffer], changed = d, True
    _require(not fixed & set(wide), "the gemm's A would widen")
    for buf, d in wide.items():
        _require(buf.shape[d] == WIDTH, f"{buf.name}'s dim {d} is not {WIDTH} wide")
    for s in stmts:
        _check(s, bx, wide, loops)
    return wide, loops


def _local_accesses(p: Parallel):
    for s in walk(p.body):
        if isinstance(s, Store) and s.buffer.scope != "global":
            yield s
        for e in (getattr(s, "value", None), *getattr(s, "indices", ())):
            if isinstance(e, Expr):
                yield from (ld for ld in _loads(e) if ld.buffer.scope != "global")


def _loads(e):
    if isinstance(e, Load):
        yield e
    for name in getattr(e, "__slots__", ()):
        c = getattr(e, name)
        for x in (c if isinstance(c, tuple) else (c,)):
            if isinstance(x, Expr):
                yield from _loads(x)


def _offset_of(e, bx: Var, walker: Var | None = None) -> bool:
    """Whether ``e`` is ``128 * bx`` (+ ``walker``, when given) plus terms free of both."""
    terms = additive_terms(e)
    _require(terms is not None, "bx in a non-integer expression")
    seen = {}
    for atom, coef in terms[0]:
        if atom is bx or atom is walker:
            seen[atom] = coef
        else:
            _require(not depends_on(atom, [bx] + ([walker] if walker is not None else [])),
                     "bx or a widened loop's variable inside a non-linear term")
    return seen.get(bx) == WIDTH and (walker is None or seen.get(walker) == 1)


def _check(s, bx: Var, wide: dict, loops: set) -> None:
    """Raise _NotEligible unless ``s`` reads ``bx`` and the widened loop variables only as the rewrite can widen."""
    if isinstance(s, For):
        _require(not depends_on(s.start, [bx]) and not depends_on(s.extent, [bx]), "a loop bound reads bx")
    elif isinstance(s, AnnotateLayout):
        _require(all(b not in wide or isinstance(layout, SwizzledLayout) for b, layout in s.layouts),
                 "a widened tile's annotated layout is not a swizzle derived from its shape")
    elif isinstance(s, Fill):
        _require(s.dst.buffer not in wide or s.dst.extents == tuple(s.dst.buffer.shape), "a partial fill")
    elif isinstance(s, Copy):
        for a, b in _pairs(s):
            for x, dx, y, dy in ((s.src, a, s.dst, b), (s.dst, b, s.src, a)):
                if x.buffer.scope == "global":
                    if y.buffer in wide and wide[y.buffer] == dy:
                        _require(_offset_of(x.starts[dx], bx) and x.extents[dx] == WIDTH,
                                 "a widened tile's global side does not start at 128 * bx")
                    else:
                        _require(not depends_on(x.starts[dx], [bx]), "bx in a dim that does not widen")
                elif x.buffer in wide and wide[x.buffer] == dx:
                    _require(x.extents[dx] == WIDTH and static_int(x.starts[dx]) == 0, "a slice of a widened tile")
                    _require(y.buffer.scope == "global" or wide.get(y.buffer) == dy, "widened dims do not pair")
        for r in (s.src, s.dst):
            if r.buffer.scope == "global":
                for d in range(len(r.starts)):
                    _require(r.extents[d] != 1 or not depends_on(r.starts[d], [bx]), "bx in a size-1 dim")
    elif isinstance(s, Store):
        _check_access(s.buffer, s.indices, bx, wide, loops)
        _check_value(s.value, bx, wide, loops)
    elif isinstance(s, Parallel):
        for v, n in zip(s.vars, s.extents):
            _require(v not in loops or static_int(n) == WIDTH, "a widened loop is not 128 long")


def _check_access(buf: Buffer, indices, bx: Var, wide: dict, loops: set) -> None:
    if buf.scope == "global":
        for i in indices:
            walkers = [v for v in variables(i) if v in loops]
            if depends_on(i, [bx]) or walkers:
                _require(len(set(walkers)) == 1 and _offset_of(i, bx, walkers[0]),
                         "a global index is not 128 * bx + a widened loop's variable")
        return
    for d, i in enumerate(indices):
        if wide.get(buf) == d:
            _require(isinstance(i, Var) and i in loops, "a widened dim indexed by anything but its loop's variable")
        else:
            _require(not depends_on(i, [bx, *loops]), "bx or a widened loop's variable in a dim that does not widen")
        _check_value(i, bx, wide, loops, top=False)


def _check_value(e, bx: Var, wide: dict, loops: set, top: bool = True) -> None:
    """Loads anywhere in ``e`` are checked as accesses; outside their indices neither bx nor a widened loop's
    variable may appear (a value computed from a column's position)."""
    if isinstance(e, Load):
        _check_access(e.buffer, e.indices, bx, wide, loops)
        return
    if isinstance(e, Var):
        _require(not top or (e is not bx and e not in loops), "a value computed from bx or a column's position")
        return
    for name in getattr(e, "__slots__", ()):
        c = getattr(e, name)
        for x in (c if isinstance(c, tuple) else (c,)):
            if isinstance(x, Expr):
                _check_value(x, bx, wide, loops, top)


def _rewrite(k: Kernel, wide: dict, loops: set, target) -> Kernel:
    bx = k.block_vars[0]
    new = {b: Buffer(b.name, tuple(2 * n if i == d else n for i, n in enumerate(b.shape)), b.dtype, b.scope, b.span)
           for b, d in wide.items()}
    twice = {bx: make_binop("*", 2, bx)}

    def loads_to_new(e):
        """``e`` with its Loads of widened tiles reading the new buffers."""
        if isinstance(e, Load):
            return replace(e, buffer=new.get(e.buffer, e.buffer), indices=tuple(loads_to_new(i) for i in e.indices))
        if not isinstance(e, Expr) or next(_loads(e), None) is None:
            return e
        changes = {}
        for f in fields(e):
            c = getattr(e, f.name)
            if isinstance(c, Expr):
                changes[f.name] = loads_to_new(c)
            elif isinstance(c, tuple):
                changes[f.name] = tuple(loads_to_new(x) if isinstance(x, Expr) else x for x in c)
        return replace(e, **changes)

    def expr(e):
        return substitute(loads_to_new(e), twice)

    def region(r: Region, dims: set) -> Region:
        ext = tuple(2 * e if d in dims else e for d, e in enumerate(r.extents))
        return Region(new.get(r.buffer, r.buffer), tuple(expr(x) for x in r.starts), ext)

    def widened(r: Region) -> set:
        return {wide[r.buffer]} if r.buffer in wide else set()

    def stmt(s):
        if isinstance(s, Alloc):
            return replace(s, buffer=new.get(s.buffer, s.buffer))
        if isinstance(s, AnnotateLayout):  # a swizzle of a widened tile is the same swizzle of the wider one
            return replace(s, layouts=tuple((new.get(b, b), replace(layout, buffer=new[b]) if b in new else layout)
                                            for b, layout in s.layouts))
        if isinstance(s, Fill):
            return replace(s, dst=region(s.dst, widened(s.dst)))
        if isinstance(s, Gemm):
            return replace(s, a=region(s.a, widened(s.a)), b=region(s.b, widened(s.b)), c=region(s.c, widened(s.c)))
        if isinstance(s, Copy):
            src, dst = widened(s.src), widened(s.dst)
            for a, b in _pairs(s):  # a global side doubles where its local side does
                if b in dst and s.src.buffer.scope == "global":
                    src.add(a)
                if a in src and s.dst.buffer.scope == "global":
                    dst.add(b)
            return replace(s, src=region(s.src, src), dst=region(s.dst, dst))
        if isinstance(s, Store):
            return replace(s, buffer=new.get(s.buffer, s.buffer), indices=tuple(expr(i) for i in s.indices),
                           value=expr(s.value))
        if isinstance(s, Parallel):
            ext = tuple(2 * WIDTH if v in loops else n for v, n in zip(s.vars, s.extents))
            return replace(s, extents=ext, body=tuple(stmt(x) for x in s.body))
        if isinstance(s, For):
            return replace(s, body=tuple(stmt(x) for x in s.body), annotations=_stages(s, new, target))
        return s

    grid = (static_int(k.grid[0]) // 2, *k.grid[1:])
    return replace(k, grid=grid, threads=(2 * k.threads[0], 1, 1), body=tuple(stmt(s) for s in k.body), merged=2)


def _stages(loop: For, new: dict, target) -> dict:
    """A pipelined loop's annotations in the merged block: as many stages as fit in the shared memory the two blocks'
    stages took together, when two of the original blocks fit on an SM (the example GEMM's 3 stages of 32 KB -> 4 of
    48 KB); otherwise as written."""
    stages = loop.annotations.get("num_stages") or 0
    if loop.kind != "pipelined" or not isinstance(stages, int) or stages < 1:
        return loop.annotations
    tiles = {s.dst.buffer for s in walk(loop.body) if isinstance(s, Copy) and s.dst.buffer.scope == "shared"}
    before = sum(b.static_bytes() for b in tiles)
    after = sum(new.get(b, b).static_bytes() for b in tiles)
    both = 2 * stages * before
    if not before or both > target.shared_bytes_per_sm:
        return loop.annotations
    return {**loop.annotations, "num_stages": max(stages, both // after)}

