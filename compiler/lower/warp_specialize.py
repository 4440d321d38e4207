"""Warp specialization of a kernel's TMA software pipeline (sm_90a): one more warpgroup issues the loads, the
kernel's own threads only compute.

In: a ``KernelPlan`` (its pipelines planned) and the Target, before lowering (``candidate``); the lowered consumer
body and what the pipeline's lowering put into the ``WsPlan``, after it (``specialize``).
Out: ``candidate`` gives the ``WsPlan`` of the kernel's one pipeline that can be specialized, or None; ``specialize``
gives the ``tir.WarpSpecialize`` statement that becomes the kernel's body after the block indices.

When: TMA is in use (``compiler.instructions.tma.usable``), not switched off (``TILEAGENT_WARP_SPECIALIZE=0``, or
TileLang's pass config ``tl.disable_warp_specialized``; ``=force`` ignores the occupancy rule below), the kernel is
one-dimensional in threads (a multiple of 128, at most 896, no per-thread code) and has exactly one software
pipeline, at the top level of its body or inside serial loops (none that a ``break``/``continue`` may leave) and ifs
without else there (``path``: a ``T.Persistent`` tile loop), whose producers are all TMA loads (decided when it is
lowered; otherwise the kernel is lowered as without this module). What the producer computes must not depend on the
consumers: the loop bounds, the conditions on the path and the copies' source indices use block indices, the
enclosing loops' variables, the kernel's scalars, global tensors, the Lets before the loop, which read no memory but
global tensors the kernel does not write (varlen attention's sequence starts, ``cu_seqlens[b]``), and the Lets on
its path (statements of a path loop or if ahead of the next step: a persistent kernel's tile coordinates), which
read no memory (the producer binds them again, the path's in its own copy of the path). Beside a nested pipeline nothing on
its path touches the arena bytes of the tiles its producer writes (the producer runs ahead into the next execution
while the consumers finish this one); a tile of the consumers' own, such as a staged epilogue's
(``compiler.lower.stage_epilogue``), or one the loop only reads (a persistent flash attention's Q tile, loaded again
for each query tile) may be used there.

How (``compiler.lower.pipeline`` lowers both sides): the block gets ``PRODUCER_THREADS`` more threads. Their
first thread runs the loop alone (inside the path's loops and ifs, on variables of its own): for iteration k (count
c = d + k - start, d = the iterations of earlier executions, 0 at the top level, else counted in a phase slot of
each side's registers) it waits until stage c % s is free (the ``empty`` barrier of the stage, parity ((c // s) %
2) ^ 1: a fresh barrier's first use passes), announces the stage's bytes on its ``full`` barrier and issues the TMA
loads. The kernel's threads (the consumers) run the kernel body with the loop as: wait on ``full[c % s]`` (parity
(c // s) % 2), the consumers' statements, then release a stage: with an overlapped wgmma (one group left in flight),
stage (c - 1) % s once the wait has retired iteration k - 1's wgmmas (and, in a nested pipeline, the last
iteration's stage after the final wait); otherwise stage c % s. A release is one arrival per consumer warp
(``tir.MbarrierArrive``), so a stage is free once every consumer warp is done with it. Inside the consumer body
every barrier is the named barrier over the consumer threads. With more than two warpgroups in the block,
``setmaxnreg`` moves registers from the producer (``PRODUCER_REGISTERS``) to the consumers.
Guarantees: a stage is written by TMA only after every consumer warp released the previous use of it, and read
only after the phase that carries its bytes completed; every load the producer issues is waited for by the
consumers (both sides run the same iterations); no block-wide barrier follows the split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tileagent.compiler.ir.expr import make_cmp
from tileagent.compiler.ir.simplify import depends_on
from tileagent.compiler.ir.stmt import Copy, For, Let
from tileagent.compiler.ir.visit import loads, walk
from tileagent.compiler.tir import THREAD, Declare, SetMaxNReg, WarpSpecialize

ENV = "TILEAGENT_WARP_SPECIALIZE"
PRODUCER_THREADS = 128  # one warpgroup: setmaxnreg works per warpgroup
PRODUCER_REGISTERS = 40
LIVE_FRACTION = 0.85  # of a consumer thread's register arrays that must fit the cap at entry (``registers``)
WGMMA_OVERHEAD = 26  # registers beside a wgmma's accumulators (ptxas: 90 for m64n128k16's 64, C7602 below)
MAX_THREADS = 1024
REGISTERS_PER_SM = 65536


def enabled() -> bool:
    """Whether warp specialization is on for this process (``TILEAGENT_WARP_SPECIALIZE=0`` turns it off)."""
    return os.environ.get(ENV, "").strip() != "0"


def forced() -> bool:
    """``TILEAGENT_WARP_SPECIALIZE=force``: also where it costs blocks per SM (one block per SM then; for A/B runs)."""
    return os.environ.get(ENV, "").strip() == "force"


@dataclass
class WsPlan:
    """The pipeline a kernel specializes, its consumer threads, the Vars of the Lets before it (the producer binds
    them again), the loops and conditions it runs inside (``path``, outermost first: serial For and If statements of
    the kernel body, e.g. a ``T.Persistent`` tile loop; empty when it runs once per block), the Lets of each step of
    the path ahead of the next step (``path_lets``), and, once the pipeline is lowered, the producer's statements
    (empty: the pipeline was not lowered with TMA, and the kernel is not specialized)."""

    pipeline: object
    consumers: int
    lets: tuple
    path: tuple = ()
    producer: list = field(default_factory=list)
    path_lets: dict = field(default_factory=dict)  # a step of ``path`` (by id) -> its Lets ahead of the next step


def candidate(plan, target, disabled: bool = False) -> WsPlan | None:
    """The ``WsPlan`` of ``plan``'s kernel when it may be warp-specialized (module docstring), else None."""
    from tileagent.compiler.instructions.tma import pipeline_uses_tma, usable
    from tileagent.compiler.lower.barriers import shared_effects
    from tileagent.compiler.lower.pipeline import SoftwarePipeline
    from tileagent.compiler.loop_exits import exits_early

    k, body = plan.kernel, plan.body or ()
    threads = k.threads[0] if tuple(k.threads[1:]) == (1, 1) else 0
    if disabled or not enabled() or not usable(target) or k.thread_vars or threads % 128 or \
            threads + PRODUCER_THREADS > MAX_THREADS:
        return None
    pipelines = [x for x in walk(body) if isinstance(x, SoftwarePipeline) and x.stages > 1]  # (one stage: its own)
    if len(pipelines) != 1:
        return None
    p = pipelines[0]
    path = _path(body, p)
    if path is None or not pipeline_uses_tma(p.body) or any(isinstance(x, For) and exits_early(x) for x in path):
        return None  # a loop a break/continue may leave: the producer's copy of it would not know when
    if not all(isinstance(c, Copy) for c in p.producers):
        return None  # a row gather (compiler.lower.gather) is no TMA load
    top = path[0] if path else p
    before = body[:next(n for n, x in enumerate(body) if x is top)]
    lets = tuple(x.var for x in before if isinstance(x, Let))
    written = set().union(*(shared_effects(x, ("global",))[0] for x in body))
    if any(ld.buffer.scope != "global" or ld.buffer in written
           for x in before if isinstance(x, Let) for ld in loads(x.value)):
        return None  # the producer loads them again: only from global tensors the kernel does not write
    body_lets = [x.var for x in walk(body) if isinstance(x, Let) and x.var not in lets]
    path_lets = _path_lets(path, p, body_lets)
    rebound = {y.var for ys in path_lets.values() for y in ys}
    inner = [v for v in body_lets if v not in rebound]
    exprs = [p.loop.start, p.loop.extent] + [e for c in p.producers for e in c.src.starts]
    exprs += [e for x in path for e in ((x.start, x.extent) if isinstance(x, For) else (x.cond,))]
    if any(depends_on(e, inner) or any(ld.buffer.scope != "global" for ld in loads(e)) for e in exprs):
        return None
    # around a nested pipeline the producer runs ahead into the next execution: nothing else there may touch the
    # bytes of the pipeline's staged tiles (an epilogue staged in them would race with the next loads); a tile of the
    # consumers' own elsewhere in the arena may be (compiler.lower.stage_epilogue), and so may one the consumers
    # read in the loop, such as flash attention's Q tile, loaded again for the next query tile
    steps = list(path) + [p]
    piped = _extents({c.dst.buffer for c in p.producers} | set(p.staged), plan.shared)  # what the producer writes
    for x, nxt in zip(path, steps[1:]):
        for y in (x.body if isinstance(x, For) else x.then_body):
            touched = _extents(set().union(*shared_effects(y)), plan.shared) if y is not nxt else []
            if any(a < d and c < b for a, b in touched for c, d in piped):
                return None
    return WsPlan(p, threads, lets, tuple(path), path_lets=path_lets)


def _path_lets(path, p, kernel_lets) -> dict:
    """id(step) -> the Lets among a path step's statements ahead of the next step whose values read no memory and
    use, of the Lets inside the kernel body (``kernel_lets``), only earlier ones of the path (the producer computes
    them again); a Let that does not qualify stays the consumers' (a producer expression using it rules
    specialization out)."""
    out, known = {}, set()
    steps = list(path) + [p]
    for x, nxt in zip(path, steps[1:]):
        mine = []
        for y in (x.body if isinstance(x, For) else x.then_body):
            if y is nxt:
                break
            if isinstance(y, Let) and next(loads(y.value), None) is None and \
                    not depends_on(y.value, [v for v in kernel_lets if v not in known]):
                mine.append(y)
                known.add(y.var)
        out[id(x)] = tuple(mine)
    return out


def ws_barriers(ws: WsPlan, kernel, layouts) -> int:
    """The mbarrier slots the specialized pipeline takes beside its ``full`` ones: an ``empty`` barrier a stage; with
    split stages (``defer_gemm.late_producers``) a ``full`` and an ``empty`` one a stage more; a deferred gemm's
    anchor word (``defer_gemm.anchored``)."""
    from tileagent.compiler.lower import defer_gemm

    _, late, anchor = defer_gemm.for_ws(ws, kernel, layouts)
    return ws.pipeline.stages * (1 if late is None else 3) + anchor


def _extents(buffers, shared) -> list:
    """The arena byte ranges [start, end) of ``buffers`` in the shared plan ``shared`` (a buffer it does not place,
    or no plan: the whole arena)."""
    out = []
    for b in buffers:
        offset = shared.offsets.get(b) if shared is not None else None
        out.append((0, 1 << 30) if offset is None else (offset, offset + shared.elements[b] * b.dtype.bytes))
    return out


def _path(stmts, p) -> list | None:
    """The statements enclosing ``p`` in ``stmts``, outermost first, when each is a serial For or the then-branch of an
    If without an else; None when ``p`` is elsewhere (another kind of loop, an else-branch) or not in ``stmts``."""
    from tileagent.compiler.ir.stmt import If

    for x in stmts:
        if x is p:
            return []
        if (isinstance(x, For) and x.kind == "serial") or (isinstance(x, If) and not x.else_body):
            inner = _path(x.body if isinstance(x, For) else x.then_body, p)
            if inner is not None:
                return [x] + inner
    return None


def register_words(stmts) -> int:
    """32-bit registers the register arrays declared in ``stmts`` take: an estimate of what a consumer thread
    needs (ptxas adds addresses and temporaries, and fits into less when it must). An array declared inside a loop
    or if lives there: of sibling blocks only the largest counts (a peeled iteration and its loop, ``defer_gemm``)."""
    return -(-_declared_bytes(stmts) // 4)


def _declared_bytes(stmts) -> int:
    own = sum(b.shape[0] * b.dtype.bytes for b in dict.fromkeys(x.buffer for x in stmts if isinstance(x, Declare)))
    return own + max((_declared_bytes(getattr(x, name)) for x in stmts
                      for name in ("body", "then_body", "else_body") if getattr(x, name, None)), default=0)


def wgmma_floor(stmts) -> int:
    """The registers a thread needs at entry to hold the largest wgmma of ``stmts``: its accumulators (and A
    registers, RS) plus ``WGMMA_OVERHEAD``; 0 without wgmma. ptxas refuses the kernel below it (C7602)."""
    from tileagent.compiler.tir import Wgmma, WgmmaRS

    sizes = [len(x.c) + len(getattr(x, "a", ())) for x in walk(stmts) if isinstance(x, (Wgmma, WgmmaRS))]
    return max(sizes) + WGMMA_OVERHEAD if sizes else 0


def registers(consumers: int, target, shared_bytes: int, words: int, floor: int = 0, useful: int | None = None) \
        -> tuple | None:
    """(blocks per SM, (producer, consumer) registers for ``setmaxnreg``, or None where it would give the consumers
    no more than they have at entry), or None when the producer warpgroup would cost the kernel a block per SM.

    ``words``: the 32-bit registers of the arrays a consumer thread declares, an upper bound of what it keeps live
    (short-lived arrays share registers). Blocks per SM without the producer: what the shared memory
    (``shared_bytes`` a block, plus the 1 KiB the driver reserves) and ``words`` registers a thread allow. With it:
    the most blocks, up to the shared-memory limit, whose register cap at entry (the registers per SM split over
    every thread of the blocks) holds ``LIVE_FRACTION`` of ``words`` and at least ``floor`` (``wgmma_floor``). ptxas
    allocates within that cap in the consumers' code too (seen on sm_90a: C7602 below it), so ``setmaxnreg`` only
    hands the producer's unused registers over at run time: the producer down to ``PRODUCER_REGISTERS``, the
    consumers up to what is left of the block's pool (entry x threads; at most 240). H200, same run: MLA decode 409
    -> 471 TFLOP/s with the producer (1 block per SM either way);
    flash attention 590 -> 465 forced to 1 block per SM instead of 2 (BENCHMARKS.md).
    ``useful``: the most blocks per SM the grid can fill (a static grid of at most one block per SM: 1); blocks the
    producer takes beyond it cost nothing (TileLang's split-KV decoding, 128 blocks: it specializes too)."""
    total = consumers + PRODUCER_THREADS
    by_shared = max(1, min(target.shared_bytes_per_sm // (shared_bytes + 1024), target.blocks_per_sm))
    alone = min(by_shared, target.registers_per_sm // (consumers * min(255, -(-words // 8) * 8)),
                target.threads_per_sm // consumers)
    need = min(255, max(-(-int(words * LIVE_FRACTION) // 8) * 8, floor))
    blocks = next((b for b in range(by_shared, 0, -1) if total * b <= target.threads_per_sm and
                   min(255, target.registers_per_sm // (b * total) // 8 * 8) >= need), 0)
    if blocks < max(alone, 1) and not (useful is not None and 1 <= useful <= blocks):
        if not forced():
            return None
        blocks = 1
    entry = min(255, target.registers_per_sm // blocks // total // 8 * 8)
    # the block's pool is what it got at launch: setmaxnreg.inc beyond it would wait for ever
    consumer = min(240, (entry * total - PRODUCER_THREADS * PRODUCER_REGISTERS) // consumers // 8 * 8)
    return blocks, ((PRODUCER_REGISTERS, consumer) if consumer > entry else None)


def specialize(ws: WsPlan, lets: dict, consumer_body, target, shared_bytes: int, span=None, grid_blocks=None):
    """``if (THREAD >= consumers) producer else consumer_body``: the producer rebinds the Lets before the pipeline
    (``lets``: Var -> lowered value) and runs its loop in its first thread; the registers split as ``registers``
    says. None when the producer warpgroup would cost a block per SM (the caller lowers the kernel without it) that
    a grid of ``grid_blocks`` blocks (None: not static) could fill on the target's usual part."""
    from tileagent.compiler.ir.stmt import If
    from tileagent.compiler.resources import sm_count

    useful = None if grid_blocks is None else -(-grid_blocks // sm_count(target.arch)[0])
    split = registers(ws.consumers, target, shared_bytes, register_words(consumer_body), wgmma_floor(consumer_body),
                      useful)
    if split is None:
        return None
    blocks, regs = split
    producer = [Let(v, lets[v], span) for v in ws.lets]
    producer.append(If(make_cmp("==", THREAD, ws.consumers), tuple(ws.producer), (), span))
    if regs is not None:
        producer.insert(0, SetMaxNReg(regs[0], False, span))
        consumer_body = [SetMaxNReg(regs[1], True, span)] + list(consumer_body)
    return WarpSpecialize(make_cmp(">=", THREAD, ws.consumers), tuple(producer), tuple(consumer_body), span,
                          consumers=ws.consumers, blocks_per_sm=blocks)


__all__ = ["ENV", "PRODUCER_THREADS", "WsPlan", "candidate", "enabled", "forced", "register_words", "registers",
           "specialize", "wgmma_floor", "ws_barriers"]
