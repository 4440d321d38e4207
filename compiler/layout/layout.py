"""Layout: logical index -> element offset in memory, with padding and XOR swizzles (shared-memory tiles).

In: a shape, strides (row-major by default; a padded row stride leaves gaps), an optional Swizzle applied to the
linear offset, and optionally ``col_block``: the last dimension cut into blocks of that many columns, each block a
tile of its own (all rows of columns ``b * col_block ..``, then the next block), as the wgmma canonical layouts
want a tile wider than one swizzle atom (``wgmma_operand``). Out: ``offset(idx)`` on ints or IR expressions,
``compose``, ``inverse`` and printable tables; ``align_bytes``: the byte alignment the tile's start needs in shared
memory (16, or the swizzle atom's size when the swizzle is the hardware's, which XORs absolute address bits).
Guarantees: without padding the map is a bijection onto ``0 .. size-1`` (a Swizzle permutes within aligned groups
of ``2 ** (bits + base + shift)`` elements, so it never leaves the tile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tileagent.compiler.ir.expr import make_binop
from tileagent.compiler.ir.simplify import split_multiples


@dataclass(frozen=True)
class Swizzle:
    """offset ^ (((offset >> (base + shift)) & (2**bits - 1)) << base): XOR ``bits`` bits of the row into the
    column, in units of ``2**base`` elements (CuTe's Swizzle<bits, base, shift>)."""

    bits: int
    base: int
    shift: int

    def apply(self, offset):
        if isinstance(offset, (int, np.ndarray, np.integer)):
            return offset ^ (((offset >> (self.base + self.shift)) & ((1 << self.bits) - 1)) << self.base)
        hi = make_binop("%", make_binop("//", offset, 1 << (self.base + self.shift)), 1 << self.bits)
        return make_binop("^", offset, make_binop("*", hi, 1 << self.base))


@dataclass(frozen=True)
class Layout:
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    swizzle: Swizzle | None = None
    col_block: int = 0  # > 0: the last dim is stored in blocks of this many columns, one after the other
    align_bytes: int = 16  # the byte alignment the tile's first element needs in shared memory

    @staticmethod
    def row_major(shape, pad: int = 0) -> "Layout":
        """Row-major strides; ``pad`` extra elements after each row of the innermost dim (bank-conflict padding)."""
        strides, acc = [], 1
        for k, n in enumerate(reversed(shape)):
            strides.append(acc)
            acc *= n + (pad if k == 0 else 0)
        return Layout(tuple(shape), tuple(reversed(strides)))

    def _strides(self) -> tuple[int, ...]:
        return self.strides if self.strides is not None else Layout.row_major(self.shape).strides

    @property
    def size(self) -> int:
        """Elements of memory the layout spans (including padding)."""
        if self.col_block:
            return math.prod(self.shape[:-1]) * self.col_block * self._blocks()
        return sum((n - 1) * s for n, s in zip(self.shape, self._strides())) + 1

    def _blocks(self) -> int:
        return -(-self.shape[-1] // self.col_block)

    @property
    def block_stride(self) -> int:
        """Elements between two column blocks (``col_block``): one block holds every row."""
        return math.prod(self.shape[:-1]) * self.col_block

    def _linear(self, idx):
        """The offset before the swizzle (ints, numpy arrays or IR expressions)."""
        strides = self._strides()
        if any(isinstance(i, np.ndarray) for i in idx):
            blocks = idx[-1] // self.col_block * self.block_stride if self.col_block else 0
            last = idx[-1] % self.col_block if self.col_block else idx[-1]
            return blocks + sum(i * s for i, s in zip((*idx[:-1], last), strides))
        if self.col_block:
            c = idx[-1]
            idx = (*idx[:-1], make_binop("%", c, self.col_block))
            off = make_binop("*", make_binop("//", c, self.col_block), self.block_stride)
        else:
            off = 0
        for i, s in zip(idx, strides):
            off = make_binop("+", off, make_binop("*", i, s))
        return off

    def offset(self, idx):
        off = self._linear(idx)
        if not self.swizzle:
            return off
        period = 1 << (self.swizzle.bits + self.swizzle.base + self.swizzle.shift)
        split = None if isinstance(off, (int, np.integer)) else split_multiples(off, period)
        if split is None:
            return self.swizzle.apply(off)
        rest, whole = split  # the XOR pattern repeats every period: keep whole periods out of it
        return make_binop("+", self.swizzle.apply(rest), whole)

    def compose(self, other: "Layout") -> "Layout | _Composed":
        """self after other: idx -> self.offset(unflatten(other.offset(idx)))."""
        return _Composed(self, other)

    def table(self) -> np.ndarray:
        grids = np.meshgrid(*[np.arange(n) for n in self.shape], indexing="ij")
        off = self._linear(tuple(grids))
        return self.swizzle.apply(off) if self.swizzle else off

    def inverse(self) -> np.ndarray:
        """offset -> flat logical index, as a table (-1 where the offset is padding)."""
        t = self.table().reshape(-1)
        inv = np.full(self.size if not self.swizzle else max(self.size, int(t.max()) + 1), -1, dtype=np.int64)
        inv[t] = np.arange(t.size)
        return inv

    def is_bijective(self) -> bool:
        t = self.table().reshape(-1)
        return len(np.unique(t)) == t.size == math.prod(self.shape) and int(t.max()) == t.size - 1

    def __str__(self) -> str:
        rows = self.table().reshape(-1, self.shape[-1]) if self.shape else np.zeros((1, 1), dtype=int)
        return f"Layout{self.shape} strides={self._strides()} swizzle={self.swizzle}\n" + \
            "\n".join(" ".join(f"{v:>5}" for v in row[:16]) for row in rows[:16])


@dataclass(frozen=True)
class _Composed:
    outer: Layout
    inner: Layout

    @property
    def shape(self):
        return self.inner.shape

    def offset(self, idx):
        flat = self.inner.offset(idx)
        coords, rest = [], flat
        for n in reversed(self.outer.shape):
            coords.append(make_binop("%", rest, n))
            rest = make_binop("//", rest, n)
        return self.outer.offset(tuple(reversed(coords)))


def swizzled(shape: tuple[int, ...], elem_bytes: int) -> Layout:
    """A row-major tile whose 16-byte chunks are XOR-permuted by the row index (128-, 64- or 32-byte swizzle,
    CuTe's Swizzle<bits, base, shift>): the 8 rows an mma fragment or ldmatrix reads at one column land in distinct
    banks. Falls back to plain row-major when the row is not a power of two of at least 32 bytes."""
    cols = shape[-1]
    row_bytes = cols * elem_bytes
    if len(shape) < 2 or cols & (cols - 1) or row_bytes < 32 or 16 % elem_bytes:
        return Layout.row_major(shape)
    base = (16 // elem_bytes).bit_length() - 1  # log2(elements per 16-byte chunk)
    bits = min(3, (row_bytes // 16).bit_length() - 1)  # log2(chunks per row), at most 8 rows permuted
    return Layout(tuple(shape), Layout.row_major(shape).strides, Swizzle(bits, base, cols.bit_length() - 1 - base))


WGMMA_SWIZZLES = (128, 64, 32)  # bytes: the swizzle widths of the wgmma canonical layouts (PTX "Matrix Descriptor")


def wgmma_operand(shape: tuple[int, ...], elem_bytes: int) -> "Layout | None":
    """The wgmma canonical shared layout of a 2-d [rows][cols] tile whose ``cols`` are contiguous (K for a K-major
    operand, M or N for an MN-major one), or of a stack of them ([stages][rows][cols], leading dims of any number:
    laid out as one tile of stages x rows rows, so each stage's tile starts on an atom), or None when there is none.

    Swizzle width W: 128 bytes when a row is a multiple of 128 bytes, else 64 or 32 when the row is exactly that
    (PTX "Shared Memory Matrix Layout": swizzle atoms of 8 rows x W bytes). A row wider than W is cut into column
    blocks of W bytes (``col_block``), each block holding every row at a W-byte pitch, so that one block of 8 rows is
    one atom (W * 8 bytes, contiguous). The XOR is the hardware's: byte-address bits [4, 4 + log2(W / 16)) ^= bits
    [7, 7 + log2(W / 16)) (CuTe Swizzle<log2(W/16), 4, 3> on bytes); it acts on absolute shared addresses, so the tile
    must start on an atom boundary (``align_bytes`` = 8 W) and rows must come in multiples of 8."""
    if len(shape) < 2 or 16 % elem_bytes or shape[-2] % 8:
        return None
    row_bytes = shape[-1] * elem_bytes
    width = 128 if row_bytes % 128 == 0 else row_bytes if row_bytes in (64, 32) else None
    return None if width is None else column_blocked(shape, elem_bytes, width, align_bytes=8 * width)


def column_blocked(shape: tuple[int, ...], elem_bytes: int, width: int, align_bytes: int = 16) -> "Layout":
    """Rows cut into column blocks of ``width`` bytes (32, 64 or 128; the row a multiple of it), each block holding
    every row of every leading dim at a pitch of ``width`` bytes, its 16-byte chunks XORed with the row in groups of
    8 rows (the hardware swizzle of that width): the wgmma canonical layout (``wgmma_operand``) and TileLang's mma
    swizzle (``compiler.layout.index_map``)."""
    cols, cb = shape[-1], width // elem_bytes
    swizzle = Swizzle((width // 16).bit_length() - 1, (16 // elem_bytes).bit_length() - 1, 3)
    strides = [1, cb]
    for n in reversed(shape[1:-1]):  # a leading dim steps over every row of the dims after it
        strides.append(strides[-1] * n)
    return Layout(tuple(shape), tuple(reversed(strides)), swizzle, col_block=cb if cols > cb else 0,
                  align_bytes=align_bytes)


def swizzle_width(layout: "Layout", elem_bytes: int) -> int | None:
    """W (bytes) when ``layout`` is a wgmma canonical layout (``wgmma_operand``) of its shape, else None."""
    want = wgmma_operand(tuple(layout.shape), elem_bytes)
    if want is None or want != layout:
        return None
    return want.align_bytes // 8
