"""A warp's mma.sync and ldmatrix on per-thread register arrays: TileLang's ``T.ptx_mma`` / ``T.ptx_ldmatrix`` as
its ``TensorCoreIntrinEmitter`` issues them, in per-thread code (``T.get_thread_binding``).

The statement ``WarpMma(c_buf, c, a_buf, a, b_buf, b, dtype)`` names, in every thread, the elements of its own
``T.alloc_local`` arrays that hold its part of one m16n8k16 (16-bit ``dtype``) or m16n8k32 (8-bit ``dtype``) atom:
the operands of the thread-IR ``compiler.tir.Mma``, whose docstring is the PTX ISA's lane layout (A 16 x K row
major, B K x 8 column major, C/D 16 x 8; for 8-bit dtypes the same over pairs of bytes). Every lane of each warp
computes D = A @ B + C together.

In: local arrays of the kernel (A and B of ``dtype``: float16 / bfloat16 with a float32 or float16 C, int8 with
an int32 C, float8 with a float32 C), constant element indices: 8 of A, 4 of B (16 and 8 for 8-bit dtypes), 4
distinct ones of C. Check (at the call, ``mma``): those scopes, dtypes and counts (E309/E701); in a kernel without
per-thread code it is an E505 (its locals would not be per thread). Effects: reads A, B, C; writes C.
Lowering: the thread-IR ``Mma`` on the arrays' registers (CUDA: ``compiler.targets.cuda_tensor``, the mma.sync
asm; emulator: ``compiler.emulate_tensor``). Interpreter: ``compiler.emulate_tensor.mma`` itself, run on the
interpreter's per-lane copies of the arrays, so both CPU executors share one statement of the instruction's lane
semantics. A block whose threads are not whole warps, or a call under a condition that leaves some lanes of a warp
out, is a fault there (and an E509 at compile time where the condition is on a thread index).

``WarpLdMatrix`` (``ldmatrix``): each lane's operand fragment from a shared tile into its local array. Its meaning
is its element stores (the interpreter runs them); the lowering emits one thread-IR ``LdMatrix`` (into a uint32
temporary, moved into the array by bit casts) where ldmatrix can read the tile (``WarpLdMatrixOp``), else the
stores. The emulator runs that ``LdMatrix`` with its own lane semantics, so a CPU run of the lowering checks the
addressing against the stores' meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tileagent.compiler.diagnostics import DSLTypeError, Span, UnsupportedError
from tileagent.compiler.ir.expr import Const
from tileagent.compiler.ir.stmt import Buffer, Stmt, Store
from tileagent.compiler.ir.visit import loads
from tileagent.compiler.tileops.base import Effects, TileOp

# element dtype of A and B -> (accumulator dtypes, elements of A, of B per lane)
DTYPES = {"float16": (("float32", "float16"), 8, 4), "bfloat16": (("float32",), 8, 4),
          "int8": (("int32",), 16, 8), "float8_e4m3fn": (("float32",), 16, 8), "float8_e5m2": (("float32",), 16, 8)}


@dataclass(frozen=True, eq=False, slots=True)
class WarpMma(Stmt):
    """One mma.sync atom of a warp on its threads' local arrays (see the module)."""

    c_buf: Buffer
    c: tuple[int, ...]
    a_buf: Buffer
    a: tuple[int, ...]
    b_buf: Buffer
    b: tuple[int, ...]
    dtype: str
    span: Span | None = None


def mma(c_buf, c, a_buf, a, b_buf, b) -> WarpMma:
    """The statement, checked: ``c``/``a``/``b`` are the flat element indices (ints) of each operand."""
    from tileagent.compiler.language.extras import _thread_bindings

    _thread_bindings("mma.sync on local arrays")
    for name, buf in (("A", a_buf), ("B", b_buf), ("C", c_buf)):
        if not isinstance(buf, Buffer) or buf.scope != "local":
            raise DSLTypeError(f"mma.sync on local arrays: {name} must be a T.alloc_local array, got "
                               f"{getattr(buf, 'scope', type(buf).__name__)}", code="E309")
    ab = str(a_buf.dtype)
    spec = DTYPES.get(ab)
    if spec is None or str(b_buf.dtype) != ab or str(c_buf.dtype) not in spec[0]:
        raise UnsupportedError(f"mma.sync on local arrays of {a_buf.dtype} x {b_buf.dtype} -> {c_buf.dtype} is not "
                               f"supported (float16/bfloat16 into float32, float16 into float16, int8 into int32, "
                               f"float8 into float32)")
    idx = []
    for name, buf, regs, n in (("C", c_buf, c, 4), ("A", a_buf, a, spec[1]), ("B", b_buf, b, spec[2])):
        regs = tuple(int(r.value) if isinstance(r, Const) else r for r in regs)
        size = 1
        for d in buf.shape:
            size *= int(d)
        if len(regs) != n or not all(type(r) is int and 0 <= r < size for r in regs):
            raise DSLTypeError(f"mma.sync on local arrays: {name} takes {n} constant element indices of "
                               f"'{buf.name}' (size {size}), got {regs}", code="E309")
        idx.append(regs)
    if len(set(idx[0])) != 4:
        raise DSLTypeError(f"mma.sync on local arrays: the accumulator elements {idx[0]} must be distinct",
                           code="E309")
    return WarpMma(c_buf, idx[0], a_buf, idx[1], b_buf, idx[2], ab)


@dataclass(frozen=True, eq=False, slots=True)
class WarpLdMatrix(Stmt):
    """A warp's ldmatrix.x{num}[.trans] of its threads' operand fragments from a shared tile into local arrays.

    ``stores`` are its meaning, element by element: ``dst[k] = src[...]`` at each lane's mma fragment positions (the
    interpreter runs them). Lane ``l`` (< 8 ``num``) gives ``(row, col)``, the tile position of the start of row
    ``l % 8`` of 8 x 8 matrix ``l // 8`` (eight contiguous 16-bit units along the last dim); matrix ``i`` lands in the
    lane's 32-bit register ``i``: ``dst[dst_first + i * r .. + r]`` with ``r`` the elements per 4 bytes."""

    stores: tuple
    dst: Buffer
    dst_first: int
    src: Buffer
    row: object
    col: object
    num: int
    trans: bool
    span: Span | None = None


def ldmatrix(stores, dst, dst_first, src, row, col, num, trans) -> WarpLdMatrix:
    """The statement for the element ``stores`` that ldmatrix.x``num`` (``.trans``) from ``src[row, col]`` fills."""
    return WarpLdMatrix(tuple(stores), dst, int(dst_first), src, row, col, int(num), bool(trans))


class WarpLdMatrixOp(TileOp):
    """Lowering: where ldmatrix can read the shared tile (rows of whole 16-byte chunks in its layout, each lane's
    column start a multiple of one chunk; 8-bit elements only without .trans) one ``LdMatrix`` into a uint32
    temporary whose halves (bytes) are moved into ``dst`` by bit casts; elsewhere the element stores."""

    node = WarpLdMatrix
    per_thread = True

    def name(self, s) -> str:
        return "ldmatrix into local arrays"

    def dsl(self, s) -> str:
        from tileagent.compiler.ir.printer import expr_str

        return (f"T.ptx_ldmatrix({s.trans}, {s.num}, {s.src.name}[{expr_str(s.row)}, {expr_str(s.col)}], "
                f"{s.dst.name}[{s.dst_first}])")

    def effects(self, s) -> Effects:
        return Effects.of(reads=[r.buffer for st in s.stores for r in loads(st.value)], writes=(s.dst,),
                          exprs=[i for st in s.stores for i in (*st.indices, st.value)])

    def interpret(self, s, it, mask) -> None:
        for st in s.stores:
            it.stmt(st, mask)

    def lower(self, s, ctx) -> list:
        from tileagent.compiler.ir.expr import Load, as_expr, make_cast, make_reinterpret
        from tileagent.compiler.ir.simplify import known_multiple
        from tileagent.compiler.lower.gemm import ldmatrix_layout_ok
        from tileagent.compiler.lower.parallel import lower_elements
        from tileagent.compiler.dtypes import DType
        from tileagent.compiler.tir import Declare, LdMatrix

        eb = s.src.dtype.bytes
        row, col = ctx.rewrite(as_expr(s.row), {}), ctx.rewrite(as_expr(s.col), {})
        if s.src.ndim != 2 or not ldmatrix_layout_ok(s.src, ctx.shared_layouts[s.src]) or \
                known_multiple(col) % (16 // eb) or (s.trans and eb != 2) or s.dst.dtype.bytes != eb:
            return lower_elements(ctx, list(s.stores), {}, True)
        idx = (row, col)
        tmp = Buffer(ctx.fresh(f"{s.dst.name}_ldm"), (s.num,), DType("uint32"), "local", s.span)
        out = [Declare(tmp, None, s.span), LdMatrix(tmp, as_expr(0), ctx.mem(s.src), as_expr(ctx.offset(s.src, idx)),
                                                    s.num, s.trans, s.span)]
        per, bits = 4 // eb, 8 * eb
        unsigned, dst = DType(f"uint{bits}"), ctx.local[s.dst]
        for i in range(s.num):
            for j in range(per):
                part = make_cast((Load(tmp, (as_expr(i),), tmp.dtype) >> (bits * j)) & ((1 << bits) - 1), unsigned)
                out.append(Store(dst, (as_expr(s.dst_first + i * per + j),), make_reinterpret(part, dst.dtype),
                                 s.span))
        return out


class _Lanes:
    """The block view ``compiler.emulate_tensor.mma`` reads, over the interpreter's per-lane arrays."""

    def __init__(self, it, bufs, span):
        self.nt = len(it.lanes)
        self.mem = {b: it.mem[b].view(self.nt, -1) for b in bufs}
        self.active, self.span = it.active, span

    def ev(self, r):
        return r

    def elements(self, buf, base, width, verb):
        return self.mem[buf], (torch.as_tensor(base) + torch.arange(width)).expand(self.nt, width)

    def full_warps(self, what: str) -> torch.Tensor:
        from tileagent.compiler.errors import KernelFault

        if self.nt % 32:
            raise KernelFault(f"{what}: mma.sync is warp-wide, but the block has {self.nt} threads (not whole warps)")
        if self.active is not None and not bool(torch.as_tensor(self.active).all()):
            raise KernelFault(f"{what} under a condition that leaves some threads out: every lane of the warp must "
                              f"execute it")
        return torch.arange(self.nt // 32)


class WarpMmaOp(TileOp):
    node = WarpMma
    per_thread = True  # it works on the threads' own locals (compiler.check lets it, unlike the block's tile ops)

    def name(self, s) -> str:
        return "mma.sync on local arrays"

    def dsl(self, s) -> str:
        return (f"T.ptx_mma({s.dtype}, {s.c_buf.name}{list(s.c)}, {s.a_buf.name}{list(s.a)}, "
                f"{s.b_buf.name}{list(s.b)})")

    def effects(self, s) -> Effects:
        return Effects.of(reads=(s.a_buf, s.b_buf, s.c_buf), writes=(s.c_buf,))

    def _tir(self, s, c_buf, a_buf, b_buf):
        from tileagent.compiler.tir import Mma

        return Mma(c_buf, s.c, a_buf, s.a, b_buf, s.b, s.span, s.dtype)

    def lower(self, s, ctx) -> list:
        return [self._tir(s, ctx.local[s.c_buf], ctx.local[s.a_buf], ctx.local[s.b_buf])]

    def interpret(self, s, it, mask) -> None:
        from tileagent.compiler.emulate_tensor import mma as run_mma  # its EmulationError is a KernelFault
        from tileagent.compiler.errors import KernelFault

        if it.lanes is None:
            raise KernelFault("mma.sync on local arrays outside per-thread code")
        run_mma(_Lanes(it, (s.a_buf, s.b_buf, s.c_buf), s.span), self._tir(s, s.c_buf, s.a_buf, s.b_buf))


__all__ = ["DTYPES", "WarpLdMatrix", "WarpLdMatrixOp", "WarpMma", "WarpMmaOp", "ldmatrix", "mma"]
