"""Layout and scheduling annotations, and debugging: ``T.annotate_layout``, ``make_swizzled_layout``,
``T.use_swizzle``, ``T.print``.

Annotations never change results; they steer layout inference and block order. The CPU interpreter records them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.ir.expr import Expr, describe
from tileagent.compiler.ir.stmt import AnnotateLayout, Buffer, Print, UseSwizzle

SWIZZLE_ORDERS = {"row": "row", "column": "column", "col": "column"}


@dataclass(frozen=True)
class SwizzledLayout:
    """An XOR-swizzled shared-memory layout for ``buffer`` (bank-conflict-free ldmatrix access)."""

    buffer: Buffer
    k_major: bool = True
    allow_pad: bool = True
    bank_bytes: int | None = None  # None: the widest that fits (128, 64 or 32 bytes)


def make_swizzled_layout(buffer, k_major=True, allow_pad=True):
    if not isinstance(buffer, Buffer) or buffer.scope != "shared":
        raise DSLTypeError(f"make_swizzled_layout needs a shared buffer, got {describe(buffer)}", code="E309")
    return SwizzledLayout(buffer, k_major, allow_pad)


def _bank_swizzled(buffer, args, bank_bytes: int, name: str) -> SwizzledLayout:
    if args:  # TileLang's (rows, cols, element_bits) form: a layout object of its own (its plot_layout examples)
        from tileagent.compiler.diagnostics import UnsupportedError

        raise UnsupportedError(f"{name}(rows, cols, element_size): standalone layout objects are not supported; "
                               f"{name}(shared_buffer) in T.annotate_layout is")
    return SwizzledLayout(buffer, bank_bytes=bank_bytes)


def make_full_bank_swizzled_layout(buffer, *args):
    return _bank_swizzled(buffer, args, 128, "make_full_bank_swizzled_layout")


def make_half_bank_swizzled_layout(buffer, *args):
    return _bank_swizzled(buffer, args, 64, "make_half_bank_swizzled_layout")


def make_quarter_bank_swizzled_layout(buffer, *args):
    return _bank_swizzled(buffer, args, 32, "make_quarter_bank_swizzled_layout")


def annotate_layout(layout_map):
    """``T.annotate_layout({buf: layout, ...})``: pin the layout of buffers; inference treats these as strict."""
    if not isinstance(layout_map, dict):
        raise DSLTypeError(f"T.annotate_layout takes a dict {{buffer: layout}}, got {describe(layout_map)}",
                           code="E309")
    for buf in layout_map:
        if not isinstance(buf, Buffer):
            raise DSLTypeError(f"T.annotate_layout: keys must be buffers, got {describe(buf)}", code="E309")
    from tileagent.compiler.language.extras import kept_layouts

    kept = kept_layouts(layout_map)
    if not kept:
        return None  # only storage orders of global tensors, which are kept row-major (see extras.Layout)
    return AnnotateLayout(tuple(kept.items()))


def use_swizzle(panel_size, order="row", enable=True):
    """Rasterize thread blocks in panels of ``panel_size`` along rows or columns for L2 reuse.

    ``order`` is "row", "column" or "col" (the seed article's spelling of "column").
    """
    if not isinstance(order, str) or order not in SWIZZLE_ORDERS:
        raise DSLTypeError(f"T.use_swizzle: unknown order {order!r}; use 'row', 'column' or 'col'", code="E306")
    if isinstance(panel_size, bool) or not isinstance(panel_size, int) or panel_size < 1:
        raise DSLTypeError(f"T.use_swizzle: panel_size must be a positive int, got {panel_size!r}", code="E306")
    return UseSwizzle(panel_size, SWIZZLE_ORDERS[order], bool(enable))


def print(obj=None, msg="", warp_group_id=0, warp_id=0):  # noqa: A001
    """Print a scalar expression or a whole buffer from the device, prefixed by ``msg``."""
    if not isinstance(obj, (Buffer, Expr, int, float)):
        raise DSLTypeError(f"T.print takes a buffer or a scalar expression, got {describe(obj)}", code="E309")
    return Print(obj, str(msg))
