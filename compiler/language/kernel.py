"""Launch scope and allocation: ``T.Kernel``, ``T.alloc_shared/fragment/local/var``.

Each builtin validates its arguments and returns a spec; the frontend turns specs into IR with names and spans.
"""

from __future__ import annotations

from dataclasses import dataclass

from tileagent.compiler.diagnostics import DSLTypeError, ShapeError
from tileagent.compiler.dtypes import DType, UnsupportedDType, dtype as as_dtype
from tileagent.compiler.ir.expr import Expr
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.language import packed

MAX_THREADS = 1024
MAX_CLUSTER = 8  # blocks per cluster every sm_90 GPU launches (the portable cluster size)


@dataclass(frozen=True)
class KernelSpec:
    grid: tuple
    threads: tuple[int, int, int]
    prelude: str | None
    cluster: tuple[int, int, int] | None = None


def Kernel(*blocks, threads=None, prelude=None, is_cpu=False, cluster_dims=None):
    """``with T.Kernel(gx[, gy, gz], threads=128) as (bx, ...)``: one launch of a grid of thread blocks.

    Args:
        blocks: 1 to 3 grid extents (ints or runtime expressions such as ``T.ceildiv(N, 128)``).
        threads: threads per block: an int (x only) or a tuple of up to 3; at most 1024 in total. Default 128.
        cluster_dims: blocks per thread-block cluster (sm_90): an int (x only) or a tuple of up to 3, at most 8 in
            all; each grid extent a multiple of it. Where the blocks run, not what they compute (``compiler.lower.
            cluster``): targets without clusters launch the same grid without them.
    Raises:
        DSLTypeError: E305 for a bad grid, E304 for bad threads, E311 for bad cluster_dims.
    """
    if not 1 <= len(blocks) <= 3:
        raise DSLTypeError(f"T.Kernel takes 1 to 3 grid extents, got {len(blocks)}", code="E305",
                           hint="write T.Kernel(gx), T.Kernel(gx, gy) or T.Kernel(gx, gy, gz)")
    for b in blocks:
        if isinstance(b, Expr):
            continue
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise DSLTypeError(f"T.Kernel grid extent must be a positive integer or expression, got {b!r}",
                               code="E305")
    if threads is None:
        threads = 128
    dims = tuple(threads) if isinstance(threads, (tuple, list)) else (threads,)
    if not 1 <= len(dims) <= 3 or any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in dims):
        raise DSLTypeError(f"T.Kernel threads must be a positive int or a tuple of 1 to 3 positive ints, "
                           f"got {threads!r}", code="E304", hint="threads=128 is the usual choice")
    dims = dims + (1,) * (3 - len(dims))
    total = dims[0] * dims[1] * dims[2]
    if total > MAX_THREADS:
        raise DSLTypeError(f"T.Kernel asks for {total} threads per block; the limit is {MAX_THREADS}", code="E304",
                           hint="use fewer threads and give each thread more elements")
    cluster = _cluster(cluster_dims, len(blocks))
    for n, (extent, c) in enumerate(zip(blocks, cluster or ())):
        if static_int(extent) is not None and static_int(extent) % c:
            raise DSLTypeError(f"T.Kernel grid dim {n} has {static_int(extent)} blocks, not a multiple of "
                               f"cluster_dims {cluster[:len(blocks)]}", code="E311",
                               hint="make the grid a multiple of the cluster, or cluster fewer blocks")
    return KernelSpec(tuple(blocks), dims, prelude, cluster)


def ClusterKernel(*blocks, cluster_dims, threads=None, prelude=None):
    """TileLang's ``T.ClusterKernel(*blocks, cluster_dims, threads, prelude)``: ``T.Kernel`` with ``cluster_dims``."""
    return Kernel(*blocks, threads=threads, prelude=prelude, cluster_dims=cluster_dims)


def _cluster(cluster_dims, rank: int) -> tuple[int, int, int] | None:
    """``cluster_dims`` as (x, y, z), checked; None when not given."""
    if cluster_dims is None:
        return None
    dims = tuple(cluster_dims) if isinstance(cluster_dims, (tuple, list)) else (cluster_dims,)
    if not 1 <= len(dims) <= 3 or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in dims):
        raise DSLTypeError(f"T.Kernel cluster_dims must be a positive int or a tuple of 1 to 3 positive ints, "
                           f"got {cluster_dims!r}", code="E311", hint="cluster_dims=2 pairs neighbouring blocks")
    dims = dims + (1,) * (3 - len(dims))
    if any(c > 1 for c in dims[rank:]):
        raise DSLTypeError(f"T.Kernel cluster_dims={cluster_dims!r} clusters a grid dim the kernel does not have "
                           f"({rank} grid dims)", code="E311")
    if dims[0] * dims[1] * dims[2] > MAX_CLUSTER:
        raise DSLTypeError(f"T.Kernel cluster_dims={cluster_dims!r} asks for {dims[0] * dims[1] * dims[2]} blocks "
                           f"per cluster; the limit is {MAX_CLUSTER}", code="E311")
    return dims


@dataclass(frozen=True)
class AllocSpec:
    """What an alloc_* call asked for; the frontend names it after the assignment target."""

    shape: tuple[int, ...]
    dtype: DType
    scope: str
    init: object = None
    view_of: object = None  # T.reshape: the on-chip buffer whose storage this one shares (compiler.language.views)
    packed: str = ""  # int4 / uint4: shape and dtype are the bytes holding them (compiler.language.packed)


def _shape(shape, what: str) -> tuple[int, ...]:
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    out = []
    for d in dims:
        v = static_int(d)
        if v is None or isinstance(d, bool):
            raise ShapeError(f"{what} shape must be compile-time integers, got {shape!r}", code="E405",
                             hint="tile shapes are fixed when the kernel compiles; use the largest size and mask")
        if v < 1:
            raise ShapeError(f"{what} shape entries must be >= 1, got {shape!r}", code="E405")
        out.append(v)
    return tuple(out)


def _dtype(value, what: str) -> DType:
    try:
        return as_dtype(value)
    except UnsupportedDType as e:
        raise DSLTypeError(f"{what}: {e}", code="E302") from None


def _tile_spec(shape, dtype, scope: str, what: str) -> AllocSpec:
    shape = _shape(shape, what)
    as_bytes = packed.declare(shape, dtype, what)
    if as_bytes:
        return AllocSpec(as_bytes[0], as_bytes[1], scope, packed=as_bytes[2])
    return AllocSpec(shape, _dtype(dtype, what), scope)


def alloc_shared(shape, dtype, scope="shared.dyn"):
    """A tile in shared memory, visible to every thread of the block."""
    return _tile_spec(shape, dtype, "shared", "T.alloc_shared")


def alloc_fragment(shape, dtype, scope="local.fragment"):
    """A tile held in registers, distributed over the block's threads by layout inference."""
    return _tile_spec(shape, dtype, "fragment", "T.alloc_fragment")


def alloc_local(shape, dtype, scope="local"):
    """A per-thread array. It may not be indexed by T.Parallel variables (use a fragment for that)."""
    return AllocSpec(_shape(shape, "T.alloc_local"), _dtype(dtype, "T.alloc_local"), "local")


def alloc_var(dtype, init=None, scope="local.var"):
    """A per-thread scalar; ``x = expr`` stores into it and ``x`` reads it."""
    return AllocSpec((1,), _dtype(dtype, "T.alloc_var"), "var", init)
