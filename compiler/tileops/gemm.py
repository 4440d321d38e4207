"""``T.gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum)``: C (+)= op(A) @ op(B).

Check: A and B in shared memory or fragments, C a fragment; 2-d tiles with matching M, N, K; A and B of one dtype
among GEMM_INPUT_DTYPES, C among GEMM_ACCUM_DTYPES. Effects: reads A, B (and C unless clear_accum), writes C.
Layouts (strict): the instruction registry (``compiler.instructions.select_gemm``) picks the instruction; its warp
partition and fragment layouts of the accumulator (and of an A operand in registers) are imposed (mma.sync:
``compiler.layout.mma``); shared operands get a swizzled layout unless annotated. Lowering: the chosen entry's
``lower`` (mma.sync: ``compiler.lower.gemm``); the choice shows in ``kernel.get_ir("thread")`` and the log. Interpreter: float32 products, C rounded once.
"""

from __future__ import annotations

import logging

import torch

from tileagent.compiler.diagnostics import DSLTypeError, LayoutError, ScopeError, ShapeError
from tileagent.compiler.ir.printer import region_str
from tileagent.compiler.ir.stmt import Gemm, Region
from tileagent.compiler.layout.layout import swizzled
from tileagent.compiler.instructions import ACCUMULATORS, gemm_unavailable, select_gemm
from tileagent.compiler.intrinsics import TF32_DTYPES, truncate_tf32
from tileagent.compiler.language.packed import unpack
from tileagent.compiler.tileops.base import Effects, TileOp

GEMM_INPUT_DTYPES = ("float16", "bfloat16", "float32", "tfloat32", "int8", "float8_e4m3fn", "float8_e5m2")
GEMM_ACCUM_DTYPES = ("float32", "float16", "int32")
POLICY_NAMES = ("Square", "FullRow", "FullCol")

log = logging.getLogger("tileagent.compiler")


class GemmOp(TileOp):
    node = Gemm
    layout_level = "strict"

    def name(self, s) -> str:
        return "T.gemm"

    def dsl(self, s) -> str:
        opts = "".join([", transpose_A=True" if s.transpose_a else "", ", transpose_B=True" if s.transpose_b else "",
                        f", policy=T.GemmWarpPolicy.{POLICY_NAMES[s.policy]}" if s.policy else "",
                        ", clear_accum=True" if s.clear_accum else ""])
        return f"T.gemm({region_str(s.a)}, {region_str(s.b)}, {region_str(s.c)}{opts})"

    def check(self, g, checker) -> None:
        for r, arg, scopes in ((g.a, "A", ("shared", "fragment")), (g.b, "B", ("shared", "fragment")),
                               (g.c, "C", ("fragment",))):
            if r.buffer.scope not in scopes:
                raise ScopeError(f"T.gemm operand {arg} '{r.buffer.name}' is in {r.buffer.scope} memory; it must be "
                                 f"in {' or '.join(scopes)}", code="E501",
                                 hint="T.copy the tile into T.alloc_shared (A, B) or use a T.alloc_fragment "
                                      "accumulator (C)")
        m, n, ka, kb = gemm_shape(g)
        c = _matrix(g.c, "C")
        if ka != kb:
            raise ShapeError(f"T.gemm K shape check failed: K_A = {ka}, K_B = {kb}", code="E403",
                             hint="check transpose_A/transpose_B and the tile shapes")
        if c[0] != m:
            raise ShapeError(f"T.gemm M shape check failed: M_A = {m}, M_C = {c[0]}", code="E403")
        if c[1] != n:
            raise ShapeError(f"T.gemm N shape check failed: N_B = {n}, N_C = {c[1]}", code="E403")
        if g.a.buffer.dtype != g.b.buffer.dtype or (g.a.buffer.dtype not in GEMM_INPUT_DTYPES and not g.packed):
            a, b = g.a.buffer.dtype, g.b.buffer.dtype
            narrow, wide = ("B", a) if a.bits >= b.bits else ("A", b)
            raise DSLTypeError(f"T.gemm inputs must share a dtype among {', '.join(GEMM_INPUT_DTYPES)}; got "
                               f"A {a}, B {b}", code="E302",
                               hint=None if a not in GEMM_INPUT_DTYPES or b not in GEMM_INPUT_DTYPES else
                               f"convert {narrow}'s tile to {wide} in the loop before the gemm (a quantized weight: "
                               f"T.copy its tile into a fragment, scale it into a {wide} fragment, T.copy that into "
                               f"a {wide} shared tile, gemm on it)")
        if g.c.buffer.dtype not in GEMM_ACCUM_DTYPES:
            takes = ACCUMULATORS.get(str(g.a.buffer.dtype))
            raise DSLTypeError(f"T.gemm accumulator dtype {g.c.buffer.dtype} is not supported; use one of "
                               f"{', '.join(GEMM_ACCUM_DTYPES)}", code="E302",
                               hint=f"{g.a.buffer.dtype} A and B accumulate in {' or '.join(takes)} on tensor cores"
                               if takes else None)

    def effects(self, s) -> Effects:
        return Effects.of(reads=(s.a, s.b) if s.clear_accum else (s.a, s.b, s.c), writes=(s.c,))

    def infer_strict(self, op, inference) -> None:
        """The instruction chosen from the registry fixes the warp partition, the accumulator's layout and that of an
        A operand in registers (a copy into it from another layout becomes a conversion through shared memory)."""
        choice = select_gemm(op, inference.threads, getattr(inference, "target", None),
                             tuple(getattr(inference, "excluded", {}).get(op, ())))
        inference.r.gemm_partition[op] = choice.partition
        inference.r.instructions[op] = choice
        for operand in (op.a.buffer, op.b.buffer):  # the entry's layout, else conflict-free reads (annotations win)
            if operand.scope == "shared" and operand not in inference.r.shared:
                inference.r.shared[operand] = choice.instruction.shared_layout(op, operand) or \
                    swizzled(tuple(operand.shape), operand.dtype.bytes)
        try:
            layouts = choice.instruction.layouts(op, inference.threads, choice.partition)
        except LayoutError as e:
            raise e.with_span(op.span)
        if op.c.buffer.scope == "fragment":
            inference.assign(op.c.buffer, layouts["C"], op, "T.gemm accumulator")
        if "A" in layouts:
            inference.assign(op.a.buffer, layouts["A"], op, "T.gemm A operand")

    def lower(self, s, ctx) -> list:
        """The instruction layout inference chose lowers the gemm (E602 listing every entry's reason when none
        can)."""
        target = getattr(ctx, "target", None)
        error = gemm_unavailable(s, ctx.threads, target)
        if error is not None:
            raise error
        choice = ctx.layouts.instructions.get(s) or select_gemm(s, ctx.threads, target)
        dropped = ctx.layouts.notes.get(s, [])
        how = choice.describe(s) + "".join(f"; {e.name} not used: {why}" for e, why in
                                           dropped + passed_over(s, ctx.threads, target, choice, dropped))
        ctx.note_instruction(s, how)
        log.info("%s at line %s: %s", self.name(s), s.span.line if s.span else "?", how)
        return choice.instruction.lower(s, ctx)

    def interpret(self, s, it, mask) -> None:
        wide = torch.float32 if s.c.buffer.dtype.is_float else torch.int64  # integer gemms are exact (int32 wraps)
        a = it.read_region(s.a, s.span).reshape(s.a.matrix_shape())
        b = it.read_region(s.b, s.span).reshape(s.b.matrix_shape())
        if s.packed:  # int4 / uint4: two K elements a byte
            a, b = unpack(a, s.packed), unpack(b, s.packed)
        a, b = a.to(wide), b.to(wide)
        a = a.T if s.transpose_a else a
        b = b.T if s.transpose_b else b
        if s.a.buffer.dtype in TF32_DTYPES and s.b.buffer.dtype in TF32_DTYPES:
            a, b = truncate_tf32(a), truncate_tf32(b)  # as the GPU's TF32 tensor cores read them (10 mantissa bits)
        prod = a @ b
        if s.clear_accum:
            out = prod
        else:
            out = it.read_region(s.c, s.span).reshape(prod.shape).to(wide) + prod
        if wide is torch.int64:
            out = (out + 2**31) % 2**32 - 2**31
        it.write_region(s.c, out.to(s.c.buffer.dtype.torch).reshape(s.c.extents), s.span)


def passed_over(g: Gemm, threads: int, target, choice, dropped=()) -> list:
    """(entry, reason) of each registry entry cheaper than the chosen one that does not apply to ``g``, except those
    that serve no gemm of the target (``target_reason``: wgmma on sm_80, or switched off by ``tl.disable_wgmma`` /
    ``TILEAGENT_ENABLE_WGMMA=0``) and those in ``dropped`` (layout inference's (entry, why) pairs, reported by the
    caller): why a faster instruction was not used, for ``get_ir("thread")`` and the log."""
    from tileagent.compiler.instructions import GEMM

    cost = choice.instruction.cost(g, threads, target)
    skip = [e for e, _ in dropped]
    out = []
    for entry in GEMM:
        if entry is choice.instruction or entry in skip or entry.cost(g, threads, target) >= cost or \
                entry.target_reason(target) is not None:
            continue
        why = entry.reason(g, threads, target)
        if why is not None:
            out.append((entry, why))
    return out


def gemm_shape(g: Gemm) -> tuple[int, int, int, int]:
    """(M, N, K of A, K of B) of a gemm, after its transposes (ShapeError for an operand that is not 2-d)."""
    a, b = _matrix(g.a, "A"), _matrix(g.b, "B")
    m, ka = (a[1], a[0]) if g.transpose_a else a
    kb, n = (b[1], b[0]) if g.transpose_b else b
    return m, n, ka, kb


def _matrix(r: Region, arg: str) -> tuple[int, int]:
    ext = r.matrix_shape()
    if len(ext) != 2:
        raise ShapeError(f"T.gemm operand {arg} must be a 2-d tile, got extents {tuple(r.extents)}", code="E403")
    return ext[0], ext[1]
