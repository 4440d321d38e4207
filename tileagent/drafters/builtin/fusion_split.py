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
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tileagent.drafters.builtin.fusion_writer import Cx

SPLIT_TILE = "(kt * SPLIT + sp) * BR"  # the first column of the block's kt-th tile
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
