"""Thread IR: the per-thread program one CUDA thread runs, produced by lowering the tile IR.

In: built by ``compiler.lower`` from a checked, layout-annotated PrimFunc. Out: consumed by
``compiler.targets.cuda`` (CUDA C++) and ``compiler.emulate`` (lock-step CPU emulation).

The thread IR reuses the tile IR's expression nodes (Const, Var, BinOp, Cmp, Unary, Call, Cast, Select, Load) and
statement nodes (Store, Let, If, For, AtomicAdd), with these rules:

- Every buffer is one-dimensional (``shape == (size,)``) and every Load/Store/AtomicAdd has exactly one index, in
  elements. ``scope`` is "global" (a kernel parameter), "shared" (a slice of the block's dynamic shared-memory
  arena, at ``DeviceKernel.shared_offsets[buffer]`` bytes) or "local" (a per-thread register array, declared by
  ``Declare``). Global sizes may be expressions of the dynamic shape variables.
- Special variables: ``THREAD`` is the thread's linear index in its block (threadIdx.x + threadIdx.y * blockDim.x
  + threadIdx.z * blockDim.x * blockDim.y); ``LANE`` and ``WARP`` are THREAD % 32 and THREAD // 32;
  ``BLOCK_IDX[d]`` is blockIdx.x/y/z and ``GRID_DIM[d]`` gridDim.x/y/z. The tile IR's block variables are bound by
  ``Let`` statements at the top of the kernel body (block rasterization is just a different Let).
- ``For`` loops have a kind "serial" or "unroll" and trip counts that are the same for every thread of a block.
- Warp collectives are ``Call`` nodes: ``Call("shfl_xor", (value, Const(mask), Const(width)))`` returns the value of
  lane ``LANE ^ mask`` within groups of ``width`` lanes; every lane of the warp executes it (no divergence around it).
- ``VecCopy(dst, dst_index, src, src_index, width)`` copies ``width`` consecutive elements, converting from src's
  dtype to dst's; lowering guarantees both ranges are in bounds and that ``index * dtype.bytes`` is a multiple of
  ``width * dtype.bytes`` whenever ``width * dtype.bytes`` is 4, 8 or 16 (so it may be one vector access). Its
  ``eviction_policy`` ("evict_first", "evict_last" or None) is a cache hint for a global source, set only there.
- ``Barrier()`` is __syncthreads(): every thread reaches it (never inside a thread-dependent branch), except in the
  consumer body of a ``WarpSpecialize``, where it synchronizes the consumer threads alone.
- ``Store``/``AtomicAdd`` to global memory and loads from it are in bounds: lowering predicates them with ``If``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tileagent.compiler.diagnostics import Span
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import BinOp, Call, Cast, Const, Expr, Select, Var, as_expr
from tileagent.compiler.ir.stmt import AtomicAdd, Buffer, Evaluate, If, Stmt, Store
from tileagent.compiler.ir.visit import loads, walk

class SpecialVar(Var):
    """A hardware index (threadIdx, blockIdx, ...). One object per name, also after pickling (compared by ``is``)."""

    __slots__ = ()

    def __reduce__(self):
        return _special, (self.name,)


THREAD = SpecialVar("tid", DType("int32"))
LANE = SpecialVar("lane", DType("int32"))
WARP = SpecialVar("warp", DType("int32"))
BLOCK_IDX = (SpecialVar("blockIdx.x"), SpecialVar("blockIdx.y"), SpecialVar("blockIdx.z"))
GRID_DIM = (SpecialVar("gridDim.x"), SpecialVar("gridDim.y"), SpecialVar("gridDim.z"))
SPECIAL_VARS = (THREAD, LANE, WARP) + BLOCK_IDX + GRID_DIM


def _special(name: str) -> SpecialVar:
    return next(v for v in SPECIAL_VARS if v.name == name)


def written_buffers(stmts) -> set:
    """The buffers that statements in ``stmts`` (at any depth) store to: Store, AtomicAdd, VecCopy, VecAtomicAdd and
    BulkStore destinations."""
    out = {s.buffer for s in walk(stmts) if isinstance(s, (Store, AtomicAdd))}
    out |= {ld.buffer for s in walk(stmts) if isinstance(s, Evaluate) for ld in loads(s.value)}  # T.call_extern
    return out | {s.dst for s in walk(stmts) if isinstance(s, (VecCopy, VecAtomicAdd, BulkStore))}


def indexes_registers_by(body, var) -> bool:
    """Whether a register array (a "local" buffer) is indexed by an expression of ``var`` somewhere in ``body``: a
    loop over ``var`` the lowering (and the PTX target) then unrolls, so that the array stays in registers (an index
    known only at run time puts it in local memory)."""
    from tileagent.compiler.ir.simplify import depends_on
    from tileagent.compiler.ir.visit import stmt_exprs

    for s in walk(body):
        idx = [(s.buffer, s.indices[0])] if isinstance(s, (Store, AtomicAdd)) else []
        if isinstance(s, (VecCopy, VecAtomicAdd)):
            idx += [(s.dst, s.dst_index), (s.src, s.src_index)]
        exprs = list(stmt_exprs(s)) + ([s.dst_index, s.src_index] if isinstance(s, (VecCopy, VecAtomicAdd)) else [])
        idx += [(ld.buffer, ld.indices[0]) for e in exprs for ld in loads(as_expr(e))]
        if any(b.scope == "local" and depends_on(as_expr(i), [var]) for b, i in idx):
            return True
    return False


def keeps_wide(e) -> bool:
    """Whether a 64-bit integer node of a global index evaluates its narrower operands in 64 bits too, as the index
    itself is (an int64 label plus ``row * V``: the 32-bit product overflowed before its cast): a sum, difference,
    product or select; a division keeps the targets' own rule (32 bits, then widened)."""
    return isinstance(e, Select) or (isinstance(e, BinOp) and e.op in ("+", "-", "*"))


def nonneg(e, known=frozenset(), thread_from: int = 0) -> bool:
    """Whether an integer expression is provably >= 0 (then C's ``/`` and ``%`` are floor division and modulo): a
    constant >= 0, a hardware index, a variable in ``known``, ``THREAD - c`` where the code runs only on threads from
    ``thread_from`` >= c on (a ``WarpGroupRange``'s arm), or +, *, /, //, %, min, max, an integer cast or a select of
    such."""
    e = as_expr(e)
    if isinstance(e, Const):
        return e.value >= 0
    if isinstance(e, Var):
        return e in known or any(e is v for v in SPECIAL_VARS)
    if isinstance(e, BinOp) and e.op == "-":
        return e.a is THREAD and isinstance(e.b, Const) and e.b.value <= thread_from
    if isinstance(e, BinOp) and e.op in ("+", "*", "//", "%", "/"):
        return nonneg(e.a, known, thread_from) and nonneg(e.b, known, thread_from)
    if isinstance(e, Call) and e.name in ("min", "max"):
        return all(nonneg(a, known, thread_from) for a in e.args)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return nonneg(e.value, known, thread_from)
    if isinstance(e, Select):
        return nonneg(e.a, known, thread_from) and nonneg(e.b, known, thread_from)
    return False


@dataclass(frozen=True, eq=False, slots=True)
class Declare(Stmt):
    """A per-thread register array ``buffer`` (scope "local"), uninitialized unless ``init`` is given."""

    buffer: Buffer
    init: Expr | None = None
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class GlobalAt(Stmt):
    """From here to the end of the kernel, the 1-d global ``buffer`` is the tensor at device address ``address`` (an
    int64 expression, the same for every thread of a block): ``T.make_tensor`` (``compiler.language.pointers``)."""

    buffer: Buffer
    address: Expr
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class VecCopy(Stmt):
    """dst[dst_index + v] = cast(src[src_index + v]) for v in range(width). ``eviction_policy``: None, or the
    "evict_first"/"evict_last" cache hint of a read of global memory (``src.scope == "global"`` only; no semantic
    effect: targets may ignore it)."""

    dst: Buffer
    dst_index: Expr
    src: Buffer
    src_index: Expr
    width: int
    span: Span | None = None
    eviction_policy: str | None = None


@dataclass(frozen=True, eq=False, slots=True)
class VecAtomicAdd(Stmt):
    """dst[dst_index + v] += cast(src[src_index + v]) for v in range(width), as one vector atomic: ``dst`` global
    float32 (width 2 or 4) or float16/bfloat16 (width 2), ``dst_index`` a multiple of ``width``. Each element's add is
    atomic; the elements of one call are not updated as one unit."""

    dst: Buffer
    dst_index: Expr
    src: Buffer
    src_index: Expr
    width: int
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class PackPairs(Stmt):
    """dst[i] = the pair (src[2 i], src[2 i + 1]) rounded to ``dtype`` (float16 or bfloat16) and packed into one
    32-bit register, the first in the low half, for i in range(count): how a float32 fragment becomes an mma A operand
    in registers. ``dst`` is a local "uint32" array, ``src`` a local float32 array."""

    dst: Buffer
    src: Buffer
    count: int
    dtype: str
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Mma(Stmt):
    """One warp-wide ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32``: D = A @ B + C.

    Every lane of the warp executes it (never under a lane-dependent branch). Per lane, the operands are registers
    named by index: ``a`` holds 8 elements of the 16x16 A tile, ``b`` 4 of the 16x8 B tile, ``c`` 4 of the 16x8
    fp32 accumulator (read, then written with D). With g = lane // 4 and t = lane % 4 (PTX ISA, mma m16n8k16):
    a[0], a[1]: A[g, 2t], A[g, 2t+1];    a[2], a[3]: A[g+8, 2t], A[g+8, 2t+1];
    a[4], a[5]: A[g, 2t+8], A[g, 2t+9];  a[6], a[7]: A[g+8, 2t+8], A[g+8, 2t+9];
    b[0], b[1]: B[2t, g], B[2t+1, g];    b[2], b[3]: B[2t+8, g], B[2t+9, g];
    c[0], c[1]: C[g, 2t], C[g, 2t+1];    c[2], c[3]: C[g+8, 2t], C[g+8, 2t+1].
    ``a_buf``/``b_buf`` are local arrays of the element dtype ``dtype`` (float16 or bfloat16; default: the dtype of
    whichever operand has 16-bit elements), or "uint32" arrays of packed pairs: then ``a`` names 4 registers
    (a[0..1], a[2..3], a[4..5], a[6..7], lower index in the low half) and ``b`` 2 (b[0..1], b[2..3]), which is what
    ``LdMatrix`` writes. ``c_buf`` is a local float32 array.
    With an 8-bit ``dtype`` (float8_e4m3fn, float8_e5m2: float32 ``c_buf``; int8: int32 ``c_buf``) it is
    ``mma.sync.aligned.m16n8k32``: the same layout over pairs of bytes (a "unit" above is two consecutive K elements,
    the lower in the low byte), so A is 16 x 32 and B 32 x 8; ``a`` names 4 packed uint32 registers (4 K elements
    each) or 16 registers of the 8-bit dtype, ``b`` 2 packed registers.
    """

    c_buf: Buffer
    c: tuple
    a_buf: Buffer
    a: tuple
    b_buf: Buffer
    b: tuple
    span: Span | None = None
    dtype: str | None = None

    @property
    def element_dtype(self) -> str | None:
        if self.dtype is not None:
            return self.dtype
        return next((str(b.dtype) for b in (self.a_buf, self.b_buf) if b.dtype.bytes == 2), None)


@dataclass(frozen=True, eq=False, slots=True)
class LdMatrix(Stmt):
    """One warp-wide ``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``: ``num`` 8x8 matrices of 16-bit
    elements from shared memory into registers.

    Every lane of the warp executes it. Lane ``l`` gives, in ``src_index`` (elements of ``src``), the start of row
    ``l % 8`` of matrix ``l // 8`` (lanes of matrices beyond ``num`` give none): eight contiguous elements, 16-byte
    aligned. Matrix ``i`` lands in the 32-bit register ``dst[dst_first + i]`` (``dst``: a local "uint32" array) as
    two elements, the lower one in the low half: with g = lane // 4 and t = lane % 4, its elements (g, 2t) and
    (g, 2t + 1), or with ``trans`` (2t, g) and (2t + 1, g).
    """

    dst: Buffer
    dst_first: Expr
    src: Buffer
    src_index: Expr
    num: int
    trans: bool
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class AsyncCopy(Stmt):
    """``cp.async``: dst[dst_index + v] = src[src_index + v] for v in range(width), global to shared, the same dtype,
    ``width * bytes`` of 4, 8 or 16 (both indices multiples of ``width``). Where ``valid`` is false nothing is read
    and zeros are written (``src_index`` need not be in bounds then). The write lands at some point before the
    ``AsyncWait`` that retires the group it was committed with; until then the destination must not be read."""

    dst: Buffer
    dst_index: Expr
    src: Buffer
    src_index: Expr
    width: int
    valid: Expr | None = None
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class BulkStore(Stmt):
    """``cp.async.bulk.global.shared::cta.bulk_group``: ``nbytes`` bytes from shared ``src`` at element ``src_index``
    to global ``dst`` at element ``dst_index`` (the same dtype; both byte addresses and ``nbytes`` multiples of 16),
    by the asynchronous proxy: the thread's generic-proxy writes of those shared bytes must be fenced
    (``AsyncProxyFence``) and other threads' ordered before it by a Barrier; the source may be overwritten only after
    the issuing thread's ``BulkStoreWait``. Executed by the threads its enclosing If selects, each with its own
    indices (sm_90)."""

    dst: Buffer
    dst_index: Expr
    src: Buffer
    src_index: Expr
    nbytes: int
    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        return [" " * indent + f"bulk.store {self.dst.name}[{expr_str(self.dst_index)}] <- "
                f"{self.src.name}[{expr_str(self.src_index)}], {self.nbytes} B"]


@dataclass(frozen=True, eq=False, slots=True)
class BulkStoreWait(Stmt):
    """``cp.async.bulk.commit_group`` then ``cp.async.bulk.wait_group.read 0``: this thread's BulkStores have read
    their shared bytes (the global writes complete later, visible to the kernels after this one)."""

    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        return [" " * indent + "bulk.wait_read 0"]


@dataclass(frozen=True, eq=False, slots=True)
class AsyncCommit(Stmt):
    """``cp.async.commit_group``: the thread's AsyncCopies since the last commit form one group. Block-uniform."""

    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class AsyncWait(Stmt):
    """``cp.async.wait_group pending``: the thread's groups except the newest ``pending`` have landed. Block-uniform;
    other threads' copies are visible only after a Barrier that follows."""

    pending: int
    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Barrier(Stmt):
    """__syncthreads(): all shared-memory writes before it are visible to all threads after it (inside the consumer
    body of a ``WarpSpecialize``: the named barrier over its consumer threads)."""

    span: Span | None = None


@dataclass(frozen=True, eq=False, slots=True)
class DeviceKernel:
    """One ``__global__`` function: what one T.Kernel scope became.

    ``params`` lists, in order, what the launcher passes: global 1-d Buffers (pointers), then scalar Vars (the
    PrimFunc's scalar parameters, then its dynamic shape variables). ``grid`` holds 1 to 3 expressions of those
    scalar Vars (missing dims are 1); ``block`` is blockDim; ``shared_bytes`` the size of the dynamic
    shared-memory arena, ``shared_offsets`` the byte offset of each shared Buffer in it (16-byte aligned);
    ``shared_align`` the alignment (bytes) the arena's start must have in the shared window: above 16 (a tile whose
    hardware swizzle XORs absolute address bits), the CUDA kernel rounds its arena start up to it and
    ``shared_bytes`` includes the ``shared_align - 16`` bytes that rounding may skip. ``tensor_maps``: the TMA
    tensor maps (``TensorMap``) the kernel takes by value after ``params`` (``__grid_constant__``), which the
    launcher encodes from the tensors it passes (``compiler.runtime.tma``). ``cluster``: blocks per thread-block
    cluster, (x, y, z) (``compiler.lower.cluster``; (1, 1, 1): none). ``dependent_launch``: the kernel is launched
    with programmatic stream serialization and its code begins with ``griddepcontrol.wait`` (target feature
    ``pdl``): its blocks may be scheduled while the stream's previous kernel drains (the launch gap between two
    dependent kernels overlaps that kernel's tail), and none of its instructions run before that kernel's memory
    operations are complete and visible, so the order of the stream is kept. Its next instruction,
    ``griddepcontrol.launch_dependents``, lets the next such kernel launch once every block of this one has started.
    """

    name: str
    params: tuple
    grid: tuple
    block: tuple[int, int, int]
    shared_bytes: int
    shared_offsets: dict
    body: tuple[Stmt, ...]
    span: Span | None = None
    instructions: tuple = ()  # ("T.gemm at line 31", "mma.sync m16n8k16, FullRow, 4 warps (4 x 1)"), in program order
    shared_align: int = 16
    tensor_maps: tuple = ()  # TensorMaps the launcher encodes and passes after ``params`` (TMA, sm_90a)
    cluster: tuple = (1, 1, 1)
    dependent_launch: bool = False

    @property
    def num_threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True, eq=False)
class DeviceModule:
    """All kernels of one PrimFunc, launched in order. ``flat_globals`` maps each PrimFunc tensor parameter to
    the 1-d global Buffer the kernels use for it; ``scalars`` pairs by position with the PrimFunc's scalar
    parameters followed by its dynamic shape variables."""

    name: str
    kernels: tuple[DeviceKernel, ...]
    flat_globals: dict = field(default_factory=dict)
    scalars: tuple = ()  # the kernels' scalar Vars, in order: the PrimFunc's scalar params, then its dynamic vars


@dataclass(frozen=True, eq=False, slots=True)
class WgmmaFence(Stmt):
    """``fence.proxy.async.shared::cta``, ``__syncthreads()``, then ``wgmma.fence.sync.aligned``: every thread's
    completed generic-proxy shared-memory writes (st.shared, waited cp.async) become visible to the tensor cores'
    asynchronous-proxy reads of every warpgroup (the writer-side fence plus a barrier, as the PTX memory model asks),
    and register writes to accumulators are ordered before the Wgmmas that follow. Executed by every thread of the
    block (it contains a barrier); required before the first Wgmma after a wait.

    With ``sync=False`` it is ``wgmma.fence.sync.aligned`` alone (warpgroup-wide): the software pipeline already ran
    an ``AsyncProxyFence`` and a ``Barrier`` after every shared-memory write the Wgmmas read (``compiler.lower.
    pipeline``), so the proxy fence and the barrier would be repeated work.

    ``operands``: (local buffer, register indices) of the registers the Wgmmas that follow read or write (their
    accumulators; RS: their packed A registers). The CUDA code pins them at the fence (an empty ``asm volatile``
    with each as a read-write operand, CUTLASS's ``warpgroup_fence_operand``), so that the C++ compiler cannot sink
    their last writes (an accumulator's zero fill, a mask, a pack of A) past ``wgmma.fence``; ptxas would otherwise
    serialize the wgmmas (C7517/C7519). No instruction of its own; the emulator has nothing to do for it."""

    span: Span | None = None
    sync: bool = True
    operands: tuple = ()

    def ir_lines(self, indent: int, _lines) -> list[str]:
        if not self.sync:
            return [" " * indent + "wgmma.fence"]
        return [" " * indent + "fence.proxy.async.shared::cta; T.sync_threads(); wgmma.fence"]


@dataclass(frozen=True, eq=False, slots=True)
class AsyncProxyFence(Stmt):
    """``fence.proxy.async.shared::cta``: this thread's completed generic-proxy writes to shared memory (st.shared,
    cp.async copies its ``cp.async.wait_group`` has waited for) become visible to later asynchronous-proxy reads
    (wgmma's descriptors) once a barrier orders them; the software pipeline issues it before its per-iteration
    barrier when a consumer runs on wgmma. Executed by every thread (no barrier of its own)."""

    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        return [" " * indent + "fence.proxy.async.shared::cta"]


@dataclass(frozen=True, eq=False, slots=True)
class Wgmma(Stmt):
    """One warpgroup-wide ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{f16,bf16}.{f16,bf16}``, both operands in
    shared memory (SS): D (64 x n, float32) = A (64 x 16) @ B (16 x n) (+ D when ``accumulate``).

    Every thread of each warpgroup executes it. ``a_buf``/``b_buf`` are 16-bit shared buffers; ``a_index`` /
    ``b_index`` (elements, uniform per warpgroup) are where each operand's matrix descriptor starts; ``*_lbo``,
    ``*_sbo`` (bytes) and ``*_swizzle`` (width in bytes: 128, 64 or 32) are the descriptor's other fields
    (``compiler.instructions.wgmma.encode_descriptor``, base offset 0: the swizzle atoms (8 x width bytes) lie on
    their natural boundary of the shared window). The hardware reads, with W the swizzle width and e the element
    size: A (K-major) element (m, k) at ``start + (m // 8) * sbo + (m % 8) * W + e k``; B K-major
    (``b_major == "k"``) element (k, n) like A's (n, k); B N-major (``"mn"``) element (k, n) at
    ``start + (k // 8) * sbo + (k % 8) * W + (n // (W / e)) * lbo + e (n % (W / e))``, and A M-major
    (``a_major == "mn"``, imm-trans-a 1: A stored K x M, transpose_A) element (m, k) like that B's (k, m); each byte
    address with bits [4, 4 + log2(W / 16)) XORed with bits [7, 7 + log2(W / 16)).
    ``c`` names the thread's n / 2 accumulator registers of ``c_buf`` (local float32) in PTX order: with warp w of
    the group, g = lane // 4, t = lane % 4: d[4j + 2h + p] holds D[16 w + g + 8 h, 8 j + 2 t + p]. Results are
    undefined until a WgmmaWait retires the WgmmaCommit group the Wgmma belongs to."""

    c_buf: Buffer
    c: tuple
    a_buf: Buffer
    a_index: Expr
    a_lbo: int
    a_sbo: int
    a_swizzle: int
    b_buf: Buffer
    b_index: Expr
    b_lbo: int
    b_sbo: int
    b_swizzle: int
    b_major: str
    n: int
    accumulate: bool
    dtype: str
    span: Span | None = None
    a_major: str = "k"

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        regs = ", ".join(str(expr_str(r)) for r in self.c)
        return [" " * indent + f"wgmma.mma_async m64n{self.n}k16 {self.c_buf.name}[{regs}] "
                f"{'+' if self.accumulate else ''}= A {self.a_buf.name}@{expr_str(self.a_index)} "
                f"({self.a_major.upper()}-major, "
                f"{self.a_swizzle}B swizzle, SBO {self.a_sbo}) x B {self.b_buf.name}@{expr_str(self.b_index)} "
                f"({self.b_major.upper()}-major, {self.b_swizzle}B swizzle, LBO {self.b_lbo}, SBO {self.b_sbo})"]


@dataclass(frozen=True, eq=False, slots=True)
class WgmmaRS(Stmt):
    """One warpgroup-wide ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{f16,bf16}.{f16,bf16}`` with A from
    registers (RS): D (64 x n, float32) = A (64 x 16) @ B (16 x n) (+ D when ``accumulate``).

    Every thread of each warpgroup executes it. ``a`` names the thread's A registers of ``a_buf`` (local): four
    indices into a "uint32" array of packed pairs (the lower element in the low half), or eight into a float16 /
    bfloat16 array (packed in pairs at issue). With warp w of the group, g = lane // 4, t = lane % 4 (PTX "WGMMA
    .m64nNk16 register fragment layout for matrix A"): element i (register i // 2, half i % 2) holds
    A[16 w + g + 8 ((i // 2) % 2), 2 t + i % 2 + 8 (i // 4)]. B, ``c`` and the asynchrony are as in ``Wgmma``; the
    A registers must not be written until a WgmmaWait retires the group (PTX: undefined), and a ``WgmmaFence`` must
    come between their last write and the instruction."""

    c_buf: Buffer
    c: tuple
    a_buf: Buffer
    a: tuple
    b_buf: Buffer
    b_index: Expr
    b_lbo: int
    b_sbo: int
    b_swizzle: int
    b_major: str
    n: int
    accumulate: bool
    dtype: str
    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        regs = ", ".join(str(expr_str(r)) for r in self.c)
        a = ", ".join(str(expr_str(r)) for r in self.a)
        return [" " * indent + f"wgmma.mma_async m64n{self.n}k16 {self.c_buf.name}[{regs}] "
                f"{'+' if self.accumulate else ''}= A {self.a_buf.name}[{a}] (registers) x B "
                f"{self.b_buf.name}@{expr_str(self.b_index)} ({self.b_major.upper()}-major, {self.b_swizzle}B "
                f"swizzle, LBO {self.b_lbo}, SBO {self.b_sbo})"]


@dataclass(frozen=True, eq=False, slots=True)
class WgmmaCommit(Stmt):
    """``wgmma.commit_group.sync.aligned``: the Wgmmas issued since the last commit form one group."""

    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        return [" " * indent + "wgmma.commit_group"]


@dataclass(frozen=True, eq=False, slots=True)
class WgmmaWait(Stmt):
    """``wgmma.wait_group.sync.aligned pending``: all but the newest ``pending`` groups are complete; their
    accumulators may be read and their shared operands overwritten. ``operands`` (as for ``WgmmaFence``: the
    accumulators it retires) are pinned after the wait, so that no read of them is hoisted above it.
    ``anchor`` ((local buffer, register indices) pairs) with ``anchor_at`` ((shared buffer, index): a word no one
    reads): those registers are stored there just before the wait. ptxas places a wgmma wait as early as its
    dependences allow (sm_90a SASS: right after the first shuffle of flash attention's softmax, whose exponentials
    then wait for P @ V), but keeps it after a shared store; a store of values the work before the wait produces last
    keeps that work before it. No effect on what is computed."""

    pending: int
    span: Span | None = None
    operands: tuple = ()
    anchor: tuple = ()
    anchor_at: tuple | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        return [" " * indent + f"wgmma.wait_group {self.pending}"]


@dataclass(frozen=True, eq=False)
class TensorMap:
    """A TMA tensor map (CUDA's 128-byte ``CUtensorMap``) over global parameter ``buffer`` (the flat 1-d Buffer):
    ``dims`` elements per dim and ``strides`` elements between consecutive indices of dims 1 .. rank - 1, both
    innermost first and expressions of the kernel's scalar parameters (a contiguous tensor's row-major shape);
    ``box`` the elements one load moves per dim (innermost first); ``swizzle`` the shared-memory swizzle width in
    bytes (128, 64, 32; 0: none). The launcher encodes it (``cuTensorMapEncodeTiled``) for the tensor it passes as
    ``buffer`` and hands it to the kernel by value, after ``DeviceKernel.params``."""

    name: str
    buffer: Buffer
    dims: tuple
    strides: tuple
    box: tuple
    swizzle: int

    @property
    def rank(self) -> int:
        return len(self.dims)


@dataclass(frozen=True, eq=False, slots=True)
class MbarrierInit(Stmt):
    """``mbarrier.init.shared::cta.b64`` of ``count`` barriers (8 bytes each) of the shared "uint64" buffer
    ``barriers`` from index ``first`` on, each expecting ``arrivals`` arrivals per phase, then ``fence.mbarrier_init.release.cluster``.
    Executed by one thread (under ``If(THREAD == 0)``), followed by a Barrier before any thread uses them. A fresh
    barrier is in phase 0."""

    barriers: Buffer
    count: int
    arrivals: int = 1
    span: Span | None = None
    first: int = 0  # the barriers initialized are [first, first + count)

    def ir_lines(self, indent: int, _lines) -> list[str]:
        return [" " * indent + f"mbarrier.init {self.barriers.name}[{self.first}:{self.first + self.count}], "
                f"{self.arrivals} arrival(s); fence.mbarrier_init"]


@dataclass(frozen=True, eq=False, slots=True)
class MbarrierArriveExpectTx(Stmt):
    """``mbarrier.arrive.expect_tx.shared::cta.b64 _, [barriers[index]], bytes``: one arrival on the barrier, which
    now also waits for ``bytes`` more bytes of asynchronous (TMA) transfers before its phase completes. Executed by
    the issuing thread alone. ``arrive`` False: ``mbarrier.expect_tx`` (the bytes without the arrival: a program's
    ``T.tma_copy`` whose barrier counts the threads' own arrivals)."""

    barriers: Buffer
    index: Expr
    bytes: int
    span: Span | None = None
    arrive: bool = True

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        return [" " * indent + f"mbarrier.arrive.expect_tx {self.barriers.name}[{expr_str(self.index)}], "
                f"{self.bytes} B"]


@dataclass(frozen=True, eq=False, slots=True)
class TmaLoad(Stmt):
    """``cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes``: the box of ``tmap`` at
    ``coords`` (elements, innermost first; out-of-bounds elements read as zero) into shared ``dst`` from element
    ``dst_index`` on (laid out as ``TensorMap.swizzle`` says: ``compiler.instructions.tma.tma_offsets``); its bytes
    complete on ``barriers[barrier_index]``. Executed by one thread; the data may be read only after an
    ``MbarrierWait`` has seen that barrier's phase complete. ``dst`` at a byte address that is a multiple of 128 and of
    8 x the swizzle width."""

    dst: Buffer
    dst_index: Expr
    tmap: TensorMap
    coords: tuple
    barriers: Buffer
    barrier_index: Expr
    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        coords = ", ".join(str(expr_str(c)) for c in self.coords)
        return [" " * indent + f"tma.load {self.dst.name}@{expr_str(self.dst_index)} <- {self.tmap.name}"
                f"[{coords}] (box {'x'.join(map(str, self.tmap.box))}, "
                f"{self.tmap.swizzle or 'no'}{'B' if self.tmap.swizzle else ''} swizzle) on "
                f"{self.barriers.name}[{expr_str(self.barrier_index)}]"]


@dataclass(frozen=True, eq=False, slots=True)
class MbarrierWait(Stmt):
    """``mbarrier.try_wait.parity.shared::cta.b64`` in a loop: returns once the phase of ``barriers[index]`` with
    parity ``parity`` (0 or 1) has completed (a fresh barrier's phase 0 completes after its first arrivals and
    bytes). Executed by every thread that reads what the barrier's transfers wrote."""

    barriers: Buffer
    index: Expr
    parity: Expr
    span: Span | None = None
    for_free_stage: bool = False
    label: object = None  # the program's barrier it is (a T.alloc_barrier set and the index expression), for messages

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        what = " (free stage)" if self.for_free_stage else ""
        return [" " * indent + f"mbarrier.wait {self.barriers.name}[{expr_str(self.index)}], parity "
                f"{expr_str(self.parity)}{what}"]


@dataclass(frozen=True, eq=False, slots=True)
class MbarrierArrive(Stmt):
    """One arrival on ``barriers[index]`` per warp that executes it: ``__syncwarp()`` (the lanes' earlier
    shared-memory accesses are ordered before lane 0's), then lane 0's ``mbarrier.arrive.shared::cta.b64`` (release
    semantics: those accesses happen before whatever follows a wait that sees the phase complete). Every lane of
    each executing warp runs it. A warp-specialized pipeline's consumers release a stage with it
    (``compiler.lower.warp_specialize``). ``per_thread``: each executing thread arrives once instead (a barrier
    ``T.alloc_barrier`` made, whose arrive count counts threads); with ``cp_async`` too, the arrival comes when the
    thread's earlier cp.async copies have landed (``cp.async.mbarrier.arrive.noinc``)."""

    barriers: Buffer
    index: Expr
    span: Span | None = None
    per_thread: bool = False
    cp_async: bool = False

    def ir_lines(self, indent: int, _lines) -> list[str]:
        from tileagent.compiler.ir.printer import expr_str

        how = "after its cp.async copies, one per thread" if self.cp_async else \
            "one per thread" if self.per_thread else "one per warp"
        return [" " * indent + f"mbarrier.arrive {self.barriers.name}[{expr_str(self.index)}] ({how})"]


@dataclass(frozen=True, eq=False, slots=True)
class SetMaxNReg(Stmt):
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 registers``: the executing warpgroup's per-thread register budget
    becomes ``registers`` (a multiple of 8 in 24 .. 256; ``increase`` says which way). Every thread of the warpgroup
    executes it; it changes no value, so the emulator ignores it."""

    registers: int
    increase: bool
    span: Span | None = None

    def ir_lines(self, indent: int, _lines) -> list[str]:
        return [" " * indent + f"setmaxnreg.{'inc' if self.increase else 'dec'} {self.registers}"]


@dataclass(frozen=True, eq=False, slots=True)
class WarpSpecialize(If):
    """A warp-specialized block: ``if (THREAD >= consumers) producer else consumer`` (``cond``, ``then_body``,
    ``else_body`` as for ``If``, so every walk of the IR sees both bodies). Threads ``0 .. consumers - 1`` run the
    consumer body, in which every barrier (``Barrier``, a ``WgmmaFence`` with ``sync``) is the named barrier 1 over
    those threads alone (``bar.sync 1, consumers``); the threads from ``consumers`` on (one warpgroup) run the
    producer body, which only issues asynchronous copies and waits on mbarriers. The two sides synchronize only
    through mbarriers. Each side may start with a ``SetMaxNReg``. The kernel declares ``blocks_per_sm`` as its
    minimum blocks per SM (``__launch_bounds__``), which caps the registers a thread has at entry (and gets
    ``setmaxnreg`` honoured)."""

    consumers: int = 0
    blocks_per_sm: int = 0


@dataclass(frozen=True, eq=False, slots=True)
class WarpGroupRange(Stmt):
    """Statements that threads ``lo .. hi - 1`` alone run (whole warp groups: the arm of a warp-specialized ``if``
    written by hand, ``compiler.lower.warp_groups``): their tile ops were lowered for a block of ``hi - lo`` threads
    whose ``THREAD`` is the thread's index from ``lo`` (``WARP`` likewise), and every ``Barrier`` in ``body`` (not in a
    nested range) is the named barrier ``barrier_id`` over those threads (``bar.sync barrier_id, hi - lo``)."""

    lo: int
    hi: int
    barrier_id: int
    body: tuple
    span: Span | None = None

    def ir_lines(self, indent: int, lines) -> list[str]:
        return [" " * indent + f"warp group range [{self.lo}, {self.hi}) (barrier {self.barrier_id}):"] + \
            [line for x in self.body for line in lines(x, indent + 2)]
