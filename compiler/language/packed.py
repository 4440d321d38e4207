"""Packed sub-byte buffers: int4 / uint4 tensors and tiles, two elements a byte (``compiler.dtypes.PACKED``).

In: a buffer declared with a packed dtype (``T.Tensor((M, K), T.int4)``, ``T.alloc_shared((bm, bk), T.int4)``) and
the program's accesses to it. Out: a byte buffer (int8 / uint8) of half the last dim, marked ``Buffer.packed``, and
its accesses in bytes: a slice or a tile op's origin halves the last dim's start and extent; reading one element is
its nibble, widened to int32 (int4 sign-extended, uint4 not); ``T.gemm`` of two int4 (uint4) tiles into int32 is a
``Gemm`` marked ``packed`` (``compiler.instructions.mma_sync.MmaSyncM16N8K64``). A torch argument for such a tensor is
the int8 / uint8 tensor the elements are packed in (shape (..., K / 2): element 2k in the low nibble of byte k).
Guarantees: the frontend resolves every access, so later passes see byte buffers only; what cannot be expressed in
whole bytes (an odd last dim or start, storing one element, converting copies, other tile ops) is an E302 naming
the buffer. Element reads keep their byte origin (``origin``) so that ``T.copy(A[i, k], A_s)`` still names a tile.
"""

from __future__ import annotations

import threading

from tileagent.compiler.diagnostics import DSLTypeError, ShapeError
from tileagent.compiler.dtypes import DType, PACKED, packed_name
from tileagent.compiler.ir.expr import Expr, Load, as_expr, make_binop, make_cast
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import Region

TILE_OPS = ("T.copy", "T.gemm", "T.fill", "T.clear")  # the tile ops that take packed tiles (as bytes)
_LOCAL = threading.local()  # .origins: id(element read) -> (the read, its byte); per thread (parallel compiles)


def declare(shape: tuple, dtype, what: str) -> tuple[tuple, DType, str] | None:
    """(storage shape, storage dtype, packed name) of a buffer declared as ``shape`` of ``dtype``; None when the
    dtype is not a packed one."""
    name = packed_name(dtype)
    if name is None:
        return None
    last = shape[-1] if shape else None
    n = static_int(last) if last is not None else None
    if last is None or (n is not None and n % 2):
        raise ShapeError(f"{what}: a {name} buffer's last dim is stored two elements a byte and must be even, got "
                         f"shape {tuple(shape)}", code="E302")
    half = n // 2 if n is not None else make_binop("//", last, 2)
    return tuple(shape[:-1]) + (half,), DType(PACKED[name]), name


def _byte_index(index, buf, what: str):
    n = static_int(index)
    if n is not None and n % 2:
        raise ShapeError(f"{what} of {buf.packed} buffer '{buf.name}' starts at element {n} of its last dim, inside "
                         f"a byte (two elements a byte): start tiles of it at even elements", code="E302")
    return n // 2 if n is not None else make_binop("//", index, 2)


def region(buf, starts: tuple, extents: tuple) -> Region:
    """The byte region of elements ``starts`` + ``extents`` of packed ``buf``."""
    if extents[-1] % 2:
        raise ShapeError(f"a slice of {buf.packed} buffer '{buf.name}' spans {extents[-1]} elements of its last "
                         f"dim, an odd count (two elements a byte)", code="E302")
    return Region(buf, tuple(starts[:-1]) + (_byte_index(starts[-1], buf, "a slice"),),
                  tuple(extents[:-1]) + (extents[-1] // 2,))


def element(buf, indices: tuple, span=None) -> Expr:
    """The value of element ``indices`` of packed ``buf`` as int32: its nibble of the byte holding it."""
    indices = tuple(indices[:-1]) + (as_expr(indices[-1]),)
    nibble = make_binop("&", make_binop(">>", make_cast(_byte(buf, indices, span, False), DType("int32")),
                                        make_binop("*", make_binop("%", indices[-1], 2), 4)), 15)
    value = make_binop("-", make_binop("^", nibble, 8), 8) if buf.packed == "int4" else nibble  # int4: sign-extended
    _origins()[id(value)] = (value, buf, indices, span)
    return value


def _byte(buf, indices: tuple, span, tile: bool) -> Load:
    """The byte holding element ``indices`` of packed ``buf``; as a tile's origin (``tile``) the element must start
    it (E302 otherwise)."""
    last = _byte_index(indices[-1], buf, "a tile") if tile else make_binop("//", indices[-1], 2)
    return Load(buf, indices[:-1] + (last,), buf.dtype, span)


def origin(x, tile: bool = True) -> Load | None:
    """The byte of ``x`` when it is an element read of a packed buffer (``element``), else None; as a tile's origin
    (``tile``) the element must start its byte (E302 otherwise)."""
    entry = _origins().get(id(x))
    if entry is None or entry[0] is not x:
        return None
    return _byte(*entry[1:], tile)


def target(ref, tile: bool = True):
    """The byte of ``ref`` when it is an element read of a packed buffer, else ``ref``: a tile op's origin, or with
    ``tile=False`` an assignment's target (which ``check_store`` then refuses)."""
    byte = origin(ref, tile)
    return ref if byte is None else byte


def check_store(buf) -> None:
    """E302 when ``buf`` is packed: one element of it cannot be stored (it shares its byte)."""
    if buf.packed:
        raise DSLTypeError(f"cannot store one element of {buf.packed} buffer '{buf.name}' (two elements a byte)",
                           code="E302", hint=f"fill {buf.name} whole with T.copy from another {buf.packed} tile, or "
                                             f"T.fill / T.clear it")


def reset() -> None:
    """Forget the element reads of the last prim_func (the frontend calls this before parsing one)."""
    _origins().clear()


def _origins() -> dict:
    if not hasattr(_LOCAL, "origins"):
        _LOCAL.origins = {}
    return _LOCAL.origins


def check_tile_op(r, op: str, arg: str) -> None:
    """E302 when ``r`` (a Region or Load) is a packed tile passed to a tile op other than ``TILE_OPS``."""
    buf = getattr(r, "buffer", None)
    if buf is not None and buf.packed and op not in TILE_OPS:
        raise DSLTypeError(f"{op}: {arg} '{buf.name}' is a {buf.packed} tile (two elements a byte); {op} does not "
                           f"take packed tiles", code="E302",
                           hint=f"read its elements in a T.Parallel loop ({buf.name}[i, j] is an int32 value) into "
                                f"an int32 or float fragment, and use that")


def check_copy(s: Region, d: Region) -> None:
    """E302 for a T.copy between a packed tile and a tile of another dtype (an element-wise conversion)."""
    if s.buffer.packed != d.buffer.packed or (s.buffer.packed and s.buffer.dtype != d.buffer.dtype):
        kinds = [b.packed or str(b.dtype) for b in (s.buffer, d.buffer)]
        raise DSLTypeError(f"T.copy from '{s.buffer.name}' ({kinds[0]}) to '{d.buffer.name}' ({kinds[1]}) converts "
                           f"each element; packed tiles are copied only to tiles of their own dtype", code="E302",
                           hint="read the packed elements in a T.Parallel loop (each is an int32 value) and store "
                                "them into the other tile")


def gemm_dtype(regions: list, transpose_a: bool, transpose_b: bool) -> str:
    """The packed dtype of a T.gemm of ``regions`` (A, B, C): "" for byte-sized operands; E302 when only one of A and
    B is packed, they differ, C is not int32, or K is not their last dim (A (M, K), B (N, K) with transpose_B)."""
    a, b, c = (r.buffer for r in regions)
    if not (a.packed or b.packed):
        return ""
    if a.packed != b.packed or c.dtype != "int32":
        raise DSLTypeError(f"T.gemm: {a.packed or a.dtype} A '{a.name}' and {b.packed or b.dtype} B '{b.name}' into "
                           f"{c.dtype} C '{c.name}': packed operands multiply only as two int4 (or two uint4) tiles "
                           f"into an int32 accumulator", code="E302")
    if transpose_a or not transpose_b:
        raise DSLTypeError(f"T.gemm of {a.packed} tiles: K must be the last dim of both (A as (M, K), B as (N, K) with "
                           f"transpose_B=True), as two elements share a byte along it", code="E302")
    return a.packed


def unpack(t, name: str):
    """The elements of torch byte tensor ``t`` packed as ``name`` (int4 / uint4), as int64: the last dim doubled."""
    import torch

    low = t.to(torch.int64) & 15
    high = (t.to(torch.int64) >> 4) & 15
    out = torch.stack([low, high], dim=-1).reshape(*t.shape[:-1], 2 * t.shape[-1])
    return out - 16 * (out >= 8) if name == "int4" else out


def fill_byte(buf, value):
    """The byte that fills packed ``buf`` with ``value`` in each of its two nibbles (a compile-time int)."""
    v = static_int(value)
    if v is None:
        raise DSLTypeError(f"T.fill of {buf.packed} tile '{buf.name}' needs a compile-time integer value",
                           code="E302")
    lo, hi = (-8, 7) if buf.packed == "int4" else (0, 15)
    if not lo <= v <= hi:
        raise DSLTypeError(f"T.fill: {v} is not a {buf.packed} value ({lo}..{hi})", code="E302")
    byte = (v & 15) * 17
    return byte - 256 if buf.dtype == "int8" and byte > 127 else byte
