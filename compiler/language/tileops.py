"""Tile operators: ``T.copy``, ``T.gemm``, ``T.fill``/``T.clear``, ``T.reduce_*``, ``T.atomic_add/max/min``.

Each builtin turns its operands into Regions and builds one statement. Operands are a whole Buffer, a sliced
region ``A[b, i * 64:(i + 1) * 64, :]``, or an element ``A[i, j]`` naming the tile's origin (its extent is taken
from the other operand). Shape agreement is checked by ``compiler.check`` with the statement's span.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tileagent.compiler.diagnostics import DSLTypeError, ShapeError, UnsupportedError
from tileagent.compiler.ir.expr import Expr, Load, as_expr, describe, make_binop, make_cast
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import (AtomicAdd, AtomicAddTile, Buffer, Copy, Fill, Gemm, Reduce, Region, Store)
from tileagent.compiler.language import packed


class GemmWarpPolicy(enum.IntEnum):
    """How T.gemm splits the block's warps over the output tile.

    Square: balance warps between M and N. FullRow: all warps along M (each warp owns whole rows; row reductions
    stay warp-local), or as many as split M into 16-row atoms, the rest along N. FullCol: all warps along N, or as
    many as split N into 8-column atoms, the rest along M (TileLang's rule).
    """

    Square = 0
    FullRow = 1
    FullCol = 2


def _tile(x, op: str, arg: str) -> Region | Load:
    x = packed.target(x)  # an element of an int4 / uint4 buffer: its byte
    if isinstance(x, Buffer):
        x = Region.whole(x)
    if isinstance(x, (Region, Load)):
        packed.check_tile_op(x, op, arg)
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


EVICTION_POLICIES = (None, "evict_normal", "evict_first", "evict_last")  # TileLang's values, in its order


def eviction_hint(policy) -> str | None:
    """The cache hint ``T.copy(..., eviction_policy=policy)`` asks for: "evict_first" or "evict_last", else None
    (None and "evict_normal": the default policy, no hint).

    Raises:
        DSLTypeError: E310 for any value outside ``EVICTION_POLICIES``.
    """
    if not (policy is None or (isinstance(policy, str) and policy in EVICTION_POLICIES)):
        raise DSLTypeError(f"T.copy: eviction_policy must be one of None, 'evict_normal', 'evict_first', "
                           f"'evict_last', got {policy!r}", code="E310",
                           hint="'evict_first' for data read once (streamed through L1/L2), 'evict_last' for data "
                                "other blocks read again; leave it out (or 'evict_normal') for no hint")
    return None if policy in (None, "evict_normal") else policy


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None, *, prefer_instruction=None,
         annotations=None, loop_layout=None):
    """Copy a tile from ``src`` to ``dst`` (any scopes), converting the dtype.

    Extents are compared after dropping size-1 dims, so a 4-d slice may fill a 2-d tile. Out-of-bounds reads of
    global memory give 0 and out-of-bounds writes to global memory are dropped. ``eviction_policy`` (TileLang's:
    None, "evict_normal", "evict_first", "evict_last"; anything else E310) is a cache hint without semantic effect:
    the tile IR keeps "evict_first"/"evict_last" (``Copy.eviction_policy``; "evict_normal" is the default, None) and
    the CUDA target hints the copy's vector loads from global memory with it (``compiler.targets.cuda_cache_hints``).
    """
    hint = eviction_hint(eviction_policy)
    s, d = _tile(src, "T.copy", "src"), _tile(dst, "T.copy", "dst")
    if isinstance(s, Load) and isinstance(d, Load):  # element to element
        packed.check_store(d.buffer)  # one int4 / uint4 element shares its byte
        return Store(d.buffer, d.indices, make_cast(src if s.buffer.packed else s, d.buffer.dtype))
    if isinstance(s, Load):
        s = _from_origin(s, d.extents, "T.copy")
    if isinstance(d, Load):
        d = _from_origin(d, s.extents, "T.copy")
    if s.buffer.packed or d.buffer.packed:
        packed.check_copy(s, d)
    if "local" in (s.buffer.scope, d.buffer.scope) and _per_thread_code():
        return _per_thread_copy(s, d)
    return Copy(s, d, eviction_policy=hint)


def _per_thread_code() -> bool:
    """Whether the kernel being parsed has per-thread code (it asked for a thread index: T.get_thread_binding)."""
    from tileagent.compiler.language.extras import CURRENT_THREAD_VARS

    threads = CURRENT_THREAD_VARS.get()
    return threads is not None and threads.used


def _per_thread_copy(s: Region, d: Region):
    """``T.copy`` to or from a per-thread local in per-thread code (TileLang's compressor copies each thread's slice
    of a row into its registers): every thread copies the elements of its own regions, in an unrolled loop nest;
    out-of-bounds global reads give 0 and writes are dropped, as for any element access."""
    from tileagent.compiler.dtypes import DType
    from tileagent.compiler.ir.expr import Var
    from tileagent.compiler.ir.stmt import For

    shape = [n for n in s.extents if n != 1]
    if shape != [n for n in d.extents if n != 1] or any(static_int(n) is None for n in shape):
        raise ShapeError(f"T.copy: per-thread regions of extents {s.extents} and {d.extents} do not match (size-1 "
                         f"dims dropped) or are not compile-time sizes", code="E402")
    loop = [Var(f"{d.buffer.name}_c{k}", DType("int32")) for k in range(len(shape))]

    def at(r: Region):
        idx, it = list(r.starts), iter(loop)
        for k, n in enumerate(r.extents):
            if n != 1:
                idx[k] = make_binop("+", idx[k], next(it))
        return tuple(idx)

    body = (Store(d.buffer, at(d), make_cast(Load(s.buffer, at(s), s.buffer.dtype), d.buffer.dtype)),)
    for v, n in reversed(list(zip(loop, shape))):
        body = (For(v, 0, static_int(n), 1, "unroll", body),)
    return body[0]


def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False, k_pack=1,
         wg_wait=0, mbar=None, annotations=None):
    """C (+)= op(A) @ op(B), op transposing when asked. A and B in shared memory or fragments, C a fragment.

    C accumulates in its own dtype (usually float32); ``clear_accum=True`` zeroes it first. A runtime condition
    (TileLang's ``clear_accum=(k == 0)`` in a loop) becomes ``if cond: T.clear(C)`` before an accumulating gemm.
    """
    return gemm_statements(Gemm, A, B, C, transpose_A, transpose_B, policy, clear_accum)


def gemm_statements(node: type, A, B, C, transpose_A, transpose_B, policy, clear_accum):
    """The ``node`` (Gemm or a subclass) of ``T.gemm``'s arguments, or with a runtime ``clear_accum`` the list
    [If(clear_accum, T.clear(C)), node accumulating]."""
    from tileagent.compiler.ir.expr import make_cmp
    from tileagent.compiler.ir.simplify import static_int
    from tileagent.compiler.ir.stmt import If

    clear_first = None
    if isinstance(clear_accum, Expr):
        v = static_int(clear_accum)
        if v is None:
            clear_first = clear_accum if clear_accum.dtype == "bool" else make_cmp("!=", clear_accum, 0)
            clear_accum = False
        else:
            clear_accum = bool(v)
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
    g = node(*regions, bool(transpose_A), bool(transpose_B), int(policy), bool(clear_accum),
             packed=packed.gemm_dtype(regions, bool(transpose_A), bool(transpose_B)))
    if clear_first is None:
        return g
    c = regions[2]
    return [If(clear_first, (Fill(c, make_cast(as_expr(0, c.buffer.dtype), c.buffer.dtype)),), ()), g]


def fill(buffer, value):
    """Set every element of a buffer or region to ``value``."""
    r = _tile(buffer, "T.fill", "buffer")
    if isinstance(r, Load):
        if r.buffer.packed:
            raise DSLTypeError(f"T.fill of one element of {r.buffer.packed} buffer '{r.buffer.name}' (two elements a "
                               f"byte)", code="E302", hint="fill the whole tile, or a slice of an even width")
        r = _element_region(r)
    if r.buffer.packed:
        value = packed.fill_byte(r.buffer, value)
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


def reduce_prod(buffer, out, dim=-1, clear=True):
    """out = product of buffer over ``dim`` (times out's old value when clear=False); TileAgent's, not TileLang's."""
    return _reduce("prod", buffer, out, dim, clear)


def reduce_abssum(buffer, out, dim=-1, batch=1, annotations=None):
    """out = sum of |buffer| over ``dim``; always clears."""
    return _reduce("abssum", buffer, out, dim, True)


def reduce(buffer, out, reduce_type, dim=-1, clear=True):
    from tileagent.compiler.tileops.reduce import KINDS as kinds
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
    if isinstance(value, (Buffer, Region)) or (isinstance(value, Load) and not isinstance(dst, Load)):
        if return_prev:
            raise UnsupportedError(f"{name}(return_prev=True) of a tile is not supported: only the scalar form "
                                   f"returns the previous value", hint=f"{name}(dst[i], value, return_prev=True) "
                                   f"on one element")
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
    stmt = AtomicAdd(dst.buffer, dst.indices, make_cast(as_expr(value, dst.buffer.dtype), dst.buffer.dtype), op=op)
    return ReturnPrev(stmt) if return_prev else stmt


@dataclass(frozen=True)
class ReturnPrev:
    """``T.atomic_<op>(dst[i], value, return_prev=True)`` as the builtin returns it: the frontend emits ``stmt`` with
    its ``prev`` set to a hidden per-thread variable and gives the calling expression that variable's value
    (``frontend_expressions.ExpressionParser.atomic_result``)."""

    stmt: AtomicAdd


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False, annotations=None):
    """Atomically add into global (or shared) memory.

    Scalar form: ``T.atomic_add(C[i, j], x)``. Tile form: ``T.atomic_add(C[by * BM, bx * BN], C_local)``.
    ``memory_order``: None or "relaxed" (stronger orders are E701). ``return_prev=True`` (scalar form, per-thread
    code): the call is also a value, the element before this thread's update (CUDA's ``atomicAdd`` result).
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


def im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy=None, annotations=None):
    """TileLang's ``T.im2col``: the (nhw_step, c_step) tile of the im2col matrix of an NHWC image into ``col``.

    ``img`` is a global (N, H, W, C) tensor; ``col`` a 2-d tile (block_M, block_K) (a buffer or region whose other
    dims are 1). Row m of the tile is output pixel p = nhw_step * block_M + m (n = p // (OH * OW), oh = p // OW % OH,
    ow = p % OW, with OH/OW the square convolution's output size); column k is kk = c_step * block_K + k of the
    flattened (kh, kw, c) patch (c = kk % C, kw = kk // C % kernel, kh = kk // (C * kernel)): the value is
    img[n, oh * stride - pad + kh * dilation, ow * stride - pad + kw * dilation, c], 0 outside the image and past
    the last pixel or patch element (TileLang's TMA im2col fills those with zeros). It becomes the T.Parallel loop
    that computes this (every backend runs it as written); ``eviction_policy`` is a cache hint without effect.
    """
    from tileagent.compiler.dtypes import DType
    from tileagent.compiler.ir.expr import Var, make_binop, make_cmp, make_logical, make_select
    from tileagent.compiler.ir.stmt import Parallel

    if not isinstance(img, Buffer) or img.scope != "global" or img.ndim != 4:
        raise DSLTypeError(f"T.im2col: img must be a global (N, H, W, C) tensor, got {describe(img)}", code="E309")
    dst = _tile(col, "T.im2col", "col")
    if isinstance(dst, Load):
        raise DSLTypeError("T.im2col: col must be a tile (a buffer or a region), not an element", code="E309")
    dims = [dst.buffer.ndim - 2, dst.buffer.ndim - 1]
    if dst.buffer.ndim < 2 or any(e != 1 for e in dst.extents[:-2]):
        raise ShapeError(f"T.im2col: col must be a 2-d (pixels x patch elements) tile, got extents {dst.extents}",
                         code="E402")
    for what, v in (("kernel", kernel), ("stride", stride), ("dilation", dilation), ("pad", pad)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if what == "pad" else 1):
            raise DSLTypeError(f"T.im2col: {what} must be a {'non-negative' if what == 'pad' else 'positive'} "
                               f"Python integer, got {v!r}", code="E301")
    if img.dtype != dst.buffer.dtype:
        raise DSLTypeError(f"T.im2col: img ({img.dtype}) and col ({dst.buffer.dtype}) must have one dtype",
                           code="E302")
    N, H, W, C = img.shape
    block_m, block_k = dst.extents[dims[0]], dst.extents[dims[1]]
    oh_n = make_binop("+", make_binop("//", make_binop("-", make_binop("+", H, 2 * pad), dilation * (kernel - 1) + 1),
                                      stride), 1)
    ow_n = make_binop("+", make_binop("//", make_binop("-", make_binop("+", W, 2 * pad), dilation * (kernel - 1) + 1),
                                      stride), 1)
    m, k = Var(f"{dst.buffer.name}_m", DType("int32")), Var(f"{dst.buffer.name}_k", DType("int32"))
    p = make_binop("+", make_binop("*", nhw_step, block_m), m)
    kk = make_binop("+", make_binop("*", c_step, block_k), k)
    n = make_binop("//", p, make_binop("*", oh_n, ow_n))
    h = make_binop("+", make_binop("-", make_binop("*", make_binop("%", make_binop("//", p, ow_n), oh_n), stride), pad),
                   make_binop("*", make_binop("//", kk, make_binop("*", C, kernel)), dilation))
    w = make_binop("+", make_binop("-", make_binop("*", make_binop("%", p, ow_n), stride), pad),
                   make_binop("*", make_binop("%", make_binop("//", kk, C), kernel), dilation))
    c = make_binop("%", kk, C)
    inside = make_cmp("<", n, N)
    for v, lim in ((h, H), (w, W)):
        inside = make_logical("and", inside, make_logical("and", make_cmp(">=", v, 0), make_cmp("<", v, lim)))
    inside = make_logical("and", inside, make_cmp("<", kk, C * kernel * kernel))
    value = make_select(inside, Load(img, (n, h, w, c), img.dtype), 0)
    index = list(dst.starts)
    index[dims[0]] = make_binop("+", index[dims[0]], m)
    index[dims[1]] = make_binop("+", index[dims[1]], k)
    return Parallel((m, k), (block_m, block_k), (Store(dst.buffer, tuple(index), make_cast(value, dst.buffer.dtype)),))


c2d_im2col = im2col  # TileLang's deprecated name
