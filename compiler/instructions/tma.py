"""Registry entry ``cp.async.bulk.tensor`` (TMA): a whole ``T.copy`` of a global tile into a shared tile as one or a
few tensor-memory-accelerator loads, completed on an mbarrier (sm_90a).

When: only for a target with the "tma" feature (``compiler.target``: sm_90a), and as ``mode()`` says (the
environment variable ``TILEAGENT_ENABLE_TMA``): by default ("gemm") for the producers of ``T.Pipelined`` loops that
feed a ``T.gemm`` (where it pays: the tensor-core kernels, BENCHMARKS.md; memory-bound kernels keep their code), with
"1" ("all") for every global -> shared copy, in a pipeline or not, with "0" ("off") never (cp.async in pipelines,
vectorized loads and stores elsewhere).

Unlike the other copy entries, which move one run of a thread's elements (``select_copy``), this one moves the whole
tile from one thread: ``tile_reason(ctx, s)`` says whether it can (None, else one line why not) and ``plan(ctx, s)``
gives the ``TmaPlan``; ``compiler.lower.copy`` asks it first (``select_tile_copy``) and falls back to the run entries
with the reason recorded in the instruction notes (``get_ir("thread")``). Its ``reason`` for a single run always
declines, so ``select_copy`` never picks it for a run.

Applies to: a global -> shared copy of one dtype among ``TMA_DTYPES`` whose destination is a whole shared tile
(at most 5 dims, every extent static) and whose source region has static extents that pair, in order, with the
tile's non-unit dims, the innermost source dim (contiguous in memory) paired with the tile's last dim; a global
tensor of rank <= 5 whose static strides (if its shape is static) are multiples of 16 bytes; and a destination
layout that is exactly what TMA writes (``tma_model``), on an alignment TMA and the swizzle atom need.

What TMA writes (``tma_offsets``): the box is the tile viewed as R rows x C columns (C = the last dim, R = the rest);
with swizzle width S (32, 64 or 128 bytes) the columns are cut into blocks of S bytes (``S / e`` elements, e = the
element size), one TMA load (one box of ``S / e`` x R, inner dim first) per block, the blocks one after the other in
shared memory (R x S bytes apart), the rows of a block S bytes apart, and every byte address with bits [4, 4 +
log2(S / 16)) XORed with bits [7, 7 + log2(S / 16)) (cuda.h "Swizzle 16B chunks within 32B/64B/128B span"; PTX ISA
"Tensor copy: swizzling modes"); without a swizzle one box of C x R, rows C * e bytes apart. That is the wgmma
canonical layout (``compiler.layout.layout.wgmma_operand``) for any swizzle, the default ``swizzled`` layout of
128-byte rows for the 128-byte swizzle, and plain row-major for none. The swizzle XORs absolute shared-address
bits, so the tile (and each pipeline stage of it) must start on a multiple of 8 S bytes, and every TMA destination
on 128 bytes: ``align_tiles`` raises the layout's ``align_bytes`` of every tile a TMA copy may fill, before shared
memory is planned.

Rules checked here (statically known) and again at launch (``compiler.runtime.tma``): box dims <= 256; the inner
box C * e (or S) a multiple of 16 bytes and <= the swizzle span; global strides multiples of 16 bytes and < 2**40;
dims <= 2**32; the global address 16-byte aligned (launch only).

Emits: ``MbarrierInit`` (kernel prologue), ``MbarrierArriveExpectTx``, ``TmaLoad``, ``MbarrierWait``
(``compiler.tir``; CUDA: ``compiler.targets.cuda_tma``; emulator: ``compiler.emulate_tma``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

import numpy as np

from tileagent.compiler.instructions.base import WholeTileCopy, has_feature

ENV = "TILEAGENT_ENABLE_TMA"
TMA_DTYPES = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
              "int32": "INT32", "int64": "INT64", "uint8": "UINT8", "int8": "UINT8", "uint16": "UINT16",
              "int16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "float8_e4m3fn": "UINT8",
              "float8_e5m2": "UINT8"}  # CUtensorMapDataType suffix: TMA moves bits, so signed ints go as unsigned
SWIZZLES = (128, 64, 32)
MAX_BOX = 256
MAX_RANK = 5
DST_ALIGN = 128  # bytes: every TMA destination in shared memory


MODES = {"0": "off", "1": "all", "": "gemm"}


def mode() -> str:
    """Which global -> shared copies may use TMA: "gemm" (the default: producers of T.Pipelined loops with a T.gemm),
    "all" (``TILEAGENT_ENABLE_TMA=1``: every one, in a pipeline or not) or "off" (``TILEAGENT_ENABLE_TMA=0``)."""
    value = os.environ.get(ENV, "").strip()
    if value not in MODES:
        raise ValueError(f"{ENV}={value!r}: expected 0 (off), 1 (every global -> shared copy) or unset (the "
                         "producers of T.Pipelined loops with a T.gemm)")
    return MODES[value]


def standalone() -> bool:
    """Whether a global -> shared copy outside a pipeline's producers may use TMA: only with mode "all"
    (``TILEAGENT_ENABLE_TMA=1``)."""
    return mode() == "all"


def pipeline_uses_tma(loop_body) -> bool:
    """Whether the producers of a T.Pipelined loop with body ``loop_body`` (tile statements) may use TMA: always with
    mode "all", never with "off", by default when the loop runs a T.gemm."""
    from tileagent.compiler.ir.stmt import Gemm
    from tileagent.compiler.ir.visit import walk

    m = mode()
    return m == "all" or (m == "gemm" and any(isinstance(x, Gemm) for x in walk(loop_body)))


def enabled() -> bool:
    """Whether TMA may be used at all (``mode()`` is not "off")."""
    return mode() != "off"


def atom_bytes(swizzle: int) -> int:
    """The alignment a TMA destination with swizzle width ``swizzle`` (0: none) needs in shared memory."""
    return max(DST_ALIGN, 8 * swizzle)


def tma_offsets(rows: int, cols: int, elem: int, swizzle: int) -> np.ndarray:
    """Byte offset (from the tile's start) where TMA puts element (r, c) of an R x C tile, as an [R, C] array: see
    the module docstring (column blocks of ``swizzle`` bytes, or one block without a swizzle)."""
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    width = swizzle // elem if swizzle else cols
    off = (c // width) * (rows * width * elem) + r * (width * elem) + (c % width) * elem
    if swizzle:
        off = off ^ (((off >> 7) & (swizzle // 16 - 1)) << 4)
    return off


def tma_model(layout, shape: tuple, elem: int) -> int | None:
    """The swizzle width (128, 64, 32; 0 = none) with which TMA writes exactly ``layout`` (a shared Layout of a tile
    of ``shape``, viewed as rows x its last dim), or None when no TMA box sequence does."""
    if not shape or any(not isinstance(n, int) for n in shape):
        return None
    cols, rows = shape[-1], math.prod(shape[:-1])
    try:
        table = np.asarray(layout.table(), dtype=np.int64).reshape(rows, cols) * elem
    except (ValueError, AttributeError):
        return None
    for swizzle in SWIZZLES + (0,):
        width = swizzle // elem if swizzle else cols
        if swizzle and (cols % width or width * elem != swizzle):
            continue
        if not swizzle and (cols * elem % 16 or cols > MAX_BOX):
            continue
        if rows > MAX_BOX:
            continue
        if np.array_equal(table, tma_offsets(rows, cols, elem, swizzle)):
            return swizzle
    return None


@dataclass(frozen=True)
class TmaPlan:
    """How one copy moves by TMA. ``box``: elements per global dim, innermost first (one load's box); ``blocks``:
    loads per copy (column blocks), the k-th at inner coordinate + k * box[0] into the tile's byte offset
    k * ``block_bytes``; ``swizzle``: 128, 64, 32 or 0; ``bytes``: what the copy delivers (the mbarrier's tx
    count), full boxes including out-of-bounds zeros."""

    box: tuple
    blocks: int
    block_bytes: int
    swizzle: int
    bytes: int


def plan(src, dst, layout, elem_offset_align=None) -> TmaPlan | str:
    """The TmaPlan of copying Region ``src`` (global) into Region ``dst`` (shared, laid out as ``layout``), or one line
    why TMA cannot. ``elem_offset_align``: the byte offsets the destination may start at, (arena offset, stage
    stride) when known (lowering), checked against the alignment the plan needs."""
    from tileagent.compiler.ir.simplify import static_int

    g, t = src.buffer, dst.buffer
    if g.scope != "global" or t.scope != "shared":
        return "moves global memory into shared memory only"
    if g.dtype != t.dtype:
        return f"cannot convert dtypes ({g.dtype} -> {t.dtype})"
    if str(g.dtype) not in TMA_DTYPES:
        return f"no TMA data type for {g.dtype}"
    shape = tuple(static_int(n) for n in t.shape)
    if None in shape or len(shape) > MAX_RANK:
        return f"needs a shared tile of static shape with at most {MAX_RANK} dims; '{t.name}' is {tuple(t.shape)}"
    whole = all(static_int(x) == 0 for x in dst.starts) and tuple(static_int(n) for n in dst.extents) == shape
    if not whole and not _column_blocks(dst, layout, shape):
        return (f"needs the whole shared tile '{t.name}' as destination (or whole 128-byte column blocks of its "
                f"rows, from a start known to be a block multiple)")
    dst_ext = tuple(static_int(n) for n in dst.extents)
    if g.ndim > MAX_RANK:
        return f"maps global tensors of at most {MAX_RANK} dims; '{g.name}' has {g.ndim}"
    ext = tuple(static_int(n) for n in src.extents)
    if None in ext:
        return "needs static copy extents"
    if [n for n in ext if n != 1] != [n for n in dst_ext if n != 1]:
        return f"the source extents {ext} do not pair with the destination's {dst_ext}"
    if ext[-1] == 1 or dst_ext[-1] != ext[-1]:
        return "needs the innermost (contiguous) global dim to be the tile's last dim"
    elem = g.dtype.bytes
    swizzle = tma_model(layout, shape, elem)
    if swizzle is None:
        return (f"the shared layout of '{t.name}' is not one TMA writes (row-major, or a 32/64/128-byte hardware "
                f"swizzle of rows of that width)")
    need = atom_bytes(swizzle)
    if getattr(layout, "align_bytes", 16) < need:
        return f"'{t.name}' is not aligned to {need} bytes in shared memory"
    for where in elem_offset_align or ():
        if where % need:
            return f"'{t.name}' starts at a shared byte offset ({where}) that is not a multiple of {need}"
    dims = [static_int(n) for n in g.shape]
    if None not in dims:
        stride = elem
        for n in reversed(dims[1:]):
            stride *= n
            if stride % 16:
                return (f"the global strides of '{g.name}' {tuple(dims)} are not multiples of 16 bytes "
                        f"({stride} bytes)")
    width = swizzle // elem if swizzle else shape[-1]
    box = (width,) + tuple(reversed(ext[:-1]))
    if any(b > MAX_BOX for b in box):
        return f"box {box} has a dim over {MAX_BOX}"
    if not whole and shape[-1] // width == 1:
        return "copies whole column blocks only where the tile has several"
    blocks = dst_ext[-1] // width
    rows = math.prod(shape[:-1])
    return TmaPlan(box, blocks, rows * width * elem, swizzle, math.prod(dst_ext) * elem)


def _column_blocks(dst, layout, shape) -> bool:
    """Whether Region ``dst`` is all rows of its tile and whole column blocks of ``layout`` (``col_block``) from a
    start known to be a multiple of the block: TMA writes each block as it writes a whole tile's."""
    from tileagent.compiler.ir.simplify import known_multiple, static_int

    cb = getattr(layout, "col_block", 0)
    if not cb or len(shape) < 2:
        return False
    if any(static_int(x) != 0 for x in dst.starts[:-1]) or \
            tuple(static_int(n) for n in dst.extents[:-1]) != tuple(shape[:-1]):
        return False
    n = static_int(dst.extents[-1])
    return n is not None and n % cb == 0 and known_multiple(dst.starts[-1]) % cb == 0


def _tma_copies(body, in_pipeline: bool = False):
    """The global -> shared ``T.copy`` statements of ``body`` that ``mode()`` lets TMA fill: those in a T.Pipelined
    loop where ``pipeline_uses_tma``, and with mode "all" every one."""
    from tileagent.compiler.ir.stmt import Copy, For

    for s in body:
        if isinstance(s, Copy) and s.src.buffer.scope == "global" and s.dst.buffer.scope == "shared" and \
                (in_pipeline or standalone()):
            yield s
        inner = in_pipeline or (isinstance(s, For) and s.kind == "pipelined" and pipeline_uses_tma(s.body))
        for name in ("body", "then_body", "else_body"):
            yield from _tma_copies(getattr(s, name, ()) or (), inner)


def align_tiles(func, layouts, target) -> None:
    """Raise ``align_bytes`` of every shared tile that a global -> shared ``T.copy`` may fill by TMA (its layout is
    one TMA writes; ``mode()`` says which copies may) to what TMA and its swizzle need, in ``layouts.shared`` (tiles
    without a layout there get their row-major one). A tile with the default bank-conflict swizzle (``swizzled``)
    that TMA cannot write (rows of 64 bytes, or wider than 128) gets the wgmma canonical layout instead, which TMA
    writes and which is as free of bank conflicts for ldmatrix (8 consecutive rows of a column block hit 8 distinct
    16-byte chunks). Nothing changes when TMA is switched off or ``target`` has no "tma" feature."""
    from tileagent.compiler.layout.layout import Layout, swizzled, wgmma_operand

    if not usable(target):
        return
    for s in _tma_copies(func.body):
        t = s.dst.buffer
        layout = layouts.shared.get(t)
        if not isinstance(layout, Layout):
            if layout is not None or any(not isinstance(n, int) for n in t.shape):
                continue
            layout = Layout.row_major(tuple(t.shape))
        shape, elem = tuple(t.shape), t.dtype.bytes
        swizzle = tma_model(layout, shape, elem)
        if swizzle is None and layout == swizzled(shape, elem) and wgmma_operand(shape, elem) is not None:
            layout = wgmma_operand(shape, elem)  # the conflict-free swizzle TMA can write (wider rows in blocks)
            swizzle = tma_model(layout, shape, elem)
            layouts.shared[t] = layout
        if swizzle is not None and layout.align_bytes < atom_bytes(swizzle):
            layouts.shared[t] = replace(layout, align_bytes=atom_bytes(swizzle))


def usable(target) -> bool:
    """TMA is not switched off and ``target`` (a Target; None: no) has it."""
    return enabled() and target is not None and has_feature(target, "tma")


class TmaTileCopy(WholeTileCopy):
    name = "cp.async.bulk.tensor (TMA)"
    moves = ("global", "shared")
    unit = "TMA"

    def switched_off(self) -> str | None:
        return None if enabled() else f"switched off: {ENV}=0"

    def plan(self, src, dst, layout, offsets=None):
        return plan(src, dst, layout, offsets)

    def describe_plan(self, p: TmaPlan, dtype) -> str:
        sw = f"{p.swizzle}B swizzle" if p.swizzle else "no swizzle"
        box = "x".join(str(b) for b in p.box)
        return f"TMA {len(p.box)}d box {box} x{p.blocks}, {sw}, {p.bytes} B on an mbarrier"

    def cuda_emitters(self) -> dict:
        from tileagent.compiler.targets.cuda_tma import HANDLERS

        return dict(HANDLERS)

    def emulators(self) -> dict:
        from tileagent.compiler.emulate_tma import HANDLERS

        return dict(HANDLERS)
