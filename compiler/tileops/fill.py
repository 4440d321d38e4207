"""``T.fill(buffer, value)`` / ``T.clear(buffer)``: every element of a buffer or region set to one value.

Check: the region is in bounds; element accesses in ``value`` are legal. Effects: writes the region (reads what the
value and the region's starts load). Layouts (free): an unassigned fragment takes the blocked default.
Lowering: ``compiler.lower.copy.lower_fill`` (every register of a register tile; a blocked thread map over a
shared or global tile). Interpreter: writes the value, cast to the buffer's dtype.
"""

from __future__ import annotations

from tileagent.compiler.intrinsics import as_tensor
from tileagent.compiler.ir.printer import expr_str, region_str
from tileagent.compiler.ir.stmt import Fill
from tileagent.compiler.tileops.base import Effects, TileOp


class FillOp(TileOp):
    node = Fill
    layout_level = "free"

    def name(self, s) -> str:
        return "T.fill"

    def dsl(self, s) -> str:
        return f"T.fill({region_str(s.dst)}, {expr_str(s.value)})"

    def check(self, s, checker) -> None:
        checker.region_bounds(s.dst)
        checker.exprs((s.value,))

    def effects(self, s) -> Effects:
        return Effects.of(writes=(s.dst,), exprs=(s.value,))

    def free_tiles(self, s) -> list:
        return [(s.dst.buffer, None)] if s.dst.buffer.scope == "fragment" else []

    def lower(self, s, ctx) -> list:
        from tileagent.compiler.lower.copy import lower_fill

        return lower_fill(ctx, s)

    def interpret(self, s, it, mask) -> None:
        value = as_tensor(it.ev(s.value), s.dst.buffer.dtype).to(s.dst.buffer.dtype.torch)
        it.write_region(s.dst, value.expand(s.dst.extents), s.span)
