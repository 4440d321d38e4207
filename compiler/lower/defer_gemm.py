"""A pipelined loop's last gemm issued one iteration late, after the next iteration's first gemm, so that the
statements between the two run while it is on the tensor cores (flash attention's softmax beside P @ V: FA3's
intra-warpgroup overlap).

In: a warp-specialized TMA ``SoftwarePipeline`` (``compiler.lower.pipeline``) and the layout results (which gemms
run on wgmma). Out: ``plan`` gives a ``DeferredGemm`` or None; ``iteration`` and ``after_loop`` the consumers'
thread IR of one iteration and what follows the loop.

When: ``TILEAGENT_WGMMA_OVERLAP`` is not 0; three stages or more, or two with split stages (below; one barrier pair a
stage is released half an iteration later, so with two the producer's next load would start only then: flash attention
128/128/2 fell from 606 to 428 TFLOP/s on the H200); a trip count the same for every block and tile, one that depends on
no block index or enclosing loop variable, also through Lets (causal flash attention's falls with the query block: it
ran at 494-498 TFLOP/s deferred against 520-521 not, its blocks averaging half the iterations, while each block pays a
peeled iteration and a last gemm that overlap nothing; with split stages and the anchor level: 518-527 against 521-523,
H200, ``TILEAGENT_DEFER_VARYING=1``); consumers that write no shared memory (the pipeline has no barrier per iteration)
and hold exactly two wgmma gemms, G1 and G2, where G2 is the last consumer and accumulates (not ``clear_accum``) into
registers of its own: neither its accumulator nor its register A operand (RS) is touched by G1 or a consumer before G1,
and G1's accumulator is not G2's. The consumers between G1 and G2 split at the first one that touches G2's registers:
``middle`` (the softmax: none touches them) and ``after`` (the rescale of the accumulator, the new P); ``middle`` must
not be empty. Where ptxas leaves it (sm_90a SASS): the loop has one ``WARPGROUP.DEPBAR.LE gsb0, 0x1`` after both gemms,
and without the wait's anchor (``anchored``) ptxas moves the ``wait_group 0`` up to the row maximum's first shuffle, so
that the exponentials run after P @ V is done (what overlapped then was the maximum, the two gemms back to back and the
next iteration's issue: x1.05 in one process).

How (iteration k, count c; its stage c % s, iteration k - 1's (c - 1) % s): the first iteration is peeled (ptxas
drains every wgmma group at the join of a branch that issues some: H200 SASS showed ``WARPGROUP.DEPBAR.LE gsb0,
0x0`` before the softmax), and runs as without the deferral but for G2. Every later one: the consumers before G1;
G1 (fence, wgmmas, commit; no wait); G2 of iteration k - 1 on stage (c - 1) % s from the registers iteration k - 1
left, then ``wait_group 1`` (G1 retired, G2 left running); ``middle``; ``wait_group 0`` (G2 retired; its
accumulator and A registers pinned there, so that no write of ``after`` moves above it); the release of stage
(c - 1) % s; ``after``. After the loop: G2 of the last iteration on its stage and ``wait_group 0`` (inside
another loop, then the release of that stage for the producer's next execution).
Split stages (``late_producers``; ``TILEAGENT_SPLIT_STAGES=0`` turns them off): the tiles only G2 reads (V) fill on
``full`` and free on ``empty`` barriers of their own (FA3's separate K and V pipelines). The producer fills a stage's
early tiles, then its late ones; a consumer iteration frees its early tiles right after ``wait_group 1`` (G1 is all
that reads them), waits for iteration k - 1's late tiles just before G2 and frees them after ``wait_group 0``. The
producer's K for iteration k + 2 then waits only for iteration k's Q @ K^T, not for its P @ V. H200, flash attention
B8 H32 S4096 D128: 128/128/2/256 deferred on split stages 647 TFLOP/s (median of 6 processes, 0.97 of SDPA), the
best schedule before 614 (128/128/3/256 without them).
Guarantees: G2's accumulator after the loop, and every register ``after`` and ``middle`` see, hold what they hold
without the deferral (wgmma groups complete in order, so ``wait_group 1`` after G2's commit retires G1, which was
committed before it); a stage is released only after the last wgmma that reads it was retired.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tileagent.compiler.ir.expr import make_binop, make_cmp
from tileagent.compiler.ir.stmt import Gemm, If, Let
from tileagent.compiler.lower.wgmma import accumulator_operand
from tileagent.compiler.tir import WgmmaWait

SPLIT_ENV = "TILEAGENT_SPLIT_STAGES"
EARLY_RESCALE_ENV = "TILEAGENT_EARLY_RESCALE"
ANCHOR_ENV = "TILEAGENT_WAIT_ANCHOR"
ANCHOR_WORDS = 4
_ANCHOR_DTYPES = ("float32", "uint32")
VARYING_ENV = "TILEAGENT_DEFER_VARYING"  # =1: defer also where the trip count varies by block (for A/B runs)


@dataclass(frozen=True, eq=False)
class DeferredGemm:
    """The consumers of a pipeline whose last gemm ``second`` runs one iteration late (module docstring)."""

    before: tuple  # the consumers before ``first``
    first: Gemm
    middle: tuple
    after: tuple
    second: Gemm
    rescale: tuple = ()  # statements of the loop's ``after`` run just before ``second`` instead (``_rescale``)


def plan(p, layouts, body=(), varying=()) -> DeferredGemm | None:
    """The deferral of ``p``'s last gemm (``p`` a SoftwarePipeline in the kernel ``body`` whose block indices and
    enclosing loop variables are ``varying``), or None where the module's rules rule it out."""
    from tileagent.compiler.instructions.wgmma import WgmmaM64NK16, overlap_enabled
    from tileagent.compiler.lower.barriers import shared_effects
    from tileagent.compiler.lower.smem import buffers_used

    uniform = os.environ.get(VARYING_ENV, "").strip() == "1" or _uniform(p.loop.extent, body, varying)
    if not overlap_enabled() or p.stages < 2 or not uniform or \
            any(shared_effects(x)[0] for x in p.consumers):
        return None
    cons = list(p.consumers)
    gemms = [i for i, x in enumerate(cons) if isinstance(x, Gemm) and
             isinstance(getattr(layouts.instructions.get(x), "instruction", None), WgmmaM64NK16)]
    if len(gemms) != 2 or gemms[1] != len(cons) - 1:
        return None
    i1, i2 = gemms
    g1, g2 = cons[i1], cons[i2]
    own = {g2.c.buffer} | ({g2.a.buffer} if g2.a.buffer.scope == "fragment" else set())
    if g2.clear_accum or g1.c.buffer in own or any(buffers_used(x) & own for x in cons[:i1 + 1]):
        return None
    split = next((j for j in range(i1 + 1, i2) if buffers_used(cons[j]) & own), i2)
    if split == i1 + 1:
        return None
    rescale, after = _rescale(tuple(cons[:i1 + 1]), tuple(cons[split:i2]), g2)
    d = DeferredGemm(tuple(cons[:i1]), g1, tuple(cons[i1 + 1:split]), after, g2, rescale)
    return d if p.stages >= 3 or late_producers(p, d) is not None else None


def for_ws(ws, kernel, layouts) -> tuple:
    """(DeferredGemm or None, its ``late_producers`` or None, ``anchored``) for the pipeline of warp-specialization
    plan ``ws`` in ``kernel``: what its lowering builds (``compiler.lower.pipeline``) and the mbarrier slots it takes
    (``warp_specialize.ws_barriers``) are decided here once, by the same rules."""
    from tileagent.compiler.ir.stmt import For

    varying = list(kernel.block_vars) + [x.var for x in ws.path if isinstance(x, For)]
    d = plan(ws.pipeline, layouts, kernel.body, varying)
    if d is None:
        return None, None, False
    return d, late_producers(ws.pipeline, d), anchored(d)


def _rescale(head: tuple, after: tuple, g2: Gemm) -> tuple:
    """(rescale, rest): the statements of ``after`` that write ``g2``'s accumulator alone (flash attention's
    ``acc *= alpha``), to run just before ``g2`` is issued in the next iteration (FA3's order: after the wait for
    ``g2`` only the new A operand is written, so ptxas has no reason to wait early), and the others in their order;
    ((), after) where that could change what anything computes: the rescale reads shared or global memory, another
    statement of ``after`` touches the accumulator or writes what the rescale reads, or ``head`` (the statements up
    to the first gemm, which run in between) writes it; a Let in ``after``; ``EARLY_RESCALE_ENV`` set to 0."""
    from tileagent.compiler.lower.barriers import shared_effects
    from tileagent.compiler.lower.smem import buffers_used

    if os.environ.get(EARLY_RESCALE_ENV, "").strip() == "0" or any(isinstance(x, Let) for x in after):
        return (), after
    acc, regs = g2.c.buffer, ("fragment", "local")
    rescale = tuple(x for x in after if shared_effects(x, regs)[0] == {acc} and g2.a.buffer not in buffers_used(x))
    rest = tuple(x for x in after if x not in rescale)
    reads = set().union(*(shared_effects(x, regs)[1] for x in rescale)) - {acc}
    if not rescale or any(shared_effects(x, ("shared", "global"))[1] for x in rescale) or \
            any(acc in buffers_used(x) or shared_effects(x, regs)[0] & reads for x in rest) or \
            any(shared_effects(x, regs)[0] & reads for x in head):
        return (), after
    return rescale, rest


def switches() -> tuple:
    """This module's environment switches as they are now (``compiler.module_cache.code_switches``)."""
    return tuple(os.environ.get(name, "").strip() for name in (SPLIT_ENV, EARLY_RESCALE_ENV, ANCHOR_ENV, VARYING_ENV))


def late_producers(p, d: DeferredGemm) -> frozenset | None:
    """The indices of ``p``'s producers whose tiles only ``d.second`` reads (flash attention's V), when their stages
    can be filled and released apart from the others' (``SPLIT_ENV`` not 0; some producers, not all, are late; the
    early ones' tiles are not read by ``second``; ``middle`` and ``after`` read no staged tile), else None."""
    from tileagent.compiler.lower.pipeline import producer_tile
    from tileagent.compiler.lower.smem import buffers_used

    if os.environ.get(SPLIT_ENV, "").strip() == "0":
        return None
    second = buffers_used(d.second)
    late = frozenset(i for i, c in enumerate(p.producers) if producer_tile(c) in second)
    early = {producer_tile(c) for i, c in enumerate(p.producers) if i not in late}
    late_tiles = {producer_tile(p.producers[i]) for i in late}
    rest = set().union(*(buffers_used(x) for x in d.middle + d.after))
    if not late or not early or early & second or rest & set(p.staged) or \
            any(buffers_used(x) & late_tiles for x in d.before + (d.first,)):
        return None
    return late


def _uniform(extent, body, varying) -> bool:
    """Whether the trip count ``extent`` is the same for every block and tile: it depends on none of ``varying``,
    also through the Lets of ``body`` it reads (causal attention's ``n_blocks``)."""
    from tileagent.compiler.ir.simplify import depends_on
    from tileagent.compiler.ir.visit import substitute, walk

    lets = {x.var: x.value for x in walk(body) if isinstance(x, Let)}
    for _ in range(len(lets) + 1):
        if depends_on(extent, varying):
            return False
        if not depends_on(extent, list(lets)):
            return True
        extent = substitute(extent, lets)
    return False


def registers(ctx, g: Gemm) -> tuple:
    """The register operands of gemm ``g`` a wait pins: its accumulator, and its A fragment in the RS form."""
    out = (accumulator_operand(ctx, g),)
    if g.a.buffer.scope == "fragment":
        reg = ctx.mem(g.a.buffer)
        out += ((reg, tuple(range(int(reg.shape[0])))),)
    return out


def first_iteration(lowering, d: DeferredGemm, now, release_early: list = ()) -> list:
    """The loop's first iteration (peeled): as without the deferral, but ``second`` left to the next one;
    ``release_early`` (split stages) frees the early tiles' stage once ``first`` retired."""
    out = lowering.with_context(now).body(d.before + (d.first,))
    out.append(WgmmaWait(0, d.first.span, operands=(accumulator_operand(now, d.first),)))
    return out + list(release_early) + lowering.with_context(now).body(d.middle + d.after)


def iteration(lowering, d: DeferredGemm, now, before, release: list, release_early: list = (),
              wait_late: list = (), anchor_at: tuple | None = None) -> list:
    """Every later iteration's consumers: ``now`` / ``before`` lower on this iteration's and the previous one's
    stage; ``release`` frees the previous stage (split stages: its late tiles; ``wait_late`` waits for them before
    ``second`` and ``release_early`` frees this stage's early tiles once ``first`` retired); ``anchor_at`` (a shared
    word, ``anchored``) keeps the wait for ``second`` after ``middle``."""
    out = lowering.with_context(now).body(d.before + (d.first,))
    out += list(wait_late) + lowering.with_context(before).body(d.rescale + (d.second,))
    out.append(WgmmaWait(1, d.first.span, operands=(accumulator_operand(now, d.first),)))
    out += list(release_early) + lowering.with_context(now).body(d.middle)
    anchor = _anchor_registers(now, d) if anchor_at is not None else ()
    out.append(WgmmaWait(0, d.second.span, operands=registers(now, d.second), anchor=anchor,
                         anchor_at=anchor_at if anchor else None))
    return out + release + lowering.with_context(now).body(d.after)


def anchored(d: DeferredGemm) -> bool:
    """Whether the wait for ``second`` in the loop gets an anchor (``tir.WgmmaWait.anchor``): the last statement of
    ``middle`` (flash attention's running row sum, which every exponential feeds) writes 32-bit registers, and
    ``ANCHOR_ENV`` is not 0. sm_90a SASS without it: the wait right after the row maximum's first shuffle, the
    softmax's exponentials after P @ V was done; with it, every exponential and the row sums before the wait. On the
    H200 (128/128/2/256 flash attention, two consumer warpgroups) within the spread: 647 vs 643 TFLOP/s."""
    from tileagent.compiler.lower.barriers import shared_effects

    if os.environ.get(ANCHOR_ENV, "").strip() == "0":
        return False
    written = shared_effects(d.middle[-1], ("fragment", "local"))[0]
    return any(str(b.dtype) in _ANCHOR_DTYPES for b in written)


def _anchor_registers(ctx, d: DeferredGemm) -> tuple:
    """(register array, indices) of what the last statement of ``middle`` writes: at most ``ANCHOR_WORDS`` 32-bit
    registers, so that the anchor costs a few shared stores an iteration."""
    from tileagent.compiler.lower.barriers import shared_effects

    out, left = [], ANCHOR_WORDS
    for b in sorted(shared_effects(d.middle[-1], ("fragment", "local"))[0], key=lambda b: b.name):
        reg = ctx.mem(b)
        if str(reg.dtype) in _ANCHOR_DTYPES and left > 0:
            n = min(left, int(reg.shape[0]))
            out.append((reg, tuple(range(n))))
            left -= n
    return tuple(out)


def after_loop(lowering, d: DeferredGemm, last, extent, release: list, wait_late: list = ()) -> list:
    """The last iteration's ``second`` gemm (``last``: the context on its stage; ``wait_late``: for its late tiles,
    split stages), its wait, ``release``."""
    work = list(wait_late) + lowering.with_context(last).body(d.rescale + (d.second,))
    work.append(WgmmaWait(0, d.second.span, operands=registers(last, d.second)))
    return [If(make_cmp(">", extent, 0), tuple(work + release), (), d.second.span)]


def previous_stage(count, stages: int):
    """The stage of the iteration before the one of ``count``."""
    return make_binop("%", make_binop("+", count, stages - 1), stages)


__all__ = ["ANCHOR_ENV", "DeferredGemm", "EARLY_RESCALE_ENV", "SPLIT_ENV", "after_loop", "anchored",
           "first_iteration", "for_ws", "iteration", "late_producers", "plan", "previous_stage", "registers",
           "switches"]
