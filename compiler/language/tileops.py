"""Tile operators: ``T.copy``, ``T.gemm``, ``T.fill``/``T.clear``, ``T.reduce_*``, ``T.atomic_add/max/min``.

Each builtin turns its operands into Regions and builds one statement. Operands are a whole Buffer, a sliced
region ``A[b, i * 64:(i + 1) * 64, :]``, or an element ``A[i, j]`` naming the tile's origin (its extent is taken
from the other operand). Shape agreement is checked by ``compiler.check`` with the statement's span.
"""

from __future__ import annotations

import enum

from tileagent.compiler.diagnostics import DSLTypeError, ShapeError, UnsupportedError
from tileagent.compiler.ir.expr import Expr, Load, as_expr, describe, make_cast
from tileagent.compiler.ir.stmt import (AtomicAdd, AtomicAddTile, Buffer, Copy, Fill, Gemm, Reduce, Region, Store)


class GemmWarpPolicy(enum.IntEnum):
    """How T.gemm splits the block's warps over the output tile.

    Square: balance warps between M and N. FullRow: all warps along M (each warp owns whole rows; row reductions
    stay warp-local). FullCol: all warps along N.
    """

    Square = 0
    FullRow = 1
    FullCol = 2


def _tile(x, op: str, arg: str) -> Region | Load:
    if isinstance(x, Buffer):
        return Region.whole(x)
    if isinstance(x, (Region, Load)):
        return x
    raise DSLTypeError(f"{op}: {arg} must be a buffer, a region or an element of a buffer, got {describe(x)}",
                       code="E309")


def _from_origin(origin: Load, extents: tuple[int, ...], op: str) -> Region:
    """The region at ``origin`` whose extents are the other operand's, right-aligned to the origin's rank."""
    rank = origin.buffer.ndim
    ext = tuple(extents)
    while len(ext) > rank and ext[0] == 1:
        ext = ext[1:]
    if len(ext) > rank:
        raise ShapeError(f"{op}: a {len(ext)}-d tile {ext} cannot start at an element of the {rank}-d buffer "
                         f"{origin.buffer.name}", code="E402",
                         hint="index the origin with one index per dimension of the buffer")
    return Region(origin.buffer, origin.indices, (1,) * (rank - len(ext)) + ext)


def _element_region(load: Load) -> Region:
    return Region(load.buffer, load.indices, (1,) * load.buffer.ndim)


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None, *, prefer_instruction=None,
         annotations=None, loop_layout=None):
    """Copy a tile from ``src`` to ``dst`` (any scopes), converting the dtype.

    Extents are compared after dropping size-1 dims, so a 4-d slice may fill a 2-d tile. Out-of-bounds reads of
    global memory give 0 and out-of-bounds writes to global memory are dropped.
    """
    s, d = _tile(src, "T.copy", "src"), _tile(dst, "T.copy", "dst")
    if isinstance(s, Load) and isinstance(d, Load):  # element to element
        return Store(d.buffer, d.indices, make_cast(s, d.buffer.dtype))
    if isinstance(s, Load):
        s = _from_origin(s, d.extents, "T.copy")
    if isinstance(d, Load):
        d = _from_origin(d, s.extents, "T.copy")
    return Copy(s, d)


def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False, k_pack=1,
         wg_wait=0, mbar=None, annotations=None):
    """C (+)= op(A) @ op(B), op transposing when asked. A and B in shared memory or fragments, C a fragment.

    C accumulates in its own dtype (usually float32); ``clear_accum=True`` zeroes it first.
    """
    regions = []
    for x, arg in ((A, "A"), (B, "B"), (C, "C")):
        r = _tile(x, "T.gemm", arg)
        if isinstance(r, Load):
            raise DSLTypeError(f"T.gemm: {arg} must be a whole buffer or a sliced region, not an element",
                               code="E309", hint="pass the tile itself: T.gemm(A_shared, B_shared, C_local)")
        regions.append(r)
    if isinstance(policy, bool) or not isinstance(policy, int) or policy not in tuple(GemmWarpPolicy):
        raise DSLTypeError(f"T.gemm: unknown policy {policy!r}", code="E303",
                           hint="use T.GemmWarpPolicy.Square, FullRow or FullCol")
    return Gemm(*regions, bool(transpose_A), bool(transpose_B), int(policy), bool(clear_accum))


def fill(buffer, value):
    """Set every element of a buffer or region to ``value``."""
    r = _tile(buffer, "T.fill", "buffer")
    if isinstance(r, Load):
        r = _element_region(r)
    return Fill(r, make_cast(as_expr(value, r.buffer.dtype), r.buffer.dtype))


def clear(buffer):
    """Set every element to 0."""
    return fill(buffer, 0)


def _reduce(kind: str, buffer, out, dim, clear):
    for x, arg in ((buffer, "buffer"), (out, "out")):
        if not isinstance(x, Buffer):
            raise DSLTypeError(f"T.reduce_{kind}: {arg} must be a whole buffer, got {describe(x)}", code="E309")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise DSLTypeError(f"T.reduce_{kind}: dim must be a compile-time int, got {dim!r}", code="E404")
    return Reduce(kind, buffer, out, dim, bool(clear))


def reduce_sum(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """out = sum of buffer over ``dim`` (added to out's old value when clear=False)."""
    return _reduce("sum", buffer, out, dim, clear)


def reduce_max(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False, annotations=None):
    """out = max of buffer over ``dim`` (max with out's old value when clear=False)."""
    return _reduce("max", buffer, out, dim, clear)


def reduce_min(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False, annotations=None):
    return _reduce("min", buffer, out, dim, clear)


def reduce_absmax(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False, annotations=None):
    return _reduce("absmax", buffer, out, dim, clear)


def reduce_abssum(buffer, out, dim=-1, batch=1, annotations=None):
    """out = sum of |buffer| over ``dim``; always clears."""
    return _reduce("abssum", buffer, out, dim, True)


def reduce(buffer, out, reduce_type, dim=-1, clear=True):
    kinds = ("sum", "max", "min", "abssum", "absmax")
    if reduce_type not in kinds:
        raise DSLTypeError(f"T.reduce: unknown reduce_type {reduce_type!r}; known: {', '.join(kinds)}", code="E301")
    return _reduce(reduce_type, buffer, out, dim, clear)


_MEMORY_ORDERS = ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst")


def _atomic(op: str, dst, value, memory_order, return_prev):
    """The scalar (AtomicAdd) or tile (AtomicAddTile) statement of ``T.atomic_<op>``."""
    name = f"T.atomic_{op}"
    if memory_order is not None and memory_order not in _MEMORY_ORDERS:
        raise DSLTypeError(f"{name}: memory_order must be one of {', '.join(_MEMORY_ORDERS)}, got {memory_order!r}",
                           code="E309")
    if memory_order not in (None, "relaxed"):
        raise UnsupportedError(f"{name}(memory_order={memory_order!r}) is not supported: TileAgent's atomics are "
                               f"relaxed (CUDA's atomicAdd/atomicMax/atomicCAS)",
                               hint="drop memory_order or pass 'relaxed'; order other accesses with T.sync_threads "
                                    "or a separate kernel")
    if return_prev:
        raise UnsupportedError(f"{name}(return_prev=True) is not supported: TileAgent's atomics are statements and "
                               f"do not return the previous value",
                               hint="count with a T.Parallel reduction or T.cumsum instead of fetch-and-add positions")
    if isinstance(value, (Buffer, Region)) or (isinstance(value, Load) and not isinstance(dst, Load)):
        src = _tile(value, name, "value")
        d = _tile(dst, name, "dst")
        if isinstance(src, Load):
            src = _from_origin(src, d.extents, name)
        if isinstance(d, Load):
            d = _from_origin(d, src.extents, name)
        return AtomicAddTile(d, src, op=op)
    if not isinstance(dst, Load):
        raise DSLTypeError(f"{name}: dst must be an element like C[i, j] for a scalar value, got "
                           f"{describe(dst)}", code="E309")
    if not isinstance(value, (Expr, int, float)):
        raise DSLTypeError(f"{name}: value must be a number, an expression or a tile, got {describe(value)}",
                           code="E309")
    return AtomicAdd(dst.buffer, dst.indices, make_cast(as_expr(value, dst.buffer.dtype), dst.buffer.dtype), op=op)


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False, annotations=None):
    """Atomically add into global (or shared) memory.

    Scalar form: ``T.atomic_add(C[i, j], x)``. Tile form: ``T.atomic_add(C[by * BM, bx * BN], C_local)``.
    ``memory_order``: None or "relaxed" (stronger orders and ``return_prev=True`` are E701).
    """
    return _atomic("add", dst, value, memory_order, return_prev)


def atomic_max(dst, value, memory_order=None, return_prev=False, annotations=None):
    """Atomically replace ``dst`` by ``value`` where ``value`` is greater (TileLang's T.atomic_max).

    Scalar form: ``T.atomic_max(M[i], x)``. Tile form: ``T.atomic_max(M[by * BM, bx * BN], tile)`` (elementwise).
    A NaN value never replaces an element (as TileLang's CUDA AtomicMax). ``dst`` is global or shared memory.
    """
    return _atomic("max", dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order=None, return_prev=False, annotations=None):
    """Atomically replace ``dst`` by ``value`` where ``value`` is less (TileLang's T.atomic_min); see atomic_max."""
    return _atomic("min", dst, value, memory_order, return_prev)
