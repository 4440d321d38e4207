"""A user-written index map (TileLang's ``T.Layout(shape, forward_fn)``) on a shared tile, as one of our Layouts.

In: the tile's shape, its element size, and ``forward_fn`` (logical index -> physical index of some rank, TileLang's
``IndexMap``: the physical buffer's shape is the range of each output). Out: ``layout_of_index_map`` gives the
``compiler.layout.layout.Layout`` whose element offsets are exactly the map's row-major physical offsets, or None
when no Layout of ours is (or the map cannot be evaluated on integers).
Guarantees: the map is evaluated at every logical index (numpy arrays, else Python ints; ``MapError`` for a map of
another arity; None when it cannot be evaluated on integers), and a Layout is returned
only when its offset table equals the map's on the whole tile: row-major, our own XOR swizzle
(``layout.swizzled``), the wgmma canonical layouts (``layout.wgmma_operand``), or TileLang's mma swizzle
(``get_swizzle_layout``: the row cut into blocks of ``W`` = 32, 64 or 128 bytes, each block holding every row, the
16-byte chunks of a row XORed with ``(row % 8) // (8 // (W / 16))``), which is ``Swizzle(log2(W/16), base, 3)``
over column blocks of ``W`` bytes. ``T.annotate_layout`` passes it on as an ``IndexMapLayout`` (a hint).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from tileagent.compiler.layout.layout import Layout, column_blocked, swizzled, wgmma_operand

MAX_ELEMENTS = 1 << 20  # tiles larger than this are not evaluated point by point


@dataclass(frozen=True)
class IndexMapLayout:
    """A user's ``T.Layout`` on a shared tile as the equal Layout of ours: a storage-order hint, which layout
    inference takes unless a gemm instruction already fixed the tile's layout (wgmma's canonical one), as it does
    for ``make_swizzled_layout``."""

    layout: Layout


class MapError(ValueError):
    """The index map does not take the tile's indices: called with one integer per dim it raises a TypeError (a map
    of another arity)."""


def _evaluate(shape: tuple[int, ...], forward_fn) -> list[np.ndarray] | None:
    """The map's outputs at every logical index (one int64 array of ``shape`` per physical dim); None when it cannot
    be evaluated on integers (a map built from TVM expressions); MapError for a map of another arity."""
    try:
        forward_fn(*[0] * len(shape))
    except TypeError as e:
        raise MapError(f"TypeError: {e}") from None
    except Exception:  # noqa: BLE001 -- judged below
        pass
    grids = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in shape], indexing="ij")
    try:
        return [np.broadcast_to(np.asarray(o, dtype=np.int64), shape) for o in forward_fn(*grids)]
    except Exception:  # noqa: BLE001 -- a map that branches on its indices in Python: try integers
        pass
    try:
        points = [tuple(int(v) for v in forward_fn(*idx)) for idx in itertools.product(*map(range, shape))]
    except Exception:  # noqa: BLE001 -- not evaluable on integers: no layout of ours is known to equal it
        return None
    if not points or len({len(p) for p in points}) != 1:
        return None
    return [np.array(col, dtype=np.int64).reshape(shape) for col in zip(*points)]


def offsets_of_index_map(shape: tuple[int, ...], forward_fn) -> np.ndarray | None:
    """Row-major offsets into the physical buffer (shape: one past each output's largest value) at every logical
    index, or None when it cannot be evaluated on integers or yields a negative index; MapError for a map of another
    arity."""
    outs = _evaluate(tuple(shape), forward_fn)
    if outs is None or any(int(o.min()) < 0 for o in outs):
        return None
    extents = [int(o.max()) + 1 for o in outs]
    offset = np.zeros(tuple(shape), dtype=np.int64)
    for o, n in zip(outs, extents):
        offset = offset * n + o
    return offset


def mma_swizzle(shape: tuple[int, ...], elem_bytes: int, width: int) -> Layout | None:
    """TileLang's mma swizzle of ``width`` bytes (``get_swizzle_layout``) as a Layout, or None where it is none."""
    if len(shape) < 2 or 16 % elem_bytes or width not in (32, 64, 128) or shape[-1] % (width // elem_bytes):
        return None
    return column_blocked(shape, elem_bytes, width)


def _candidates(shape: tuple[int, ...], elem_bytes: int):
    yield Layout.row_major(shape)
    yield wgmma_operand(shape, elem_bytes)
    yield swizzled(shape, elem_bytes)
    for width in (128, 64, 32):
        yield mma_swizzle(shape, elem_bytes, width)


def layout_of_index_map(shape: tuple[int, ...], elem_bytes: int, forward_fn) -> Layout | None:
    """The Layout equal to ``forward_fn`` on the whole tile (see the module docstring), or None (also for tiles of
    more than MAX_ELEMENTS elements, and maps not evaluable on integers); MapError for a map of another arity."""
    shape = tuple(int(n) for n in shape)
    if math.prod(shape) > MAX_ELEMENTS:
        return None
    want = offsets_of_index_map(shape, forward_fn)
    if want is None:
        return None
    for layout in _candidates(shape, elem_bytes):
        if layout is not None and layout.table().shape == want.shape and np.array_equal(layout.table(), want):
            return layout
    return None
