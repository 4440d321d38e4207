"""Registry entry ``cp.async.bulk`` (bulk store): a whole ``T.copy`` of a shared tile into global memory as one or a
few bulk copies (``cp.async.bulk.global.shared::cta.bulk_group``, sm_90), issued by single threads and carried out
by the asynchronous proxy (TileLang's TMA store of an unswizzled tile: its layer norm stores Y this way).

When: a target with the "tma" feature (sm_90a), unless ``TILEAGENT_BULK_STORE=0``. Like the TMA load entry it moves
the whole tile (``tile_reason`` / ``plan``; ``compiler.lower.copy`` asks ``select_tile_copy`` first and falls back to
the run entries with the reason noted); its ``reason`` for a single run always declines.

Applies to: a shared -> global copy of one dtype whose source is a whole shared tile of static shape laid out
row-major without a swizzle (its rows contiguous: a row stride of 16-byte multiples, padding allowed) and whose
destination region has static extents that pair, in order, with the tile's non-unit dims, the innermost global dim
(contiguous) paired with the tile's last dim; a row of 16 bytes or a multiple, and each copy at least
``MIN_BYTES``. What only the lowering can check (``compiler.lower.bulk_store``): the region's columns inside the
tensor, every row's start at a 16-byte offset, the tensor neither read by the kernel nor written other than from
shared tiles.

A ``BulkPlan``: rows (the product of the tile's outer dims) of ``row_bytes`` each; ``merged`` when the rows are
contiguous on both sides (one copy of all of them, as TileLang's layer norm).
Emits: ``AsyncProxyFence``, ``BulkStore``, ``BulkStoreWait`` (``compiler.tir``; CUDA: ``compiler.targets.cuda_tma``;
emulator: ``compiler.emulate_tma``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from tileagent.compiler.instructions.base import WholeTileCopy

ENV = "TILEAGENT_BULK_STORE"
ALIGN = 16  # bytes: addresses and sizes of cp.async.bulk
MIN_BYTES = 128  # per copy: shorter rows stay vector stores (one bulk copy per 16 bytes would queue on the TMA unit)


def enabled() -> bool:
    """Whether bulk stores may be used (``TILEAGENT_BULK_STORE=0`` switches them off)."""
    return os.environ.get(ENV, "").strip() != "0"


@dataclass(frozen=True)
class BulkPlan:
    """How one copy moves by bulk stores: ``rows`` rows of ``row_elems`` elements (``row_bytes``), the tile's row
    stride ``row_stride`` (elements, >= row_elems), and whether the rows are contiguous in the tile and in the global
    region (``merged``: one copy of ``rows * row_bytes``)."""

    rows: int
    row_elems: int
    row_bytes: int
    row_stride: int
    merged: bool


def plan(src, dst, layout) -> BulkPlan | str:
    """The BulkPlan of copying Region ``src`` (a shared tile laid out as ``layout``) into Region ``dst`` (global), or
    one line why bulk stores cannot."""
    from tileagent.compiler.ir.simplify import static_int

    t, g = src.buffer, dst.buffer
    if t.scope != "shared" or g.scope != "global":
        return "moves shared memory into global memory only"
    if g.dtype != t.dtype:
        return f"cannot convert dtypes ({t.dtype} -> {g.dtype})"
    shape = tuple(static_int(n) for n in t.shape)
    if None in shape:
        return f"needs a shared tile of static shape; '{t.name}' is {tuple(t.shape)}"
    if any(static_int(x) != 0 for x in src.starts) or tuple(static_int(n) for n in src.extents) != shape:
        return f"needs the whole shared tile '{t.name}' as source"
    if layout is None or getattr(layout, "swizzle", None) is not None or getattr(layout, "col_block", 0):
        return f"the shared layout of '{t.name}' is swizzled or blocked (its rows are not contiguous bytes)"
    strides = layout._strides()
    if strides[-1] != 1:
        return f"the last dim of '{t.name}' is not contiguous in shared memory"
    ext = tuple(static_int(n) for n in dst.extents)
    if None in ext:
        return "needs static copy extents"
    if [n for n in ext if n != 1] != [n for n in shape if n != 1]:
        return f"the destination extents {ext} do not pair with the tile's {shape}"
    if ext[-1] != shape[-1]:
        return "needs the innermost (contiguous) global dim to be the tile's last dim"
    elem = t.dtype.bytes
    row_elems = shape[-1]
    if row_elems * elem % ALIGN:
        return f"a row of {row_elems * elem} bytes is not a multiple of {ALIGN}"
    outer = [(n, s) for n, s in zip(shape[:-1], strides[:-1]) if n != 1]
    row_stride = outer[-1][1] if outer else row_elems
    if any(s * elem % ALIGN for _, s in outer):
        return f"rows of '{t.name}' start {row_stride * elem} bytes apart, not a multiple of {ALIGN}"
    dims = [static_int(n) for n in g.shape]
    rows = math.prod(shape[:-1])
    merged = rows == 1 or (_dense(shape, strides) and _full_rows(dst, ext, dims))
    if (rows * row_elems * elem if merged else row_elems * elem) < MIN_BYTES:
        return f"copies of {row_elems * elem} bytes (rows) are below {MIN_BYTES}: vector stores are as fast"
    return BulkPlan(rows, row_elems, row_elems * elem, row_stride, merged)


def _dense(shape, strides) -> bool:
    """Whether the tile is row-major without padding."""
    acc = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != acc:
            return False
        acc *= n
    return True


def _full_rows(dst, ext, dims) -> bool:
    """Whether the global region is one contiguous range: below its outermost non-unit dim every dim is whole (from
    0, the tensor's static extent)."""
    from tileagent.compiler.ir.simplify import static_int

    first = next(d for d, n in enumerate(ext) if n != 1)
    return all(dims[d] is not None and ext[d] == dims[d] and static_int(dst.starts[d]) == 0
               for d in range(first + 1, len(ext)))


class BulkStoreCopy(WholeTileCopy):
    name = "cp.async.bulk (bulk store)"
    moves = ("shared", "global")
    unit = "bulk copies"

    def switched_off(self) -> str | None:
        return None if enabled() else f"switched off: {ENV}=0"

    def plan(self, src, dst, layout, offsets=None):
        return plan(src, dst, layout)

    def describe_plan(self, p: BulkPlan) -> str:
        if p.merged:
            return f"bulk store of {p.rows * p.row_bytes} B"
        return f"bulk stores of {p.rows} rows x {p.row_bytes} B"

    def cuda_emitters(self) -> dict:
        from tileagent.compiler.targets.cuda_tma import BULK_HANDLERS

        return dict(BULK_HANDLERS)

    def emulators(self) -> dict:
        from tileagent.compiler.emulate_tma import BULK_HANDLERS

        return dict(BULK_HANDLERS)
