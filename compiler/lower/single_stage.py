"""Lowering of a one-stage software pipeline (``T.Pipelined(..., num_stages=1)``): each staged tile refilled by TMA as
soon as the iteration has read it, and waited for only where it is first read.

In: a ``SoftwarePipeline`` of 1 stage (``compiler.lower.pipeline`` plans one for a loop whose producers may use TMA)
and the lowering. Out: thread-IR statements.
Why: with one buffer a tile, TileLang's own programs at ``num_stages=1`` (its MHA forward at 128 x 128 tiles, 255
registers a thread) still overlap the loads with the tensor cores: a producer warpgroup refills K's tile once the
iteration's first gemm has read it and V's once the second has. The plain loop (our lowering before) copied K and V
through registers where they are used: two memory latencies in every iteration (TileLang's MHA forward 0.89 of
TileLang's speed, H100, round 2 session 30).
How, with one mbarrier per producer (TMA, ``compiler.lower.tma``) and c = the pipeline's earlier iterations (a
phase slot inside another loop, as the multi-stage TMA pipeline counts them) plus the iteration's index:

- a tile last read by the iteration's last reading consumer statement is refilled at the top of the next
  iteration, after every thread's ``fence.proxy.async`` and the iteration's barrier (every thread has read it): by
  thread 0, for that iteration;
- any other tile is refilled right after the consumer statement that reads it last, behind every thread's proxy
  fence and a barrier, for the next iteration (guarded by the loop's end); its first load is issued before the loop;
- every thread waits on a tile's barrier with parity c % 2 right before the first consumer statement that reads it.
Guarantees: a tile is read only after the wait on the phase its bytes complete; it is overwritten only after a
barrier that follows every read of it in the iteration (the gemms wait for their wgmmas: no overlapped or chained
schedule here), so no read-after-write or write-after-read hazard; each barrier completes one phase per iteration.
Otherwise (no TMA for a producer, the kernel warp-specialized, a staged tile no consumer reads) the loop runs its
copies synchronously at the top of every iteration between two barriers, which is the plain loop's order for its
tiles. Only loops of two or more gemms are planned so (``worthwhile``); ``TILEAGENT_SINGLE_STAGE=0``: none (the
plain loop).
"""

from __future__ import annotations

import os
from dataclasses import replace

from tileagent.compiler.ir.expr import make_binop, make_cmp
from tileagent.compiler.ir.stmt import For, Gemm
from tileagent.compiler.ir.visit import substitute, walk
from tileagent.compiler.tir import AsyncProxyFence, Barrier


def enabled() -> bool:
    """Whether one-stage T.Pipelined loops are planned as pipelines (``TILEAGENT_SINGLE_STAGE=0``: off)."""
    return os.environ.get("TILEAGENT_SINGLE_STAGE", "").strip() != "0"


def worthwhile(body) -> bool:
    """Whether a one-stage loop's ``body`` gains from the pipeline: it runs two or more T.gemm (attention's Q @ K^T
    and P @ V, whose tiles are refilled while the other gemm runs). Measured on an H100 (round 2 session 33, against
    the plain loop in the same call): TileLang's MHA forward 1.34x (bshd, 128 x 128) and 1.50x (bhsd), its attention
    with sinks 1.00x; its W4A8 dequantized GEMM (one gemm a loop) 0.92x."""
    return sum(isinstance(s, Gemm) for s in walk(tuple(body))) >= 2


def lower_single_stage(lowering, p) -> list:
    """Thread IR of one-stage pipeline ``p`` (module docstring)."""
    from tileagent.compiler.lower import early_loads
    from tileagent.compiler.lower.barriers import shared_effects
    from tileagent.compiler.lower.copy import guarded
    from tileagent.compiler.lower.pipeline import (WgmmaSchedule, earlier_iterations, hoisted_operands, tma_plans,
                                                   wgmma_schedules)
    from tileagent.compiler.lower.tma import issue, wait

    ctx = lowering.ctx
    loop, v = p.loop, p.loop.var
    start, extent = ctx.rewrite(loop.start, {}), ctx.rewrite(loop.extent, {})
    end = make_binop("+", start, extent)
    plans = tma_plans(ctx, p) if ctx.ws is None else None
    read = set().union(*(shared_effects(x)[1] for x in p.consumers))
    if plans is None or any(c.dst.buffer not in read for c in p.producers):
        return _synchronous(lowering, p, start, extent)
    early, rest = early_loads.split(ctx, p.consumers)  # (register loads: they read no tile)
    readers = {c: [j for j, x in enumerate(rest) if c.dst.buffer in shared_effects(x)[1]] for c in p.producers}
    lowering.note_loop(v, start, extent, loop.step)
    state = ctx.tma
    first_bar = state.take_barriers(len(p.producers))
    bar = {c: first_bar + i for i, c in enumerate(p.producers)}
    plan_of = {c: pl for c, (_, pl) in zip(p.producers, plans)}
    last_reader = max(j for js in readers.values() for j in js)
    at_top = [c for c in p.producers if max(readers[c]) == last_reader]
    for c, (entry, pl) in zip(p.producers, plans):
        when = "at the top of each iteration" if c in at_top else "for the next iteration right after its last reader"
        ctx.note_instruction(c, entry.describe_plan(pl, c.src.buffer.dtype) + f", 1 stage: issued {when}, waited for "
                             "where first read")
    out, done, count_execution = earlier_iterations(ctx, p)
    out += hoisted_operands(ctx, p)

    def load(c, iteration, fence: bool = False) -> list:
        copy = replace(c, src=substitute(c.src, {v: iteration}), dst=substitute(c.dst, {v: iteration}))
        return issue(ctx, [(copy, plan_of[c])], bar[c], fence=fence)

    for c in p.producers:  # (thread 0's own generic accesses of the tile before the loop: its proxy fence)
        if c not in at_top:
            out += guarded(ctx, make_cmp("<", 0, extent), load(c, start, fence=True))
    parity = make_binop("%", make_binop("+", done, make_binop("-", v, start)), 2)
    # every gemm waits for its own wgmmas: a tile is refilled right after its last reader
    schedules = {g: WgmmaSchedule(sync=w.sync, pending=0) for g, w in wgmma_schedules(p, ctx.layouts).items()}
    work = lowering.with_context(ctx.derive(stage_base={b: 0 for b in p.staged}, wgmma_schedule=schedules))
    body = work.body(early) + [AsyncProxyFence(p.span), Barrier(p.span)]
    for c in at_top:
        body += load(c, v)
    segment = []
    for j, x in enumerate(rest):
        waits = [c for c in p.producers if readers[c][0] == j]
        if waits and segment:
            body += work.body(segment)
            segment = []
        for c in waits:
            body += wait(ctx, bar[c], parity, c.span)
        segment.append(x)
        refills = [c for c in p.producers if c not in at_top and max(readers[c]) == j]
        if refills:
            body += work.body(segment) + [AsyncProxyFence(p.span), Barrier(p.span)]
            segment = []
            nxt = make_binop("+", v, 1)
            for c in refills:
                body += guarded(ctx, make_cmp("<", nxt, end), load(c, nxt))
    body += work.body(segment)
    out.append(For(v, start, extent, loop.step, "serial", tuple(body), {}, loop.span))
    return out + count_execution(extent)


def _synchronous(lowering, p, start, extent) -> list:
    """The loop with its producers as ordinary copies at the top of every iteration, between two barriers."""
    lowering.note_loop(p.loop.var, start, extent, p.loop.step)
    body = [Barrier(p.span)] + lowering.body(p.producers) + [Barrier(p.span)] + lowering.body(p.consumers)
    return [For(p.loop.var, start, extent, p.loop.step, "serial", tuple(body), {}, p.loop.span)]


__all__ = ["enabled", "lower_single_stage"]
