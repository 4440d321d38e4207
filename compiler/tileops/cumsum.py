"""``T.cumsum(src, dst=None, dim=0, reverse=False)``: inclusive prefix sums of a tile along ``dim`` (TileLang's op).

``dst`` defaults to ``src`` (in place); with ``reverse=True`` the sums run from the end of ``dim`` (suffix sums).
Both operands are whole buffers of one shape, both fragments or both shared tiles; sums accumulate in float32
(float64 for float64, the buffer's own dtype for integers) and each result is rounded once to dst's dtype.

Check: scopes, shapes, ``dim`` in range, numeric dtypes. Effects: reads src, writes dst.
Layouts (free): cumsum puts no constraint on fragment layouts; an unassigned one takes the blocked default.
Summation order (``split_of``, from the shape, ``dim``, scopes, dtypes and the block's thread count): each line
along ``dim`` (``lines`` = product of the other extents) is split among ``parts`` threads, a power of two: the most
that ``threads // lines`` allows while a part keeps at least ``MIN_CHUNK`` elements and ``threads`` is a multiple of
min(parts, 32); 1 (one thread per line) when lines > threads / 2, and for a shared tile of a narrower dtype than
its sums whose scratch would pass ``SHARED_SCRATCH_MAX``. Float results therefore depend on the block's thread
count, within float rounding; integer results do not. Part ``k`` of a line holds its ``chunk`` = ceil(n / parts),
made odd, consecutive elements from ``k * chunk`` (counted from the end of the line for a suffix scan; trailing
parts may be short or empty). With one part, the running sum starts at 0 and adds the line's elements in order.
With several: (1) each part scans its chunk in order from 0 (its local sums; the last is its total); (2) the totals
are combined by an exclusive butterfly over the parts of a warp (rounds ``mask`` = 1, 2, ... < min(parts, 32):
``other`` = the total of part ``k ^ mask``; where ``k & mask``, ``excl = other + excl``; ``total = total +
other``), and when a line spans several warps the warp totals before a part's warp are added in warp order from 0
(``off``) and ``excl = off + excl``; (3) each output is ``excl + local``. So a sum is rounded at most about chunk +
log2(parts) + 1 times, mostly at chunk magnitudes (one thread per line: n times). Accumulation is in float32
(float64 for float64, the dtype itself for integers) and each output is rounded once into dst's dtype.
Lowering: ``compiler.lower.cumsum`` (that order in the thread IR: in place in shared tiles, through the shared
scratch for fragments).
Interpreter: the same order, vectorized over lines and parts (``split_scan``), so the two agree bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tileagent.compiler.diagnostics import DSLTypeError, ScopeError, ShapeError, Span
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import describe as describe_value
from tileagent.compiler.ir.stmt import Buffer, Stmt
from tileagent.compiler.tileops.base import Effects, TileOp


@dataclass(frozen=True, eq=False, slots=True)
class CumSum(Stmt):
    """T.cumsum: dst[..., i, ...] = sum of src[..., j, ...] for j <= i along ``dim`` (j >= i when ``reverse``)."""

    src: Buffer
    dst: Buffer
    dim: int
    reverse: bool
    span: Span | None = None


def cumsum(src, dst=None, dim=0, reverse=False):
    """Inclusive prefix sums of ``src`` along ``dim`` into ``dst`` (``src`` itself when omitted)."""
    dst = src if dst is None else dst
    for x, arg in ((src, "src"), (dst, "dst")):
        if not isinstance(x, Buffer):
            raise DSLTypeError(f"T.cumsum: {arg} must be a whole buffer, got {describe_value(x)}", code="E309",
                               hint="pass the tile itself: T.cumsum(A_shared, dim=1)")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise DSLTypeError(f"T.cumsum: dim must be a compile-time int, got {dim!r}", code="E404")
    return CumSum(src, dst, dim, bool(reverse))


BUILTINS = {"cumsum": cumsum}


MIN_CHUNK = 4  # the fewest elements of a line a thread scans when several threads split it
SHARED_SCRATCH_MAX = 48 * 1024  # bytes of scratch a 16-bit (or other narrower) shared tile's split scan may take


@dataclass(frozen=True, slots=True)
class Split:
    """How the lowering spreads the scan over a block's threads (the module docstring gives the summation order)."""

    lines: int  # lines along dim: the product of the other extents
    n: int  # a line's length
    parts: int  # threads per line, a power of two; 1: one thread scans a whole line
    chunk: int  # elements per part, ceil(n / parts)

    @property
    def warps(self) -> int:
        """Warps per line when a line spans several (parts > 32), else 1."""
        return max(1, self.parts // 32)


def split(shape, dim: int, threads: int) -> Split:
    """The ``Split`` of a cumsum over a tile of ``shape`` along ``dim`` in a block of ``threads`` threads.

    Guarantees: ``lines * parts <= threads`` when parts > 1; parts is a power of two and ``threads`` is a multiple of
    min(parts, 32) (so a part's butterfly partners exist); with several parts the chunk is odd (so the chunks the
    lanes of a warp scan side by side start in distinct banks) and at least ``MIN_CHUNK``, and the trailing parts
    may be short or empty; with one, the chunk is the line."""
    shape = tuple(int(x) for x in shape)
    dim %= len(shape)
    n, lines = shape[dim], math.prod(x for d, x in enumerate(shape) if d != dim)
    parts = 1
    while (lines * parts * 2 <= threads and -(-n // (parts * 2)) >= MIN_CHUNK
           and threads % min(parts * 2, 32) == 0):
        parts *= 2
    if parts == 1:
        return Split(lines, n, 1, n)
    return Split(lines, n, parts, -(-n // parts) | 1)


def split_of(s, threads: int) -> Split:
    """The ``Split`` of CumSum ``s`` in a block of ``threads``: ``split``, except that a shared dst whose dtype is
    not the accumulation dtype (it cannot hold exact chunk sums in place) scans one thread per line where its
    lines in the accumulation dtype would take more than ``SHARED_SCRATCH_MAX`` bytes of scratch."""
    sp = split(s.src.shape, s.dim % s.src.ndim, threads)
    acc = accumulation_dtype(s.dst.dtype)
    if (sp.parts > 1 and s.dst.scope == "shared" and s.dst.dtype != acc
            and sp.lines * sp.parts * sp.chunk * acc.bytes > SHARED_SCRATCH_MAX):
        return Split(sp.lines, sp.n, 1, sp.n)
    return sp


def split_scan(x: torch.Tensor, parts: int, chunk: int) -> torch.Tensor:
    """The inclusive scan of the rows of ``x`` (lines, n) in the accumulation dtype, in ``Split``'s order."""
    lines, n = x.shape
    xp = torch.zeros((lines, parts * chunk), dtype=x.dtype)
    xp[:, :n] = x
    xp = xp.view(lines, parts, chunk)
    total, local = torch.zeros((lines, parts), dtype=x.dtype), torch.empty_like(xp)
    for i in range(chunk):
        total = total + xp[:, :, i]
        local[:, :, i] = total
    if parts > 1:
        excl = torch.zeros_like(total)
        lane, mask = torch.arange(parts), 1
        while mask < min(parts, 32):
            other = total[:, lane ^ mask]
            excl = torch.where((lane & mask) != 0, other + excl, excl)
            total = total + other
            mask *= 2
        if parts > 32:
            warp_totals, warp = total[:, ::32], lane // 32
            off = torch.zeros_like(excl)
            for w in range(parts // 32):
                off = torch.where(w < warp, off + warp_totals[:, w:w + 1], off)
            excl = off + excl
        local = excl[:, :, None] + local
    return local.view(lines, parts * chunk)[:, :n]


def accumulation_dtype(dtype: DType) -> DType:
    """float64 for float64, float32 for other floats, the dtype itself for integers."""
    if dtype == "float64":
        return DType("float64")
    return DType("float32") if dtype.is_float else dtype


class CumSumOp(TileOp):
    node = CumSum
    layout_level = "free"

    def name(self, s) -> str:
        return "T.cumsum"

    def dsl(self, s) -> str:
        dst = "" if s.dst is s.src else f", {s.dst.name}"
        return f"T.cumsum({s.src.name}{dst}, dim={s.dim}{', reverse=True' if s.reverse else ''})"

    def check(self, s, checker) -> None:
        for buf, arg in ((s.src, "src"), (s.dst, "dst")):
            if buf.scope not in ("fragment", "shared"):
                raise ScopeError(f"T.cumsum {arg} '{buf.name}' is in {buf.scope} memory; cumsum works on fragments "
                                 f"or shared tiles", code="E501", hint="T.copy the tile into a fragment or shared tile")
            if buf.dtype.is_bool:
                raise DSLTypeError(f"T.cumsum {arg} '{buf.name}' has dtype bool; it must be numeric", code="E302")
        if s.src.scope != s.dst.scope:
            raise ScopeError(f"T.cumsum from {s.src.scope} '{s.src.name}' into {s.dst.scope} '{s.dst.name}': both "
                             f"must be fragments or both shared tiles", code="E501",
                             hint="T.copy the result into the other scope afterwards")
        if tuple(s.src.shape) != tuple(s.dst.shape):
            raise ShapeError(f"T.cumsum: dst '{s.dst.name}' has shape {tuple(s.dst.shape)}, src '{s.src.name}' "
                             f"{tuple(s.src.shape)}; they must be equal", code="E402")
        if not -s.src.ndim <= s.dim < s.src.ndim:
            raise ShapeError(f"T.cumsum: dim {s.dim} is out of range for the {s.src.ndim}-d buffer '{s.src.name}'",
                             code="E404")

    def effects(self, s) -> Effects:
        return Effects.of(reads=(s.src,), writes=(s.dst,))

    def free_tiles(self, s) -> list:
        return [(b, None) for b in (s.src, s.dst) if b.scope == "fragment"]

    def scratch_bytes(self, s, layouts, threads: int) -> int:
        from tileagent.compiler.lower.cumsum import scratch_bytes

        return scratch_bytes(s, threads)

    def lower(self, s, ctx) -> list:
        from tileagent.compiler.lower.cumsum import lower_cumsum

        return lower_cumsum(ctx, s)

    def interpret(self, s, it, mask) -> None:
        acc_dt = accumulation_dtype(s.dst.dtype).torch
        dim = s.dim % s.src.ndim
        sp = split_of(s, it.block_threads)  # the lowering's order (lower.cumsum) for these threads
        x = it.mem[s.src].to(acc_dt).movedim(dim, -1)
        lines = x.reshape(sp.lines, sp.n)
        out = split_scan(lines.flip(1) if s.reverse else lines, sp.parts, sp.chunk)
        out = (out.flip(1) if s.reverse else out).reshape(x.shape).movedim(-1, dim)
        it.mem[s.dst].copy_(out.to(it.mem[s.dst].dtype))
