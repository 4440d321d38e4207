"""Software pipelining of ``T.Pipelined`` loops: multi-buffered shared tiles filled by ``cp.async`` stages ahead.

In: a T.Kernel body of the tile IR (before barrier insertion) and, for lowering, one ``SoftwarePipeline``.
Out: ``plan_pipelines`` replaces each loop it can pipeline by a ``SoftwarePipeline`` statement (the loop, its
producers, its consumers, the staged buffers); ``fit_pipelines`` (the ``plan_pipelines`` pass) also decides how
many stages fit the target's shared memory; ``lower_pipeline`` turns one into thread IR (its producers and consumers
under lowering contexts derived with their stage offsets, ``LowerContext.derive``).

Which loops: ``T.Pipelined(n, num_stages=s)`` with s >= 2 whose body has producers: ``T.copy`` from global into a
shared tile whose source indices depend only on the loop variable and values fixed before the loop (through names
the body binds once from those, which the copy's indices take in: ``actual_k = k + start``; an ``if`` whose two arms
copy one tensor into one tile counts as one copy from a chosen start; the copies at the top of an ``if c:`` without
an else come out of it, reading past the tensor where ``c`` is false: ``_guarded_copies``), and whose tile
nothing else in the kernel touches except reads by the loop's other statements (the consumers). With ``order`` /
``stage`` the body is first put in ``order``; the statements of stage 0 must then all be such copies. Any other
pipelined loop runs as a plain loop (``log`` says why). s = 1 on a target with TMA, for a loop that runs a T.gemm:
a one-stage pipeline, lowered by ``compiler.lower.single_stage``. In every schedule below, the consumers' leading
copies of read-only global tensors into registers run before the iteration's wait (``compiler.lower.early_loads``).

How (s stages, n iterations): every staged tile gets s buffers (``stage_stride`` elements apart, 128-byte aligned).
Prologue: the producers of iterations 0 .. s-2, one cp.async group each. Iteration k: wait until at most s-2 groups
are pending (iteration k's tiles have landed), barrier (everyone's copies are visible and everyone has finished
iteration k-1), issue the producers of iteration k+s-1 into buffer (k+s-1) % s, the one iteration k-1 read, and
commit (an empty group past the end keeps the count), then run the consumers on buffer k % s. After the loop: wait
for all groups.
A gemm among the consumers whose A operand is a shared tile the loop never changes (flash attention's Q) gets that
operand's atoms loaded into registers once, before the loop (``gemm.hoist_a_operand``), when they fit.
Guarantees: no read-after-write hazard (a tile is read only after the wait and barrier that follow its copy) and no
write-after-read hazard (a buffer is refilled only after the barrier that follows every read of it); copies that
cannot be asynchronous (a dtype cast, a run shorter than 4 bytes) are issued as ordinary loads and stores at the same
point, which keeps both guarantees.

Consumers on wgmma (sm_90a, ``compiler.instructions.wgmma``; ``wgmma_schedules`` decides, ``WgmmaSchedule`` says):

- The iteration's barrier is preceded by ``fence.proxy.async`` (``AsyncProxyFence``: every thread's landed copies
  become visible to the tensor cores' async proxy), so a top-level wgmma gemm that no earlier consumer of the
  iteration writes shared memory before needs only ``wgmma.fence`` (``WgmmaFence(sync=False)``), not its own proxy
  fence and barrier.
- Overlap (unless ``TILEAGENT_WGMMA_OVERLAP=0``): a top-level wgmma gemm whose accumulator (and A registers, for
  the RS form) no other consumer touches and whose shared operands are staged tiles or tiles no consumer writes
  keeps its group in flight: ``wait_group 1`` instead of 0, so the tensor cores run iteration k's wgmmas while the
  threads issue the next loads and reach iteration k + 1's wgmmas. Then iteration k is: wait for iteration k's copies,
  proxy fence, barrier, the consumers (the gemm: wgmma.fence, wgmmas on stage k % s, commit, ``wait_group 1``, which
  retires iteration k - 1's wgmmas for this thread), a second barrier (every thread has retired them), then the
  producers of iteration k + s - 1 into stage (k + s - 1) % s = (k - 1) % s, the stage iteration k - 1's wgmmas read,
  and the commit. The wgmmas of iteration k still read stage k % s, which no copy issued before iteration k + 1's
  second barrier writes. After the loop ``wait_group 0`` (before anything reads the accumulator), then the copies'
  wait. The loads are issued later in the iteration than without overlap: with s stages they run about s - 2
  iterations and the rest of the current one ahead (s - 1 without overlap).
- Chained gemms: a wgmma gemm immediately followed by another wgmma gemm that accumulates into the same whole
  accumulator (not clear_accum) commits its group without waiting; the second gemm's wait (wait_group 0) retires
  both groups, in order, before anything reads the accumulator. Nothing runs between them but the second gemm's
  fence (and, when a consumer wrote shared memory before it, its proxy fence and barrier), which touches neither the
  accumulator nor the first gemm's operands.

Producers on TMA (sm_90a; by default in pipelines that feed a T.gemm: ``compiler.instructions.tma.mode``;
``compiler.lower.tma``): when every producer of the pipeline can be a TMA load (else the pipeline keeps cp.async and
each copy's instruction note says why not), the stages complete on mbarriers instead of cp.async groups: one barrier
per stage (init count 1).
With c = the pipeline's earlier iterations (0 for a loop that runs once per block; inside another loop a phase slot,
``tl_tma_phase``, counts them) plus the iteration's index in the loop, iteration k's tiles go to stage c % s on barrier
c % s, issued by thread 0 (``fence.proxy.async``, one ``arrive.expect_tx`` of all the producers' bytes, the TMA
loads). Prologue: iterations 0 .. s-2. Iteration k: every thread waits on barrier c % s with parity (c // s) % 2
(the barrier's phases alternate, its uses are s iterations apart), the proxy fence (with wgmma consumers) and the
barrier (everyone has finished iteration k-1, so stage (k-1) % s is free), thread 0 issues iteration k+s-1 into
it, then the consumers; with an overlapped wgmma gemm, consumers, a second barrier, then the refill, as above. When
the gemms are overlapped and no consumer writes shared memory (gemm_relu), the first barrier and its proxy fence
go: the data is ordered by the mbarrier, the refill by the barrier after the wgmma waits, and one proxy fence and
barrier before the loop cover the generic writes made before it (one barrier per iteration instead of two).
After the loop the slot advances by the loop's trip count. Every issued load is waited for inside the loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tileagent.compiler.ir.expr import make_binop, make_call, make_cmp, make_select
from tileagent.compiler.ir.simplify import depends_on
from tileagent.compiler.ir.stmt import Alloc, Buffer, Copy, For, Gemm, If, Let, Stmt, While
from tileagent.compiler.ir.visit import leaves, loads, stmt_exprs, substitute, walk
from tileagent.compiler.lower import defer_gemm, early_loads
from tileagent.compiler.lower.copy import guarded, lower_copy
from tileagent.compiler.lower.gather import lower_gather, row_gather
from tileagent.compiler.lower.gemm import hoist_a_operand, hoistable_a
from tileagent.compiler.tir import AsyncCommit, AsyncProxyFence, AsyncWait, Barrier, WgmmaWait

log = logging.getLogger("tileagent.compiler")

STAGE_ALIGN_BYTES = 128


@dataclass(frozen=True, eq=False)
class SoftwarePipeline(Stmt):
    """A ``T.Pipelined`` loop split into producers (copies into ``staged`` tiles) and consumers (the rest)."""

    loop: For
    stages: int
    producers: tuple
    consumers: tuple
    staged: tuple

    @property
    def body(self) -> tuple:
        return self.producers + self.consumers

    @property
    def span(self):
        return self.loop.span

    def ir_lines(self, indent: int, stmt_lines) -> list[str]:
        """How ``get_ir`` shows it: the loop, a note of the schedule, its producers, then its consumers."""
        head = stmt_lines(replace(self.loop, body=()), indent)[0]
        names = ", ".join(b.name for b in self.staged)
        out = [f"{head}  # software pipeline: {self.stages} stages of {names}; producers issued "
               f"{self.stages - 1} iteration(s) ahead"]
        for s in self.producers + self.consumers:
            out += stmt_lines(s, indent + 4)
        return out


def stage_stride(buf: Buffer, layout) -> int:
    """Elements between two stages of a staged tile: its size rounded up to 128 bytes, or to the layout's
    ``align_bytes`` when larger (every stage of a wgmma operand starts on a swizzle-atom boundary)."""
    nbytes = layout.size * buf.dtype.bytes
    align = max(STAGE_ALIGN_BYTES, getattr(layout, "align_bytes", 0))
    return -(-nbytes // align) * align // buf.dtype.bytes


def fit_pipelines(name: str, body: tuple, layouts, scratch_bytes: int, limit: int,
                  one_stage: bool = False) -> tuple[tuple, dict]:
    """(``body`` with its pipelines planned, staged tile -> stages): every pipeline gets the stages it asks for, or
    fewer, down to a plain loop, until the kernel's shared memory (``smem.plan_shared``) fits ``limit`` bytes. What
    still does not fit is left to ``smem.check_fits`` to report. ``one_stage``: the target has TMA, so one-stage
    loops may be pipelines (``compiler.lower.single_stage``)."""
    from tileagent.compiler.lower.smem import plan_shared

    max_stages = None
    while True:
        planned = plan_pipelines(body, max_stages, one_stage)
        stages = {b: p.stages for p in walk(planned) if isinstance(p, SoftwarePipeline) for b in p.staged}
        total = plan_shared(planned, layouts.shared, scratch_bytes, stages).total_bytes
        if total <= limit or not stages:
            return planned, stages
        max_stages = max(stages.values()) - 1
        log.info("kernel %s: %d bytes of shared memory with %d pipeline stages exceed %d; trying %d", name, total,
                 max_stages + 1, limit, max_stages)


def plan_pipelines(body: tuple, max_stages: int | None = None, one_stage: bool = False) -> tuple:
    """``body`` with every pipelinable ``T.Pipelined`` loop (at any depth) replaced by a SoftwarePipeline of at most
    ``max_stages`` stages (the lowering lowers it when shared memory would not fit); one-stage loops only with
    ``one_stage`` (a target with TMA)."""
    return _plan(body, body, max_stages, one_stage)


def _plan(stmts, kernel_body, max_stages, one_stage) -> tuple:
    """``stmts`` with pipelines planned; statements with nothing planned inside stay the same objects (layout
    inference keys its results by them)."""
    out = []
    for s in stmts:
        fields = getattr(s, "__dataclass_fields__", {})
        changes = {}
        for name in ("body", "then_body", "else_body"):
            if name in fields:
                new = _plan(getattr(s, name), kernel_body, max_stages, one_stage)
                if any(a is not b for a, b in zip(new, getattr(s, name))):
                    changes[name] = new
        if changes:
            s = replace(s, **changes)
        if isinstance(s, For) and s.kind == "pipelined":
            s = _pipeline(s, kernel_body, max_stages, one_stage) or s
        out.append(s)
    return tuple(out)


def _pipeline(loop: For, kernel_body, max_stages, one_stage) -> SoftwarePipeline | None:
    from tileagent.compiler.instructions.tma import pipeline_uses_tma
    from tileagent.compiler.lower import single_stage

    stages = min(loop.annotations.get("num_stages", 0), 1 << 30 if max_stages is None else max_stages)
    if stages < 1 or stages == 1 and not (one_stage and single_stage.enabled() and pipeline_uses_tma(loop.body)
                                          and single_stage.worthwhile(loop.body)):
        return None  # one stage: only with TMA producers and two gemms or more (compiler.lower.single_stage)
    body, originals = _through_lets(*_branch_copies(list(loop.body)))
    body, originals = _guarded_copies(loop, body, originals, kernel_body)
    order, stage = loop.annotations.get("order"), loop.annotations.get("stage")
    if order is not None:
        if sorted(order) != list(range(len(body))) or len(stage) != len(body):
            log.info("T.Pipelined at %s: order/stage do not match the %d statements; not pipelined", loop.span,
                     len(body))
            return None
        body = [body[order.index(i)] for i in range(len(body))]
        stage = [stage[order.index(i)] for i in range(len(body))]
        chosen = [s for s, st in zip(body, stage) if st == 0]
        if not all(_is_producer(s, loop, body, kernel_body, originals, stages) for s in chosen):
            log.info("T.Pipelined at %s: a statement of stage 0 is not a global -> shared copy the loop can issue "
                     "ahead; not pipelined", loop.span)
            return None
    else:
        chosen = [s for s in body if _is_producer(s, loop, body, kernel_body, originals, stages)]
    if not chosen:
        log.info("T.Pipelined at %s: no copy from global into a shared tile can be issued ahead; not pipelined",
                 loop.span)
        return None
    consumers = tuple(s for s in body if not any(s is c for c in chosen))
    staged = tuple(dict.fromkeys(producer_tile(c) for c in chosen))
    return SoftwarePipeline(loop, stages, tuple(chosen), consumers, staged)


def _branch_copies(body: list) -> tuple[list, dict]:
    """``body`` with each top-level ``if c: T.copy(G[a...], tile) else: T.copy(G[b...], tile)`` (one global tensor,
    one tile, the same extents) as one copy from ``G[c ? a : b, ...]``, which can be issued ahead where ``c`` can
    (TileLang's block-causal attention loads its diagonal tile or a clean one that way); and a map from each new
    copy's id to the ``if`` it replaces."""
    def pick(cond, x, y) -> tuple:
        return tuple(i if i is j else make_select(cond, i, j) for i, j in zip(x, y))

    out, originals = [], {}
    for s in body:
        a, b = (s.then_body, s.else_body) if isinstance(s, If) else ((), ())
        if len(a) == len(b) == 1 and isinstance(a[0], Copy) and isinstance(b[0], Copy) and \
                a[0].src.buffer is b[0].src.buffer and a[0].dst.buffer is b[0].dst.buffer and \
                a[0].src.extents == b[0].src.extents and a[0].dst.extents == b[0].dst.extents and \
                a[0].eviction_policy == b[0].eviction_policy and a[0].barrier is b[0].barrier is None:
            new = replace(a[0], src=replace(a[0].src, starts=pick(s.cond, a[0].src.starts, b[0].src.starts)),
                          dst=replace(a[0].dst, starts=pick(s.cond, a[0].dst.starts, b[0].dst.starts)), span=s.span)
            originals[id(new)] = s
            s = new
        out.append(s)
    return out, originals


def _guarded_copies(loop: For, body: list, originals: dict, kernel_body) -> tuple[list, dict]:
    """``body`` with the global -> shared copies at the top of each ``if c:`` (no else) of its top level taken out of
    the ``if``, in order, as copies that read the tile from ``G[c ? start : (past the tensor's first dim), ...]``:
    where ``c`` is false they read nothing and fill the tile with zeros, which only the ``if``'s own statements read
    (TileLang's block-sparse attention and GEMM: ``if block_mask[k]: T.copy(K[...], K_shared) ...``). Done only where
    every such copy can then be issued ahead (``_is_producer``) and the loop reads or writes its tile nowhere else;
    ``originals`` maps each new copy's id to the kernel's own."""
    from tileagent.compiler.lower.barriers import shared_effects

    out = []
    for i, s in enumerate(body):
        if not (isinstance(s, If) and s.then_body and not s.else_body):
            out.append(s)
            continue
        copies = [x for x in s.then_body if isinstance(x, Copy) and x.src.buffer.scope == "global" and
                  x.dst.buffer.scope == "shared" and x.barrier is None]
        rest = tuple(x for x in s.then_body if not any(x is c for c in copies))
        new = [replace(c, src=replace(c.src, starts=(make_select(s.cond, c.src.starts[0], c.src.buffer.shape[0]),)
                                      + tuple(c.src.starts[1:])), span=c.span) for c in copies]
        tiles, kept = {c.dst.buffer for c in copies}, replace(s, then_body=rest)
        trial = {**originals, **{id(n): c for n, c in zip(new, copies)}}
        if not copies or not rest or any(tiles & set().union(*shared_effects(x)) for x in body if x is not s) or \
                not all(_is_producer(n, loop, out + new + [kept] + body[i + 1:], kernel_body, trial) for n in new):
            out.append(s)
            continue
        originals = trial
        out += new + [kept]
    return out, originals


def _through_lets(body: list, originals: dict) -> tuple[list, dict]:
    """``body`` with each global -> shared copy's indices taking in the values of the names the body binds once, at
    its top level, from the loop variable and values fixed before the loop (TileLang's varlen attention: ``actual_k =
    k + start``, then ``K[kv_start + actual_k * block_N : ...]``: such a copy can be issued iterations ahead);
    and ``originals`` (a map from a rewritten statement's id to the kernel's own) extended to these copies. The
    bindings stay, for the other statements."""
    from collections import Counter

    once = Counter(x.var for x in walk(tuple(body)) if isinstance(x, Let))
    bound, out = {}, []
    for s in body:
        if isinstance(s, Let) and once[s.var] == 1:
            value = substitute(s.value, bound)
            if _fixed_in_loop((value,), tuple(body)):
                bound[s.var] = value
        elif bound and isinstance(s, Copy) and s.src.buffer.scope == "global" and s.dst.buffer.scope == "shared" \
                and any(depends_on(e, list(bound)) for e in tuple(s.src.starts) + tuple(s.dst.starts)):
            new = replace(s, src=substitute(s.src, bound), dst=substitute(s.dst, bound))
            originals[id(new)] = originals.pop(id(s), s)
            s = new
        out.append(s)
    return out, originals


def producer_tile(s) -> Buffer:
    """The shared tile producer ``s`` (a T.copy or a row gather) fills."""
    return s.dst.buffer if isinstance(s, Copy) else row_gather(s).dst


def _is_producer(s, loop: For, body, kernel_body, originals=None, stages: int = 2) -> bool:
    """Whether ``s`` can be issued iterations ahead: a global -> shared copy, or with two stages or more a row gather
    (``compiler.lower.gather``: cp.async, never TMA), indices fixed before the loop apart from its variable, the only
    writer of its tile in the kernel, the tile read nowhere outside the loop body.
    ``originals`` maps a copy ``_branch_copies`` or ``_through_lets`` made to the kernel's own statement."""
    from tileagent.compiler.lower.barriers import shared_effects

    gather = row_gather(s) if stages > 1 else None
    if gather is not None:  # the loop's own variables are no values of the pipeline's iterations
        if not _fixed_in_loop(substitute(gather.exprs, {v: 0 for v in s.vars}), body):
            return False
    elif not isinstance(s, Copy) or s.src.buffer.scope != "global" or s.dst.buffer.scope != "shared" or \
            not _fixed_in_loop(tuple(s.src.starts) + tuple(s.dst.starts), body):
        return False
    originals = originals or {}
    tile, inside = producer_tile(s), set(map(id, walk(tuple(body) + tuple(originals.values()))))
    leaf = set(map(id, leaves(kernel_body)))
    replaced = set(map(id, walk((originals[id(s)],) if id(s) in originals else (s,))))
    for x in walk(kernel_body):
        if x is s or id(x) in replaced or isinstance(x, Alloc):
            continue
        if id(x) not in leaf:  # a loop or if: its own header expressions
            if id(x) not in inside and any(ld.buffer is tile for e in stmt_exprs(x) for ld in loads(e)):
                return False
            continue
        written, read = shared_effects(x)
        if tile in written or (tile in read and id(x) not in inside):
            return False
    return True


def _fixed_in_loop(exprs, body) -> bool:
    """Whether index expressions take the same value in every iteration of a loop with this body, apart from the
    loop variable (which the caller substitutes): they use no variable the body defines and read no buffer it
    writes."""
    from tileagent.compiler.lower.barriers import shared_effects

    defined = [x.var for x in walk(body) if isinstance(x, (Let, For))] + \
        [v for x in walk(body) for v in getattr(x, "vars", ())]
    changed = set()
    for x in leaves(body):
        changed |= shared_effects(x)[0] | {b for b in (getattr(x, "buffer", None),
                                                       getattr(getattr(x, "dst", None), "buffer", None)) if b}
    return not any(depends_on(e, defined) or any(ld.buffer in changed for ld in loads(e)) for e in exprs)


def _invariant_a(g, p: SoftwarePipeline) -> bool:
    """Whether gemm ``g``'s A operand is a shared tile the pipelined loop never changes, read at fixed indices."""
    from tileagent.compiler.lower.barriers import shared_effects

    tile = g.a.buffer
    written = set().union(*(shared_effects(x)[0] for x in p.consumers))
    return tile.scope == "shared" and tile not in p.staged and tile not in written and \
        _fixed_in_loop(tuple(g.a.starts), p.consumers) and not any(depends_on(e, [p.loop.var]) for e in g.a.starts)


def hoisted_a_operands(body, layouts, shared_layouts: dict) -> frozenset:
    """The gemms of ``body``'s software pipelines whose A operand is loaded into registers once, before the loop: a
    shared tile the loop never changes (``_invariant_a``) that fits the rules of ``gemm.hoistable_a``."""
    return frozenset(g for p in walk(body) if isinstance(p, SoftwarePipeline) for g in walk(p.consumers)
                     if isinstance(g, Gemm) and _invariant_a(g, p) and hoistable_a(g, layouts, shared_layouts))


@dataclass(frozen=True)
class WgmmaSchedule:
    """How the pipeline runs one of its top-level wgmma gemms: ``sync`` False when the pipeline's proxy fence and
    barrier already cover every shared write the gemm reads (its fence is a bare wgmma.fence); ``pending`` the
    groups its wait leaves in flight (1: overlapped with the next iteration; the pipeline waits after the loop);
    ``wait`` False when the next consumer is a wgmma gemm accumulating into the same registers, whose wait retires
    this gemm's group too (MLA's Q @ KV^T then Q_pe @ K_pe^T into one accumulator: one drain, not two)."""

    sync: bool
    pending: int
    wait: bool = True


def wgmma_schedules(p: SoftwarePipeline, layouts) -> dict:
    """Gemm -> WgmmaSchedule for the top-level consumers of ``p`` that run on wgmma (see the module docstring)."""
    from tileagent.compiler.instructions.wgmma import WgmmaM64NK16, overlap_enabled
    from tileagent.compiler.lower.barriers import shared_effects
    from tileagent.compiler.lower.smem import buffers_used

    def on_wgmma(x) -> bool:
        choice = layouts.instructions.get(x) if isinstance(x, Gemm) else None
        return choice is not None and isinstance(choice.instruction, WgmmaM64NK16)

    out = {}
    written_before: set = set()  # shared tiles written by the consumers before this one in the iteration
    written = set().union(*(shared_effects(x)[0] for x in p.consumers))
    for n, g in enumerate(p.consumers):
        if on_wgmma(g):
            registers = [g.c.buffer] + ([g.a.buffer] if g.a.buffer.scope == "fragment" else [])  # RS: A too
            alone = all(b not in buffers_used(x) for x in p.consumers if x is not g for b in registers)
            operands_stay = all(b in p.staged or b not in written for b in (g.a.buffer, g.b.buffer))
            overlap = overlap_enabled() and alone and operands_stay
            nxt = p.consumers[n + 1] if n + 1 < len(p.consumers) else None
            chained = not overlap and nxt is not None and on_wgmma(nxt) and nxt.c.buffer is g.c.buffer and \
                not nxt.clear_accum and tuple(nxt.c.starts) == tuple(g.c.starts) and \
                tuple(nxt.c.extents) == tuple(g.c.extents)
            out[g] = WgmmaSchedule(sync=bool(written_before), pending=1 if overlap else 0, wait=not chained)
        written_before |= shared_effects(g)[0]
    return out


def lower_pipeline(lowering, p: SoftwarePipeline) -> list:
    """Thread IR of one SoftwarePipeline (see the module docstring for the schedule)."""
    if p.stages == 1:
        from tileagent.compiler.lower.single_stage import lower_single_stage

        return lower_single_stage(lowering, p)
    ctx = lowering.ctx
    loop, s, v = p.loop, p.stages, p.loop.var
    strides = {b: stage_stride(b, ctx.shared_layouts[b]) for b in p.staged}
    tma = tma_plans(ctx, p)
    if tma is not None:
        return _lower_tma_pipeline(lowering, p, tma, strides)
    start, extent = ctx.rewrite(loop.start, {}), ctx.rewrite(loop.extent, {})
    end = make_binop("+", start, extent)
    lowering.note_loop(v, start, extent, loop.step)

    def producers(iteration, stage) -> list:
        """The producers of ``iteration`` (an int, or a Var bound to an iteration inside the loop's range)."""
        view = ctx.derive(stage_base={b: make_binop("*", stage, n) for b, n in strides.items()}, async_copies=True)
        out = []
        for c in p.producers:
            if isinstance(c, Copy):
                out += lower_copy(view, replace(c, src=substitute(c.src, {v: iteration}),
                                                dst=substitute(c.dst, {v: iteration})))
            else:
                out += lower_gather(view, row_gather(c), {v: iteration})
        return out

    out = hoisted_operands(ctx, p)
    for i in range(s - 1):
        out += guarded(ctx, make_cmp("<", i, extent), producers(make_binop("+", start, i), i))
        out.append(AsyncCommit(p.span))
    rel = make_binop("-", v, start)
    ahead = ctx.var(f"{v.name}_ahead")
    if v in ctx.ranges:  # issued only while ahead < end: inside the loop's range
        ctx.ranges[ahead] = ctx.ranges[v]
    schedules = wgmma_schedules(p, ctx.layouts)
    overlap = any(w.pending for w in schedules.values())
    consumers = ctx.derive(stage_base={b: make_binop("*", make_binop("%", rel, s), n) for b, n in strides.items()},
                           wgmma_schedule=schedules)
    early, rest = early_loads.split(ctx, p.consumers)
    body = lowering.with_context(consumers).body(early)
    body += [AsyncWait(s - 2, p.span)] + ([AsyncProxyFence(p.span)] if schedules else []) + [Barrier(p.span)]
    issue = [Let(ahead, make_binop("+", v, s - 1), p.span)]
    issue += producers(ahead, make_binop("%", make_binop("-", ahead, start), s))
    refill = guarded(ctx, make_cmp("<", make_binop("+", v, s - 1), end), issue) + [AsyncCommit(p.span)]
    work = lowering.with_context(consumers).body(rest)
    # overlapped: refill stage (k - 1) % s only after every thread's wait_group 1 retired iteration k - 1's wgmmas
    body += work + [Barrier(p.span)] + refill if overlap else refill + work
    out.append(For(v, start, extent, loop.step, "serial", tuple(body), {}, loop.span))
    if overlap:  # the last iteration's wgmmas, before anything reads the accumulators (pinned after it)
        from tileagent.compiler.lower.wgmma import accumulator_operand

        out.append(WgmmaWait(0, p.span, operands=tuple(accumulator_operand(consumers, g)
                                                       for g, w in schedules.items() if w.pending)))
    out.append(AsyncWait(0, p.span))
    return out


def tma_plans(ctx, p: SoftwarePipeline) -> list | None:
    """(entry, TmaPlan) per producer of ``p`` when every one can be a TMA load (``compiler.lower.tma``), else None
    (the pipeline keeps cp.async; each copy's instruction notes say why not)."""
    from tileagent.compiler.instructions.tma import pipeline_uses_tma
    from tileagent.compiler.lower.tma import tile_plan

    if getattr(ctx, "tma", None) is None or not pipeline_uses_tma(p.body):
        return None
    for c in p.producers:
        if not isinstance(c, Copy):
            ctx.note_instruction(c, "no TMA: a row gather (cp.async)")
            return None

    view = ctx.derive(stage_base={b: 0 for b in p.staged})
    plans = []
    for c in p.producers:
        entry, plan = tile_plan(view, c)
        if entry is None:
            ctx.note_instruction(c, f"no TMA: {plan}")
            return None
        plans.append((entry, plan))
    return plans


def _lower_tma_pipeline(lowering, p: SoftwarePipeline, plans, strides: dict) -> list:
    """The pipeline with TMA producers: one mbarrier per stage instead of cp.async groups (module docstring)."""
    from tileagent.compiler.lower.barriers import shared_effects
    from tileagent.compiler.lower.tma import issue, wait

    ctx = lowering.ctx
    loop, s, v = p.loop, p.stages, p.loop.var
    start, extent = ctx.rewrite(loop.start, {}), ctx.rewrite(loop.extent, {})
    end = make_binop("+", start, extent)
    lowering.note_loop(v, start, extent, loop.step)
    state = ctx.tma
    first = state.take_barriers(s)
    ws = ctx.ws if ctx.ws is not None and ctx.ws.pipeline is p else None
    for c, (entry, plan) in zip(p.producers, plans):
        ctx.note_instruction(c, entry.describe_plan(plan, c.src.buffer.dtype) + f", {s} stages" +
                             (", issued by a producer warpgroup (warp-specialized)" if ws else ""))
    if ws is not None:
        return _lower_ws_pipeline(lowering, p, plans, strides, first, ws)
    out, done, count_execution = earlier_iterations(ctx, p)

    def producers(iteration, count) -> list:
        """Thread 0 issues the producers of ``iteration``, the ``count``-th of the pipeline's barriers' uses."""
        view, copies = _stage_copies(ctx, p, plans, strides, iteration, count, v)
        return issue(view, copies, make_binop("+", first, make_binop("%", count, s)))

    out += hoisted_operands(ctx, p)
    for i in range(s - 1):
        out += guarded(ctx, make_cmp("<", i, extent), producers(make_binop("+", start, i), make_binop("+", done, i)))
    count = make_binop("+", done, make_binop("-", v, start))
    stage = make_binop("%", count, s)
    ahead = ctx.var(f"{v.name}_ahead")
    if v in ctx.ranges:
        ctx.ranges[ahead] = ctx.ranges[v]
    schedules = wgmma_schedules(p, ctx.layouts)
    overlap = any(w.pending for w in schedules.values())
    # overlapped wgmma and consumers that write no shared memory: the stages' data is ordered by the mbarriers, the
    # refill by the barrier after the wgmma waits, and every generic write the gemms read happened before the loop:
    # one proxy fence and barrier before the loop replace the one at the top of every iteration
    lean = overlap and not any(shared_effects(x)[0] for x in p.consumers)
    if lean:
        out += [AsyncProxyFence(p.span), Barrier(p.span)]
    consumers = ctx.derive(stage_base={b: make_binop("*", stage, n) for b, n in strides.items()},
                           wgmma_schedule=schedules)
    early, rest = early_loads.split(ctx, p.consumers)
    body = lowering.with_context(consumers).body(early)
    body += wait(ctx, make_binop("+", first, stage), make_binop("%", make_binop("//", count, s), 2), p.span)
    if not lean:
        body += ([AsyncProxyFence(p.span)] if schedules else []) + [Barrier(p.span)]
    issue_next = [Let(ahead, make_binop("+", v, s - 1), p.span)] + producers(ahead, make_binop("+", count, s - 1))
    refill = guarded(ctx, make_cmp("<", make_binop("+", v, s - 1), end), issue_next)
    work = lowering.with_context(consumers).body(rest)
    body += work + [Barrier(p.span)] + refill if overlap else refill + work
    out.append(For(v, start, extent, loop.step, "serial", tuple(body), {}, loop.span))
    if overlap:  # as in the cp.async pipeline: the accumulators pinned after the wait
        from tileagent.compiler.lower.wgmma import accumulator_operand

        out.append(WgmmaWait(0, p.span, operands=tuple(accumulator_operand(consumers, g)
                                                       for g, w in schedules.items() if w.pending)))
    return out + count_execution(extent)


def _stage_copies(ctx, p: SoftwarePipeline, plans, strides: dict, iteration, count, v, outer=None):
    """The view of ``ctx`` whose staged tiles are at stage ``count % s``, and ``p``'s producers of ``iteration``
    (loop variable ``v`` substituted, and the enclosing loops' variables as ``outer`` maps them) with their TMA
    plans."""
    stage = make_binop("%", count, p.stages)
    view = ctx.derive(stage_base={b: make_binop("*", stage, n) for b, n in strides.items()}, async_copies=True)
    subst = {**(outer or {}), v: iteration}
    return view, [(replace(c, src=substitute(c.src, subst), dst=substitute(c.dst, subst)), pl)
                  for c, (_, pl) in zip(p.producers, plans)]


def _lower_ws_pipeline(lowering, p: SoftwarePipeline, plans, strides: dict, full: int, ws) -> list:
    """The consumers' side of a warp-specialized TMA pipeline; its producer's loop goes to ``ws.producer``
    (``compiler.lower.warp_specialize`` describes both)."""
    from tileagent.compiler.ir.expr import Load, as_expr
    from tileagent.compiler.ir.stmt import Store
    from tileagent.compiler.lower.barriers import shared_effects
    from tileagent.compiler.lower.tma import arrive, issue, wait

    ctx = lowering.ctx
    loop, s, v = p.loop, p.stages, p.loop.var
    start, extent = ctx.rewrite(loop.start, {}), ctx.rewrite(loop.extent, {})
    lowering.note_loop(v, start, extent, loop.step)
    empty = ctx.tma.take_barriers(s, arrivals=ws.consumers // 32)
    state = ctx.tma
    # the last gemm late, beside the softmax; split stages: the tiles only it reads (V) fill and free on barriers of
    # their own, so a stage of the others (K) is free as soon as the first gemm retired (``defer_gemm.late_producers``)
    deferred, late, anchored = defer_gemm.for_ws(ws, ctx.kernel, ctx.layouts)
    if late is not None:
        full_late = state.take_barriers(s)
        empty_late = state.take_barriers(s, arrivals=ws.consumers // 32)
    # inside a loop (ws.path) both sides count the iterations of earlier executions in a phase slot of their own
    # registers, and the producer runs the enclosing loops too, on variables of its own
    slot = state.take_slot() if ws.path else None

    def executions_before(side: str) -> tuple:
        if slot is None:
            return [], 0
        done = ctx.var(f"{v.name}_{side}done")
        return [Let(done, Load(state.phases, (as_expr(slot),), state.phases.dtype), p.span)], done

    def count_executions(done, n) -> list:
        if slot is None:
            return []
        return [Store(state.phases, (as_expr(slot),), make_binop("+", done, make_call("max", n, 0)), p.span)]

    # the producer: its own loop variables, one thread
    outer = {x.var: ctx.var(f"{x.var.name}_p") for x in ws.path if isinstance(x, For)}
    outer.update({y.var: ctx.var(f"{y.var.name}_p") for ys in ws.path_lets.values() for y in ys})  # tile coordinates
    pv = ctx.var(f"{v.name}_p")
    for old_var, new_var in [*outer.items(), (v, pv)]:
        if old_var in ctx.ranges:
            ctx.ranges[new_var] = ctx.ranges[old_var]
    pstart, pextent = ctx.rewrite(loop.start, outer), ctx.rewrite(loop.extent, outer)
    head, pdone = executions_before("p")
    pcount = make_binop("+", pdone, make_binop("-", pv, pstart))  # (0 + x folds to x)
    pstage = make_binop("%", pcount, s)
    view, copies = _stage_copies(ctx, p, plans, strides, pv, pcount, v, outer)
    free_parity = make_binop("^", make_binop("%", make_binop("//", pcount, s), 2), 1)

    def fill(copies_, empty_, full_) -> list:
        return wait(ctx, make_binop("+", empty_, pstage), free_parity, p.span, for_free_stage=True) + \
            issue(view, copies_, make_binop("+", full_, pstage), fence=False, issuer=None)

    if late is None:
        loads_ = fill(copies, empty, full)
    else:
        loads_ = fill([c for i, c in enumerate(copies) if i not in late], empty, full) + \
            fill([c for i, c in enumerate(copies) if i in late], empty_late, full_late)
    producer = head + [For(pv, pstart, pextent, loop.step, "serial", tuple(loads_), {}, loop.span)] + \
        count_executions(pdone, pextent)
    for x in reversed(ws.path):
        producer = [Let(outer[y.var], ctx.rewrite(y.value, outer), y.span) for y in ws.path_lets.get(id(x), ())] + \
            producer
        if isinstance(x, For):
            producer = [For(outer[x.var], ctx.rewrite(x.start, outer), ctx.rewrite(x.extent, outer), x.step, "serial",
                            tuple(producer), {}, x.span)]
        else:
            producer = [If(ctx.rewrite(x.cond, outer), tuple(producer), (), x.span)]
    ws.producer = producer

    # the consumers
    out, done = executions_before("c")
    out += hoisted_operands(ctx, p)
    local = make_binop("-", v, start)
    count = make_binop("+", done, local)
    stage = make_binop("%", count, s)
    schedules = wgmma_schedules(p, ctx.layouts)
    if deferred is not None:
        schedules = {**schedules, **{g: WgmmaSchedule(sync=False, pending=0, wait=False)
                                     for g in (deferred.first, deferred.second)}}
    overlap = deferred is None and any(w.pending for w in schedules.values())
    # consumers that write no shared memory in the loop need no barrier in it: the stages' data is ordered by the
    # full mbarriers, their reuse by the per-warp releases, and every generic write a gemm reads happened before the
    # loop (one proxy fence and barrier there). Without a barrier per iteration the consumer warpgroups run apart, one's
    # softmax beside another's gemm; with shared writes in the loop, a fence and barrier open each iteration
    lean = not any(shared_effects(x)[0] for x in p.consumers)
    if lean:
        out += [AsyncProxyFence(p.span), Barrier(p.span)]

    def on_stage(x):
        return ctx.derive(stage_base={b: make_binop("*", x, n) for b, n in strides.items()}, wgmma_schedule=schedules)

    consumers = on_stage(stage)
    # (a deferred gemm's schedule lowers the consumers itself, in its own order)
    early, rest = early_loads.split(ctx, p.consumers) if deferred is None else ((), p.consumers)
    body = lowering.with_context(consumers).body(early)
    body += wait(ctx, make_binop("+", full, stage), make_binop("%", make_binop("//", count, s), 2), p.span)
    if not lean:
        body += ([AsyncProxyFence(p.span)] if schedules else []) + [Barrier(p.span)]
    previous = defer_gemm.previous_stage(count, s)
    loop_start, loop_extent = start, extent
    last = make_binop("%", make_binop("+", done, make_binop("-", extent, 1)), s)
    if deferred is not None:  # iteration 0 peeled: no branch around the wgmmas (ptxas would drain them there)
        def release_early():  # split stages: the early tiles' stage, once the first gemm retired
            return [] if late is None else arrive(ctx, make_binop("+", empty, stage), p.span)

        def wait_late(c):  # split stages: the late tiles of the iteration of count c, before the deferred gemm
            return [] if late is None else wait(ctx, make_binop("+", full_late, make_binop("%", c, s)),
                                                make_binop("%", make_binop("//", c, s), 2), p.span)

        peeled = [Let(v, start, p.span)] + body + \
            defer_gemm.first_iteration(lowering, deferred, consumers, release_early())
        out.append(If(make_cmp(">", extent, 0), tuple(peeled), (), p.span))
        loop_start, loop_extent = make_binop("+", start, 1), make_binop("-", extent, 1)
        # then it releases the previous stage (its late tiles) once its wait retired the deferred gemm
        anchor_at = (state.barriers, state.take_word()) if anchored else None
        body += defer_gemm.iteration(lowering, deferred, consumers, on_stage(previous),
                                     arrive(ctx, make_binop("+", empty if late is None else empty_late, previous),
                                            p.span), release_early(), wait_late(make_binop("-", count, 1)), anchor_at)
    elif overlap:  # this thread's wait_group 1 retired iteration k - 1's wgmmas: their stage is free
        body += lowering.with_context(consumers).body(rest)
        body.append(If(make_cmp(">", local, 0), tuple(arrive(ctx, make_binop("+", empty, previous), p.span)), (),
                       p.span))
    else:
        body += lowering.with_context(consumers).body(rest)
        body += arrive(ctx, make_binop("+", empty, stage), p.span)
    out.append(For(v, loop_start, loop_extent, loop.step, "serial", tuple(body), {}, loop.span))
    if deferred is not None:  # the last iteration's deferred gemm; inside a loop, then its stage for the producer
        out += defer_gemm.after_loop(
            lowering, deferred, on_stage(last), extent,
            [] if slot is None else arrive(ctx, make_binop("+", empty if late is None else empty_late, last), p.span),
            wait_late(make_binop("+", done, make_binop("-", extent, 1))))
    elif overlap:
        from tileagent.compiler.lower.wgmma import accumulator_operand

        out.append(WgmmaWait(0, p.span, operands=tuple(accumulator_operand(consumers, g)
                                                       for g, w in schedules.items() if w.pending)))
        if slot is not None:  # the last iteration's stage, for the producer's next execution
            out.append(If(make_cmp(">", extent, 0), tuple(arrive(ctx, make_binop("+", empty, last), p.span)), (),
                          p.span))
    return out + count_executions(done, extent)


def hoisted_operands(ctx, p: SoftwarePipeline) -> list:
    """The A operands of ``p``'s gemms that the loop never changes (flash attention's Q): into registers once, before
    the loop (``gemm.hoist_a_operand``)."""
    return [x for g in walk(p.consumers) if isinstance(g, Gemm) and g in ctx.hoisted for x in hoist_a_operand(ctx, g)]


def earlier_iterations(ctx, p: SoftwarePipeline) -> tuple:
    """(statements before the loop, c0, after): c0 the iterations earlier executions of ``p``'s loop ran, which set
    its mbarriers' phases; ``after(extent)`` the statements after the loop that add this execution's. A loop that may
    run more than once per block (inside another loop) keeps the count in a phase slot of the TMA state; one that runs
    once per block starts from 0 and counts nothing."""
    from tileagent.compiler.ir.expr import Load, as_expr
    from tileagent.compiler.ir.stmt import Store

    if ctx.plan is not None and _inside_loop(ctx.plan.body or (), p) is False:
        return [], 0, lambda extent: []
    state = ctx.tma
    slot = state.take_slot()
    done = ctx.var(f"{p.loop.var.name}_done")

    def after(extent) -> list:
        return [Store(state.phases, (as_expr(slot),), make_binop("+", done, make_call("max", extent, 0)), p.span)]

    return [Let(done, Load(state.phases, (as_expr(slot),), state.phases.dtype), p.span)], done, after


def _inside_loop(body, p, depth: int = 0) -> bool | None:
    """Whether SoftwarePipeline ``p`` lies inside a loop of ``body`` (a T.serial / T.Pipelined loop or a ``while``:
    so it may run more than once per block); None when ``p`` is not in ``body`` (the caller then assumes it may)."""
    for x in body:
        if x is p:
            return depth > 0
        inner = depth + (1 if isinstance(x, (For, While, SoftwarePipeline)) else 0)
        for name in ("body", "then_body", "else_body"):
            found = _inside_loop(getattr(x, name, ()) or (), p, inner)
            if found is not None:
                return found
    return None


__all__ = ["SoftwarePipeline", "WgmmaSchedule", "fit_pipelines", "lower_pipeline", "plan_pipelines", "stage_stride"]
