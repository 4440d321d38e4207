"""Buffers, regions and statements of the tile IR.

In: built by ``compiler.frontend`` from DSL source (and by passes). Out: an immutable tree rooted at ``PrimFunc``.
Guarantees: every statement carries the span of the DSL line it came from; buffers and variables compare by
identity; bodies are tuples. Tile ops (Copy, Gemm, Reduce, Fill, AtomicAddTile) work on whole tiles (Regions);
element statements (Store, Let, AtomicAdd) work on one element per iteration of the enclosing loops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tileagent.compiler.diagnostics import Span
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Expr, Var

@dataclass(frozen=True, eq=False, slots=True)
class Buffer:
    """A named array in one memory scope. ``var`` buffers are scalars (shape (1,)) stored by plain assignment.
    ``packed``: the sub-byte dtype (int4, uint4) the program declared, two elements a byte of ``dtype`` and the last
    dim halved (``compiler.language.packed``; the frontend resolves its indexing, passes need not keep it)."""

    name: str
    shape: tuple  # ints, or Vars / expressions for dynamic global shapes
    dtype: DType
    scope: str
    span: Span | None = None
    packed: str = ""

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def static_bytes(self) -> int:
        """The bytes of a buffer whose shape is static (a shared or local tile)."""
        n = self.dtype.bytes
        for e in self.shape:
            n *= e
        return n

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False, slots=True)
class Region:
    """The tile of ``buffer`` starting at ``starts`` with static ``extents`` (one per buffer dim)."""

    buffer: Buffer
    starts: tuple
    extents: tuple[int, ...]

    @staticmethod
    def whole(buffer: Buffer) -> "Region":
        return Region(buffer, (0,) * buffer.ndim, tuple(buffer.shape))

    def matrix_shape(self) -> tuple[int, ...]:
        """The extents with leading size-1 dims dropped down to two (a gemm operand); longer if more are left."""
        ext = list(self.extents)
        while len(ext) > 2 and ext[0] == 1:
            ext.pop(0)
        return tuple(ext)

    def tile_shape(self) -> tuple[int, ...]:
        """Extents with the size-1 dims dropped: what must agree between the two sides of a copy."""
        return tuple(e for e in self.extents if e != 1)


class Stmt:
    __slots__ = ()
    span: Span | None


@dataclass(frozen=True, eq=False, slots=True)
class Alloc(Stmt):
    """Declares ``buffer`` (shared, fragment, local or var) for the rest of the enclosing kernel. ``view_of``: the
    fragment or local buffer whose storage it shares, read row-major in its own shape (``T.reshape``,
    ``compiler.language.views``); such a buffer has no storage of its own. A global ``buffer`` is a tensor at the
    device address ``init`` (an int64 expression: ``T.make_tensor``, ``compiler.language.pointers``)."""

    buffer: Buffer
    init: Expr | None = None
    span: Span | None = None
    view_of: Buffer | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Kernel(Stmt):
    """``with T.Kernel(*grid, threads=...) as block_vars``: one launch; the body is one thread block's view."""

    grid: tuple
    threads: tuple[int, int, int]
    block_vars: tuple[Var, ...]
    body: tuple[Stmt, ...]
    span: Span | None = None
    # per-thread code: the threadIdx.x/y/z variables T.get_thread_binding handed out (all three), or () when the
    # body never asked for one. Such a kernel's statements run on every thread (see compiler.interp, compiler.lower)
    thread_vars: tuple[Var, ...] = ()
    cluster: tuple | None = None  # cluster_dims the program gave, as (x, y, z) (compiler.lower.cluster decides)
    merged: int = 1  # blocks of the program's grid along x each block runs (compiler.lower.coarsen)

    @property
    def num_threads(self) -> int:
        return self.threads[0] * self.threads[1] * self.threads[2]


@dataclass(frozen=True, eq=False, slots=True)
class For(Stmt):
    """A sequential loop: kind is 'serial', 'unroll' or 'pipelined' (annotations: num_stages, order, stage)."""

    var: Var
    start: object
    extent: object
    step: object
    kind: str
    body: tuple[Stmt, ...]
    annotations: dict = field(default_factory=dict)
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Parallel(Stmt):
    """``for i, j in T.Parallel(M, N)``: an elementwise nest whose iterations are independent."""

    vars: tuple[Var, ...]
    extents: tuple
    body: tuple[Stmt, ...]
    annotations: dict = field(default_factory=dict)
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class While(Stmt):
    """``while cond:`` on a runtime condition (TileLang's stream-K GEMM loops ``while start_iter[0] < last_iter``):
    the body runs again as long as ``cond`` holds when evaluated before each iteration. The condition must take one
    value in all threads of the block (it reads block indices, scalars, locals computed alike by every thread)."""

    cond: Expr
    body: tuple[Stmt, ...]
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Assert(Stmt):
    """``T.device_assert(cond, msg)``: a thread that runs it with ``cond`` false stops the kernel (CUDA: a trap; the
    CPU interpreter and the emulator: KernelFault with ``message`` at the line). The same node in the thread IR."""

    cond: object
    message: str = ""
    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        return [" " * indent + f"T.device_assert({expr_str(self.cond)}, {self.message!r})"]


@dataclass(frozen=True, eq=False, slots=True)
class LoopExit(Stmt):
    """``break`` (``kind`` "break") or ``continue`` ("continue") of the innermost T.serial or while loop around it,
    as in Python. The conditions of the ifs between that loop and the statement are block-uniform
    (``compiler.loop_exits`` proves it before lowering), so every thread of the block leaves the iteration together and
    a barrier later in the loop is reached by all of them or by none. The same node in the thread IR (C's
    ``break;`` / ``continue;``)."""

    kind: str
    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        return [" " * indent + self.kind]


@dataclass(frozen=True, eq=False, slots=True)
class GridSync(Stmt):
    """``T.sync_grid()`` while parsing: the frontend splits its T.Kernel there into kernels launched one after the
    other (every block finishes the first before any starts the second, which is what a grid barrier guarantees);
    none is left in a parsed function."""

    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class NamedBarrier(Stmt):
    """``T.sync_threads(barrier_id, arrive_count)``: PTX ``bar.sync barrier_id, arrive_count``, a barrier over the
    ``arrive_count`` threads (whole warps) that reach it, e.g. the threads under ``if tx < 256:`` in per-thread code,
    where TileAgent cannot place a ``__syncthreads()`` of its own. The shared-memory accesses of those threads before
    it are visible to them after it. Kept as it is in the thread IR; ``compiler.language.sync`` states the rules."""

    barrier_id: int
    arrive_count: int
    span: Span | None = None

    def ir_lines(self, indent: int, _lines=None) -> list[str]:
        return [" " * indent + f"T.sync_threads({self.barrier_id}, {self.arrive_count})"]


@dataclass(frozen=True, eq=False, slots=True)
class RngInit(Stmt):
    """``T.rng_init(seed, subsequence, offset)``: curand_init of the running thread's Philox4x32-10 generator, which
    ``T.rng_rand()`` (a ``Call`` named "rng_rand", uint32) and ``T.rng_rand_float()`` ("rng_rand_float", float32)
    draw from; ``compiler.language.random`` states the rules, ``compiler.random_philox`` the numbers."""

    seed: Expr
    subsequence: Expr
    offset: Expr
    span: Span | None = None

    def ir_lines(self, indent: int, _lines=None) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        args = ", ".join(expr_str(x) for x in (self.seed, self.subsequence, self.offset))
        return [" " * indent + f"T.rng_init({args})"]


@dataclass(frozen=True, eq=False, slots=True)
class MBarrierOp(Stmt):
    """TileLang's hand-written warp-specialization barriers (``T.barrier_arrive`` / ``T.barrier_wait`` on a
    ``T.alloc_barrier``): TileAgent runs ``T.ws`` code in program order, so these only check that order. ``op`` is
    "arrive" (``value``: the threads arriving, its T.ws group's) or "wait" (``value``: the phase parity waited for);
    ``barriers`` is the frontend's ``BarrierSet`` (names and arrive counts), ``index`` which of them. The CPU
    interpreter keeps each barrier's phase and faults on a wait that program order would leave blocked; the CUDA
    lowering drops them."""

    op: str
    barriers: object
    index: object
    value: object
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Store(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Let(Stmt):
    """``v = expr``: binds ``var`` for the statements that follow in the same body."""

    var: Var
    value: Expr
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class If(Stmt):
    cond: Expr
    then_body: tuple[Stmt, ...]
    else_body: tuple[Stmt, ...]
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Copy(Stmt):
    """T.copy: dst = cast(src); tile shapes agree once size-1 dims are dropped. OOB global reads give 0, writes drop.
    ``eviction_policy``: None, "evict_first" or "evict_last", a cache hint for reads of global memory (no semantic
    effect; ``compiler.language.tileops.eviction_hint``). ``barrier``: TileLang's ``T.tma_copy(src, dst,
    barrier=bars[i])`` (a ``warp_specialize.BarrierRef``): in warp specialization by hand the copy's bytes complete
    a phase of that barrier, whose wait the program places (``compiler.lower.warp_groups``)."""

    src: Region
    dst: Region
    span: Span | None = None
    eviction_policy: str | None = None
    barrier: object = None


@dataclass(frozen=True, eq=False, slots=True)
class Gemm(Stmt):
    """T.gemm: C (+)= op(A) @ op(B), accumulated in C's dtype. C is cleared first when clear_accum."""

    a: Region
    b: Region
    c: Region
    transpose_a: bool
    transpose_b: bool
    policy: int
    clear_accum: bool
    span: Span | None = None
    packed: str = ""  # int4 / uint4: A and B are tiles of such elements, two a byte (compiler.language.packed)


@dataclass(frozen=True, eq=False, slots=True)
class Reduce(Stmt):
    """T.reduce_<kind>: dst = reduce(src, dim), combined with dst's old value when not clear."""

    kind: str  # sum, max, min, abssum, absmax
    src: Buffer
    dst: Buffer
    dim: int
    clear: bool
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Fill(Stmt):
    dst: Region
    value: Expr
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class AtomicAdd(Stmt):
    """Scalar form: ``T.atomic_add(C[i, j], value)``; ``op`` "max" / "min" for ``T.atomic_max`` / ``T.atomic_min``
    (the element is replaced only where the value compares greater / less: a NaN value never replaces). ``prev``
    (``return_prev=True``): a Load naming a per-thread element (a hidden ``T.alloc_var``) that receives the element's
    value just before this thread's update, as CUDA's ``atomicAdd`` returns it."""

    buffer: Buffer
    indices: tuple
    value: Expr
    span: Span | None = None
    op: str = "add"
    prev: Expr | None = None


@dataclass(frozen=True, eq=False, slots=True)
class AtomicAddTile(Stmt):
    """Tile form: ``T.atomic_add(C[by * BM, bx * BN], C_local)``: dst += src elementwise, atomically (``op`` "max" /
    "min": dst = max / min(dst, src) elementwise, for ``T.atomic_max`` / ``T.atomic_min``)."""

    dst: Region
    src: Region
    span: Span | None = None
    op: str = "add"


@dataclass(frozen=True, eq=False, slots=True)
class Print(Stmt):
    value: object  # Expr or Buffer
    msg: str
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Evaluate(Stmt):
    """An expression run for its effect: ``T.call_extern(...)`` as a statement (a ``Call`` named ``extern:<fn>``,
    ``compiler.language.extern``); the same node in the thread IR. Only the CUDA target runs it."""

    value: Expr
    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        return [" " * indent + expr_str(self.value)]


@dataclass(frozen=True, eq=False, slots=True)
class ImportSource(Stmt):
    """``T.import_source(code)``: CUDA C++ the generated module holds once, before its kernels (the functions
    ``T.call_extern`` calls); kept in the body through lowering, where the CUDA code generator collects it."""

    code: str
    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        return [" " * indent + f"T.import_source(<{len(self.code)} characters>)"]


@dataclass(frozen=True, eq=False, slots=True)
class AnnotateLayout(Stmt):
    layouts: tuple  # ((Buffer, layout spec), ...)
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class UseSwizzle(Stmt):
    """Block rasterization in panels of ``panel_size`` along rows or columns, for L2 reuse."""

    panel_size: int
    order: str  # "row" or "column"
    enable: bool
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class PrimFunc:
    """One DSL function: parameters (global Buffers and scalar Vars), body, and where it came from."""

    name: str
    params: tuple
    body: tuple[Stmt, ...]
    dynamic_vars: tuple[Var, ...]
    span: Span | None = None
    workspaces: tuple[int, ...] = ()  # indices of params the runtime allocates per call (T.alloc_global); last
    # (view, base) param indices: a hidden param the runtime binds to base's storage with the view's shape
    # (T.Tensor(shape, dtype, X.data)); after the workspaces
    views: tuple[tuple[int, int], ...] = ()

    @property
    def hidden(self) -> tuple[int, ...]:
        """Indices of the params the caller does not pass: workspaces and views."""
        return self.workspaces + tuple(v for v, _ in self.views)

    def __repr__(self) -> str:
        from tileagent.compiler.ir.printer import print_func

        return print_func(self)
