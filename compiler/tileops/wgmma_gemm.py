"""TileLang's explicit asynchronous Hopper GEMM: ``T.wgmma_gemm(A, B, C, ...)`` issues C (+)= op(A) @ op(B) on the
warpgroup MMA without waiting for it, ``T.wait_wgmma(n)`` waits until at most ``n`` such groups are pending.

``T.wgmma_gemm`` takes T.gemm's arguments (TileLang's signature: ``A, B, C, transpose_A=False, transpose_B=False,
policy=Square, clear_accum=False, annotations=None``; ``annotations`` is ignored, as T.gemm's; a runtime
``clear_accum``, TileLang's ``clear_accum=(j == 0)`` in a loop, is ``if j == 0: T.clear(C)`` first). Each call is one
wgmma group (``wgmma.commit_group``); C is undefined (and A/B must not be overwritten) until the ``T.wait_wgmma(n)``
that leaves fewer than its own group pending: groups complete in issue order, so ``T.wait_wgmma(0)`` retires them all
and ``T.wait_wgmma(1)`` all but the newest.

Check: T.gemm's checks (``compiler.tileops.gemm``); ``n`` a compile-time int >= 0 (E301). Neither may sit inside
``T.Pipelined`` (E701: the software pipeline places its own wgmma waits; write ``T.gemm`` there and the compiler
overlaps it) nor under an ``if`` on a thread index (E509: TileLang's warp specialization by hand, ``if tx < 128:``
around a warpgroup's tile ops, is not supported; a tile op is the whole block's).
Effects: T.gemm's for ``T.wgmma_gemm`` (it reads A, B and writes C at issue); none for ``T.wait_wgmma``.
Layouts: T.gemm's (the instruction registry picks wgmma where it applies).
Lowering (sm_90a, where the registry chose a wgmma entry): T.gemm's wgmma sequence without its wait (fence with the
proxy fence and barrier, the wgmmas, ``wgmma.commit_group``); ``T.wait_wgmma(n)`` is ``wgmma.wait_group n`` with
the accumulators of every ``T.wgmma_gemm`` of the kernel that runs on wgmma pinned after it (the CUDA code's empty
``asm volatile`` operand fence: no instruction, so a still-pending accumulator is not touched, and no read of a
retired one is hoisted above the wait). Where the registry chose mma.sync (sm_80/86/89, ``tl.disable_wgmma``,
``TILEAGENT_ENABLE_WGMMA=0``, or operands wgmma does not take, which TileLang rejects) ``T.wgmma_gemm`` is a
synchronous T.gemm and the kernel's ``T.wait_wgmma`` lower to nothing.
Interpreter: the product is computed at the call (T.gemm's), ``T.wait_wgmma`` does nothing. The SIMT emulator runs
the lowered statements: an accumulator register read or written before the wait that retires its wgmma, and a
group still pending at the block's end, are EmulationErrors (``compiler.emulate_wgmma``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tileagent.compiler.diagnostics import DSLTypeError, Span, UnsupportedError
from tileagent.compiler.ir.stmt import For, Gemm, Stmt
from tileagent.compiler.tileops.base import Effects, TileOp
from tileagent.compiler.tileops.gemm import GemmOp


@dataclass(frozen=True, eq=False, slots=True)
class WgmmaGemm(Gemm):
    """T.wgmma_gemm: T.gemm issued asynchronously; C is defined once a T.wait_wgmma retires its group."""


@dataclass(frozen=True, eq=False, slots=True)
class WaitWgmma(Stmt):
    """T.wait_wgmma(pending): every T.wgmma_gemm group but the newest ``pending`` has completed."""

    pending: int
    span: Span | None = None


def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy=0, clear_accum=False,
               annotations=None, *, k_pack=1, wg_wait=None, mbar=None):
    """C (+)= op(A) @ op(B) issued without a wait (see the module); ``k_pack``, ``wg_wait`` and ``mbar`` (T.gemm's
    arguments, which TileLang's wgmma_gemm does not take) only at their defaults (E301). ``policy`` 0 is
    T.GemmWarpPolicy.Square."""
    hints = {"k_pack": "leave k_pack at 1",
             "wg_wait": "T.wgmma_gemm never waits: put T.wait_wgmma(n) before C is read",
             "mbar": "an mbarrier completion is Blackwell's T.tcgen05_gemm; Hopper's wgmma completes through "
                     "T.wait_wgmma(n)"}
    for name, value in (("k_pack", k_pack), ("wg_wait", wg_wait), ("mbar", mbar)):
        if not (value is None or (name == "k_pack" and type(value) is int and value == 1)):
            raise DSLTypeError(f"T.wgmma_gemm does not take {name}={value!r}", code="E301", hint=hints[name])
    from tileagent.compiler.language.tileops import gemm_statements  # the language package imports this module

    return gemm_statements(WgmmaGemm, A, B, C, transpose_A, transpose_B, policy, clear_accum)


def wait_wgmma(id):  # noqa: A002 - TileLang's parameter name
    """Wait until at most ``id`` T.wgmma_gemm groups are pending (``wgmma.wait_group id``)."""
    if isinstance(id, bool) or not isinstance(id, int) or id < 0:
        raise DSLTypeError(f"T.wait_wgmma: the number of groups left pending must be a compile-time int >= 0, got "
                           f"{id!r}", code="E301", hint="wgmma.wait_group takes an immediate: T.wait_wgmma(0)")
    return WaitWgmma(id)


BUILTINS = {"wgmma_gemm": wgmma_gemm, "wait_wgmma": wait_wgmma}


def _check_context(name: str, checker) -> None:
    """E701 inside T.Pipelined (see the module; under an ``if`` on a thread index, E509 as for every tile op:
    ``compiler.check``)."""
    for x in checker.enclosing:
        if isinstance(x, For) and x.kind == "pipelined":
            raise UnsupportedError(f"{name} inside T.Pipelined is not supported: the software pipeline places its "
                                   "own wgmma waits", hint="write T.gemm inside T.Pipelined (the compiler keeps its "
                                   "wgmma in flight across iterations itself), or use a T.serial loop")


class WgmmaGemmOp(GemmOp):
    node = WgmmaGemm

    def name(self, s) -> str:
        return "T.wgmma_gemm"

    def dsl(self, s) -> str:
        return "T.wgmma_gemm" + super().dsl(s)[len("T.gemm"):]

    def check(self, g, checker) -> None:
        _check_context("T.wgmma_gemm", checker)
        super().check(g, checker)

    def lower(self, s, ctx) -> list:
        """T.gemm's lowering; on wgmma without the final ``wgmma.wait_group`` (T.wait_wgmma places it)."""
        from tileagent.compiler.tir import WgmmaWait

        out = super().lower(s, ctx)
        if on_wgmma(s, ctx) and out and isinstance(out[-1], WgmmaWait):
            out = out[:-1]
        return out


def on_wgmma(g, ctx) -> bool:
    """Whether gemm ``g`` was lowered to wgmma (the instruction layout inference chose for it)."""
    from tileagent.compiler.instructions.wgmma import WgmmaM64NK16

    return isinstance(getattr(ctx.layouts.instructions.get(g), "instruction", None), WgmmaM64NK16)


class WaitWgmmaOp(TileOp):
    node = WaitWgmma

    def name(self, s) -> str:
        return "T.wait_wgmma"

    def dsl(self, s) -> str:
        return f"T.wait_wgmma({s.pending})"

    def check(self, s, checker) -> None:
        _check_context("T.wait_wgmma", checker)

    def effects(self, s) -> Effects:
        return Effects()

    def lower(self, s, ctx) -> list:
        """``wgmma.wait_group`` pinning every asynchronous wgmma accumulator the executing threads own (in a warp
        group's arm, those of the gemms inside the arm: pinning another group's accumulators would keep them alive
        in this group's code, registers it then spills); nothing where no T.wgmma_gemm of the kernel runs on
        wgmma."""
        from tileagent.compiler.lower.wgmma import accumulator_operand
        from tileagent.compiler.thread_ranges import regions
        from tileagent.compiler.tir import WgmmaWait

        lo, hi = ctx.thread_range
        if (lo, hi) != (0, ctx.kernel.num_threads) and ctx.thread_regions is None:
            ctx.thread_regions = regions(ctx.kernel)
        where = ctx.thread_regions if (lo, hi) != (0, ctx.kernel.num_threads) else {}
        seen, pins = set(), []
        for g in ctx.layouts.instructions:
            r = where.get(id(g), (lo, hi))
            if r is None or r[0] < lo or r[1] > hi:  # another arm's gemm
                continue
            if isinstance(g, WgmmaGemm) and on_wgmma(g, ctx) and g.c.buffer not in seen:
                seen.add(g.c.buffer)
                pins.append(accumulator_operand(ctx, g))
        return [WgmmaWait(s.pending, s.span, operands=tuple(pins))] if pins else []

    def interpret(self, s, it, mask) -> None:
        """Nothing: the interpreter computes each T.wgmma_gemm at its call."""
