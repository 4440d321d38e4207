"""Tile loads of a reduction split over blocks along its columns (``KernelWriter.splittable``): once per block when a
block reads one tile.

In: the ``Cx`` of a pass of a split kernel (each of its reductions is a pass over the block's column tiles), then
the lines of the kernel's first scope. Out: ``pass_loads`` gives the pass's tile copies; ``load_once`` rewrites the
scope so a tile that several passes copy is copied once, before the first pass, when a block reads one tile
(``CH == 1``) and the knob ``SPLIT_ONCE`` is on (its copies in the passes run otherwise). A split kernel's
reductions each read the tiles again otherwise: cosine_embedding's three dot products per row (x1.x2, x1.x1,
x2.x2, B=8192 x D=768 fp32, one tile a block) loaded x1 and x2 twice each, 4 reads of 16-byte vectors a value
for 2 of data (60-66% of a copy on the H200, torch.compile 79-89%); held in registers, each value is read once (the
tiles cost PER_THREAD registers each, as the single pass over one tile of a row that is not split holds them:
``KernelWriter.loads``, NK == 1). Guarantees: the copies read the same tile (``kt = 0``: tile ``sp``) either way.

``scopes`` assembles the kernel's body: the first scope (the partials, ``ws[sp, row]``), then the second, which
combines each row's SPLIT partials and writes the row outputs. When ``schedule_split`` picks SPLIT == 1 (enough rows
to fill the GPU: cosine_embedding's B=8192 x D=768, 2048 blocks of 4 rows) a block's partial is its rows' whole
reduction: with the knob ``FINISH_IN_PLACE`` on (``IN_PLACE``, a compile-time constant of the factory) the first
scope writes the row outputs from its partials itself, stores no partial, and the second scope is not written into
the prim_func (one launch, not two). Guarantees: the row outputs are the same lines either way (each ``red<n>`` the
combined partials, or in place the block's partial ``pr<n>``), so both compute the same values; the workspace
outputs stay in the signature (unwritten when in place) so the factory's outputs and forward do not change.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tileagent.drafters.builtin.fusion_writer import Cx

SPLIT_TILE = "(kt * SPLIT + sp) * BR"  # the first column of the block's kt-th tile
IN_PLACE = ("    IN_PLACE = SPLIT == 1 and FINISH_IN_PLACE  # one block a row group: its partials are the rows' "
            "reductions")  # the factory's line (``scopes``)
COPY = re.compile(r"^(\s*)T\.copy\(.*\(kt \* SPLIT \+ sp\) \* BR.*, (f\d+_\w+)(?:, .*)?\)$")


def pass_loads(cx: Cx, pad: int) -> list[str]:
    """The copies of a split pass, in its loop over the block's tiles (``kt``)."""
    return [" " * pad + line.replace("kk * BR", SPLIT_TILE) for s in cx.loads.values() for line in s.split("\n")]


def load_once(lines: list[str]) -> list[str]:
    """``lines`` (a split kernel's first scope) with each tile that two or more passes copy copied once before them
    when a block reads one tile (``CH == 1``) and the knob SPLIT_ONCE is on, its copies in the passes kept for the
    other cases; unchanged when no tile is copied twice (a kernel of one reduction, as a norm's)."""
    found = [(n, COPY.match(line)) for n, line in enumerate(lines)]
    found = [(n, m) for n, m in found if m]
    count: dict = {}
    for _, m in found:
        count[m.group(2)] = count.get(m.group(2), 0) + 1
    twice = {n: m for n, m in found if count[m.group(2)] > 1}
    if not twice:
        return lines
    first: dict = {}
    out = []
    for n, line in enumerate(lines):
        m = twice.get(n)
        if m is None:
            out.append(line)
            continue
        first.setdefault(m.group(2), " " * 16 + line.strip().replace(SPLIT_TILE, "sp * BR"))
        out += [m.group(1) + "if CH > 1 or not SPLIT_ONCE:  # else copied once before the passes", "    " + line]
    return [" " * 12 + "if CH == 1 and SPLIT_ONCE:  # one tile a block: copied once for every reduction"] + \
        list(first.values()) + out


def scopes(w, body: list[str]) -> list[str]:
    """The body of split kernel ``w`` (a ``KernelWriter`` whose ``body[:w.split_at]`` writes the partials, the rest
    the row outputs from ``red<n>``): the first scope, its in-place finish under ``if IN_PLACE:``, and the second
    scope under ``if not IN_PLACE:``. In place saves a launch and the workspace's write and read (3 x 32 KB each for
    cosine_embedding's 8192 rows, nothing next to its 50 MB of rows): the launch is the gain, an estimated 2-4 us on
    an H200 (not yet measured; the kernels launch with programmatic dependent launch, which may hide part of it)
    against 10-40 us for the whole op. The block then also holds the row outputs' registers (a few per row)."""
    from tileagent.drafters.builtin.fusion_writer import REDUCE_FN, _dtype_text

    dt = w.alloc_dtype
    allocs2 = [f"{n} = T.alloc_fragment({w.allocs[n]}, {_dtype_text(dt.get(n, 'float32'))})" for n in w.allocs2]
    second = allocs2 + ["part = T.alloc_fragment((SPLIT, BM), \"float32\")"]
    for n_red, op, ws in w.split_reduces:
        second += [f"red{n_red} = T.alloc_fragment((BM,), \"float32\")", f"T.copy({ws}[0, bm * BM], part)",
                   f"{REDUCE_FN[op]}(part, red{n_red}, dim=0)"]

    def evict(line):  # tiles read once: L2 keeps the partials (BENCHMARKS.md); read again later (x / norm(x)):
        return line if w.k.reread else re.sub(  # the L2 may keep the last tiles
            r"^(\s*T\.copy\([gt]_\w+\[.*\], f\d+_\w+)\)$", r'\1, eviction_policy="evict_first")', line)

    first = load_once([evict(line) for line in body[:w.split_at]])
    rows = body[w.split_at:]
    red = re.compile(r"\bred(" + "|".join(str(n) for n, _, _ in w.split_reduces) + r")\b")
    own = [" " * 16 + s for s in allocs2] + ["    " + red.sub(r"pr\1", line) if line.strip() else line for line in rows]
    head = " " * 12 + "with T.Kernel(T.ceildiv(NX, BM), threads=THREADS) as bm:  # after every partial"
    return first + [" " * 12 + "if IN_PLACE:  # the block's partials are its rows' reductions: no second kernel"] + \
        (own or [" " * 16 + "pass"]) + ["", " " * 8 + "if not IN_PLACE:", head] + [" " * 16 + s for s in second] + \
        ["    " + line if line.strip() else line for line in rows]
