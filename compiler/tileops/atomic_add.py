"""Tile ``T.atomic_add(dst, src)``: dst += src elementwise, each element's add atomic (dst global or shared); the same
node with ``op`` "max" / "min" is ``T.atomic_max`` / ``T.atomic_min`` (dst = max / min(dst, src), one scalar atomic
per element; ``compiler.atomic_ops`` states the NaN rules).

(The scalar form ``T.atomic_add(C[i, j], x)`` is an element statement, ``ir.stmt.AtomicAdd``, not a tile op.)
Check: dst in global or shared memory; extents agree as for a copy. Effects: reads src and dst, writes dst.
Layouts (common, as a copy): a fragment source without a layout takes the blocked default. Lowering:
``compiler.lower.copy.lower_atomic_add_tile`` (vector atomics of 4 float32 / 2 16-bit floats where aligned).
Interpreter: adds in float32 (float64 for float64), rounds once to dst's dtype; max/min compare exactly.
"""

from __future__ import annotations

from tileagent.compiler.atomic_ops import elementwise
from tileagent.compiler.diagnostics import ScopeError
from tileagent.compiler.intrinsics import compute_dtype
from tileagent.compiler.ir.printer import region_str
from tileagent.compiler.ir.stmt import AtomicAddTile
from tileagent.compiler.tileops.base import Effects, TileOp


class AtomicAddTileOp(TileOp):
    node = AtomicAddTile
    layout_level = "common"

    def name(self, s) -> str:
        return f"T.atomic_{s.op}"

    def dsl(self, s) -> str:
        return f"T.atomic_{s.op}({region_str(s.dst)}, {region_str(s.src)})"

    def check(self, s, checker) -> None:
        if s.dst.buffer.scope not in ("global", "shared"):
            raise ScopeError(f"T.atomic_{s.op} into {s.dst.buffer.name} ({s.dst.buffer.scope})", code="E508",
                             hint="atomics target global or shared memory")
        checker.copy_shapes(f"T.atomic_{s.op}", s.src, s.dst)

    def effects(self, s) -> Effects:
        # the destination is read-modify-written, but by atomics: ordering against other statements is that of a write
        return Effects.of(reads=(s.src,), writes=(s.dst,))

    def free_tiles(self, s) -> list:
        return [(r.buffer, o) for r, o in ((s.src, s.dst), (s.dst, s.src)) if r.buffer.scope == "fragment"]

    def lower(self, s, ctx) -> list:
        from tileagent.compiler.lower.copy import lower_atomic_add_tile

        return lower_atomic_add_tile(ctx, s)

    def interpret(self, s, it, mask) -> None:
        old = it.read_region(s.dst, s.span)
        add = it.read_region(s.src, s.span).reshape(s.dst.extents)
        if s.op != "add":
            it.write_region(s.dst, elementwise(old, add.to(old.dtype), s.op), s.span, atomic=True)
            return
        cd = compute_dtype(s.dst.buffer.dtype)
        it.write_region(s.dst, (old.to(cd) + add.to(cd)).to(s.dst.buffer.dtype.torch), s.span, atomic=True)
