"""Registry entry ``mma.sync m16n8k16``: T.gemm on the warp-wide tensor-core MMA of sm_80 and later.

Applies to: targets of sm_80 and newer (every arch this compiler emits for); float16/bfloat16 A and B of one dtype, a float32 accumulator fragment (or float16 A, B and accumulator: ``.f16.f16.f16.f16``, each mma rounding its sums to float16), B in shared memory, A in shared
memory or in registers (stored K x M with transpose_A: the A-operand layout with its dims swapped), and a tile
that the gemm's GemmWarpPolicy splits over the block's whole
warps into 16 x 8 atoms (``compiler.layout.mma.warp_partition``). Layouts: the accumulator and register-A layouts
of ``compiler.layout.mma``. Lowering: ``compiler.lower.gemm`` (ldmatrix where the shared layout allows, else element
loads). Emits ``Mma``, ``LdMatrix`` and ``PackPairs`` (CUDA: ``compiler.targets.cuda_tensor``; emulator:
``compiler.emulate_tensor``).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import LayoutError
from tileagent.compiler.instructions.base import Instruction, sm_version
from tileagent.compiler.intrinsics import TF32_DTYPES
from tileagent.compiler.layout.mma import accumulator_layout, operand_a_layout, warp_partition

DTYPES = ("float16", "bfloat16")


class MmaSyncM16N8K16(Instruction):
    name = "mma.sync m16n8k16"
    op = "gemm"

    def partition(self, g, threads: int) -> tuple[int, int]:
        """(warps along M, warps along N); LayoutError L005 when the tile does not split into whole atoms."""
        if threads % 32:
            raise LayoutError(f"T.gemm on mma.sync needs whole warps, but the block has {threads} threads",
                              code="L005", hint="use a multiple of 32 threads")
        m, n = g.c.matrix_shape()
        return warp_partition(m, n, threads // 32, g.policy)

    def reason(self, g, threads: int, target) -> str | None:
        a, b, c = g.a.buffer, g.b.buffer, g.c.buffer
        if sm_version(target) is not None and sm_version(target) < 80:
            return f"needs sm_80 or newer; the target is {getattr(target, 'name', target)}"
        if a.dtype not in DTYPES or b.dtype != a.dtype or (c.dtype != "float32" and not (
                c.dtype == "float16" and a.dtype == "float16")):
            return (f"takes float16/bfloat16 A and B and a float32 accumulator; got {a.dtype}, {b.dtype} -> {c.dtype} "
                    f"(float16 A and B may also accumulate in float16)")
        if b.scope != "shared" or a.scope not in ("shared", "fragment"):
            return "reads B from shared memory and A from shared memory or registers"
        return self.partition_problem(g, threads)

    def cost(self, g, threads: int, target) -> float:
        return 1.0

    def layouts(self, g, threads: int, partition) -> dict:
        """{"C": accumulator Fragment, "A": A-operand Fragment when A lives in registers}."""
        m, n = g.c.matrix_shape()
        wm, wn = partition
        out = {"C": accumulator_layout(m, n, wm, wn, threads)}
        if g.a.buffer.scope == "fragment":  # stored K x M with transpose_A: the same thread map, dims swapped
            k = g.a.matrix_shape()[0 if g.transpose_a else 1]
            a = operand_a_layout(m, k, wm, wn, threads)
            out["A"] = a.permute((1, 0)) if g.transpose_a else a
        return out

    def lower(self, g, ctx) -> list:
        from tileagent.compiler.lower.gemm import lower_gemm

        return lower_gemm(ctx, g)

    def cuda_emitters(self) -> dict:
        from tileagent.compiler.targets.cuda_tensor import emit_ldmatrix, emit_mma, emit_pack_pairs
        from tileagent.compiler.tir import LdMatrix, Mma, PackPairs

        return {Mma: emit_mma, LdMatrix: emit_ldmatrix, PackPairs: emit_pack_pairs}

    def emulators(self) -> dict:
        from tileagent.compiler.emulate_tensor import HANDLERS
        from tileagent.compiler.tir import LdMatrix, Mma, PackPairs

        return {k: HANDLERS[k] for k in (Mma, LdMatrix, PackPairs)}


EIGHT_BIT = {"float8_e4m3fn": "float32", "float8_e5m2": "float32", "int8": "int32"}  # A/B dtype -> accumulator


class MmaSyncM16N8K32(MmaSyncM16N8K16):
    """Registry entry ``mma.sync m16n8k32``: T.gemm on 8-bit operands (``mma.sync.aligned.m16n8k32.row.col``:
    float8 e4m3/e5m2 into float32 on sm_89 and later, int8 into int32 on sm_80 and later).

    Applies to: A and B of one of those dtypes with its accumulator dtype; both K-major (A as M x K, not transposed;
    B as N x K with transpose_B), as TileLang's fp8 and int8 GEMMs store them, since ldmatrix (which moves 16-bit
    units) can only hand 8-bit elements to the mma in that orientation; B in shared memory, A in shared memory or in
    registers; K a multiple of 32; the same warp split into 16 x 8 atoms as m16n8k16. Per lane the 8-bit fragments
    are the m16n8k16 ones over pairs of bytes (PTX ISA "mma.m16n8k32" fragments): an A register holds 4 consecutive
    K elements of one row, a B register 4 of one column, the accumulator layout is m16n8k16's. Layouts: the
    accumulator layout of ``compiler.layout.mma``; an A operand in registers gets ``operand_a_layout(...,
    elements=4)`` (4 consecutive K elements per register, 16 per atom row). Lowering: ``compiler.lower.gemm`` with
    ldmatrix for every shared operand (an operand ldmatrix cannot read is an E602 there); emits ``Mma`` (dtype the
    8-bit one), ``LdMatrix``.
    """

    name = "mma.sync m16n8k32"

    def reason(self, g, threads: int, target) -> str | None:
        a, b, c = g.a.buffer, g.b.buffer, g.c.buffer
        if g.packed:
            return f"takes 8-bit elements; {g.packed} tiles (two elements a byte) go to mma.sync m16n8k64"
        acc = EIGHT_BIT.get(str(a.dtype))
        if acc is None or b.dtype != a.dtype or c.dtype != acc:
            return (f"takes 8-bit A and B of one dtype (float8_e4m3fn/float8_e5m2 -> float32, int8 -> int32); got "
                    f"{a.dtype}, {b.dtype} -> {c.dtype}")
        need = 89 if a.dtype.is_float else 80
        if sm_version(target) is not None and sm_version(target) < need:
            return f"needs sm_{need} or newer for {a.dtype}; the target is {getattr(target, 'name', target)}"
        if b.scope != "shared" or a.scope not in ("shared", "fragment"):
            return "reads B from shared memory and A from shared memory or registers"
        if g.transpose_a or not g.transpose_b:
            return ("needs K-major 8-bit operands: A as (M, K) without transpose_A and B as (N, K) with "
                    "transpose_B=True")
        if g.a.matrix_shape()[1] % 32:
            return f"needs K a multiple of 32, got {g.a.matrix_shape()[1]}"
        return self.partition_problem(g, threads)

    elements = 4  # K elements of A per 32-bit register

    def layouts(self, g, threads: int, partition) -> dict:
        m, n = g.c.matrix_shape()
        wm, wn = partition
        out = {"C": accumulator_layout(m, n, wm, wn, threads)}
        if g.a.buffer.scope == "fragment":
            out["A"] = operand_a_layout(m, g.a.matrix_shape()[1], wm, wn, threads, elements=self.elements)
        return out


class MmaSyncM16N8K64(MmaSyncM16N8K32):
    """Registry entry ``mma.sync m16n8k64``: T.gemm on int4 / uint4 tiles (``compiler.language.packed``: two elements
    a byte) into int32 (``mma.sync.aligned.m16n8k64.row.col.s32.{s4,u4}.{s4,u4}.s32``, sm_80 and later).

    Byte for byte it is m16n8k32 on int8: an A register holds 8 consecutive K elements (4 bytes) of one row, a B
    register 8 of one column, so the operands' bytes take m16n8k32's ldmatrix loads and its lowering, with K counted
    in bytes (32 bytes, 64 elements, a step). Applies to: a gemm marked ``packed`` int4 or uint4 (A (M, K) and B
    (N, K) with transpose_B, checked by the frontend) with an int32 accumulator, both in shared memory; K a multiple
    of 64 elements. Emits ``Mma`` of dtype int4 / uint4 and ``LdMatrix``; on sm_90, which has no 4-bit tensor cores,
    the CUDA target runs each as two int8 (uint8) m16n8k32 mmas (``compiler.targets.cuda_tensor``).
    """

    name = "mma.sync m16n8k64"

    def reason(self, g, threads: int, target) -> str | None:
        if g.packed not in ("int4", "uint4") or g.c.buffer.dtype != "int32":
            return f"takes int4 or uint4 A and B (two elements a byte) into int32; got {g.packed or g.a.buffer.dtype}"
        if sm_version(target) is not None and sm_version(target) < 80:
            return f"needs sm_80 or newer; the target is {getattr(target, 'name', target)}"
        if g.a.buffer.scope != "shared" or g.b.buffer.scope != "shared":
            return "reads A and B from shared memory"
        if g.a.matrix_shape()[1] % 32:
            return f"needs K a multiple of 64, got {2 * g.a.matrix_shape()[1]}"
        return self.partition_problem(g, threads)


class MmaSyncM16N8K8(MmaSyncM16N8K32):
    """Registry entry ``mma.sync m16n8k8 .tf32``: T.gemm on float32 / tfloat32 operands on TensorFloat-32 tensor
    cores (``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``, sm_80 and later), a float32 accumulator.

    Per lane the fragments are m16n8k16's over 32-bit elements (PTX ISA "mma.m16n8k8" for .tf32): one element a
    register, A 16 x 8 in 4 registers, B 8 x 8 in 2, the accumulator layout of m16n8k16. The tensor core reads a
    register's upper 19 bits: a float32 value is truncated to TF32's 10 mantissa bits, as TileLang's float32 gemm
    does (a ``T.tfloat32`` buffer holds values already rounded to nearest). ldmatrix (rows of 16 bytes: 4 elements)
    serves K-major shared operands (A as M x K, B as N x K with transpose_B); the others, and every transposed one
    (``.trans`` moves 16-bit units), are loaded element by element. Applies to: A and B float32 or tfloat32, C
    float32; B in shared memory, A in shared memory or in registers (not stored K x M there); K a multiple of 8; the
    warp split of m16n8k16. An A operand in registers gets ``operand_a_layout(..., elements=1)``.
    """

    name = "mma.sync m16n8k8"
    elements = 1

    def reason(self, g, threads: int, target) -> str | None:
        a, b, c = g.a.buffer, g.b.buffer, g.c.buffer
        if a.dtype not in TF32_DTYPES or b.dtype not in TF32_DTYPES or c.dtype != "float32":
            return (f"takes float32/tfloat32 A and B (TF32) and a float32 accumulator; got {a.dtype}, {b.dtype} -> "
                    f"{c.dtype}")
        if sm_version(target) is not None and sm_version(target) < 80:
            return f"needs sm_80 or newer; the target is {getattr(target, 'name', target)}"
        if b.scope != "shared" or a.scope not in ("shared", "fragment"):
            return "reads B from shared memory and A from shared memory or registers"
        if a.scope == "fragment" and g.transpose_a:
            return "takes A in registers only as M x K (not transposed)"
        if g.a.matrix_shape()[1 if not g.transpose_a else 0] % 8:
            return f"needs K a multiple of 8, got {g.a.matrix_shape()[1 if not g.transpose_a else 0]}"
        return self.partition_problem(g, threads)
