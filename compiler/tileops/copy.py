"""``T.copy(src, dst)``: dst = cast(src) over a tile, any scopes.

Check: both regions in bounds (on-chip), extents equal once size-1 dims are dropped. Effects: reads src, writes dst.
Layouts (common): a copy between two fragments of one shape gives the layout of either side to the other; a fragment
copied to or from memory may take the blocked default, vectorized for the memory side's dtype. Lowering:
``compiler.lower.copy`` (vector loads/stores, cp.async in pipeline producers, layout conversion through shared
memory). Interpreter: global reads outside the tensor give 0, writes outside it are dropped. A copy's
``eviction_policy`` (a cache hint, no semantic effect) prints only when set and reaches its global reads' ``VecCopy``.
"""

from __future__ import annotations

from tileagent.compiler.ir.printer import region_str
from tileagent.compiler.ir.stmt import Copy
from tileagent.compiler.tileops.base import Effects, TileOp


class CopyOp(TileOp):
    node = Copy
    layout_level = "common"

    def name(self, s) -> str:
        return "T.copy"

    def dsl(self, s) -> str:
        hint = f", eviction_policy={s.eviction_policy!r}" if s.eviction_policy else ""  # only when set: the text
        return f"T.copy({region_str(s.src)}, {region_str(s.dst)}{hint})"  # of unhinted copies stays as it was

    def check(self, s, checker) -> None:
        checker.copy_shapes("T.copy", s.src, s.dst)

    def effects(self, s) -> Effects:
        return Effects.of(reads=(s.src,), writes=(s.dst,))

    def infer_common(self, s, inference) -> bool:
        a, b = s.src.buffer, s.dst.buffer
        if not (a.scope == b.scope == "fragment" and a.shape == b.shape):
            return False
        known = inference.r.fragments
        for x, y in ((a, b), (b, a)):
            if x in known and y not in known:
                return inference.assign(y, known[x], s, f"copy of '{x.name}'")
        return False

    def free_tiles(self, s) -> list:
        return [(r.buffer, o) for r, o in ((s.src, s.dst), (s.dst, s.src)) if r.buffer.scope == "fragment"]

    def scratch_bytes(self, s, layouts, threads: int) -> int:
        from tileagent.compiler.lower.copy import scratch_bytes

        return scratch_bytes(s, layouts)

    def lower(self, s, ctx) -> list:
        from tileagent.compiler.lower.copy import lower_copy

        return lower_copy(ctx, s)

    def interpret(self, s, it, mask) -> None:
        tile = it.read_region(s.src, s.span)
        it.write_region(s.dst, tile.reshape(s.dst.extents).to(s.dst.buffer.dtype.torch), s.span)
