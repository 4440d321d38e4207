"""Shared-memory reads of a thread's own copied elements served from the registers the copy went through.

In: a lowered ``DeviceModule`` (thread IR, after ``compiler.lower.shared_vectors``). Out: the same module where an
unrolled loop that fills a shared buffer S from global memory (``for r in T.unroll(n): S[e(r):+w] = G[...:+w]``,
a T.copy's lowering) loads each run into a register array R first (``R[r * w:+w] = G[...]; S[e(r):+w] = R[r *
w:+w]``), and a later unrolled loop of the same trip count that reads ``S[e(r'):+w]`` into registers (a T.Parallel
over the tile on the copy's layout, after ``shared_vectors``) reads ``R[r' * w:+w]`` instead.
Why: TileLang's LayerNorm forward copies X into shared memory and reads every thread's own elements back; NVVM
forwards TileLang's stores to those loads (its code has no barrier between them), ours went through shared memory and
the barrier after the copies: 0.0600 ms against TileLang's 0.0506 on an H100, 0.0544 with X kept in registers
(BENCHMARKS.md, round 2 session 31).
Guarantees (the rewrite applies only when all hold, else the code is unchanged):

- the filling loop is a sibling before the reading loop in one statement list (both run under the same control, in
  order, in every thread), its body exactly one ``VecCopy`` from a global buffer into S, and nothing between them
  (or in the reading loop before the read) writes S: every statement there is of a kind known to write only what
  it names (``_WRITERS``) and names another buffer, or writes no memory (``_QUIET``); any other kind stops the search;
- the read is a ``VecCopy`` into a register array, at the top level of the reading loop's body, of the same width,
  at the filling index with the reading loop's variable for the filling loop's (``same_expr``): element for element
  what this thread wrote, so R holds exactly the bytes S holds there;
- R costs at most ``BUDGET_BYTES`` a thread in a kernel (registers), first come first served; the copy moves runs of
  ``RUN_BYTES`` (16-byte vectors: the measured case; the RMSNorm example's 4-byte runs are left as they were).
``TILEAGENT_FORWARD_SHARED=0`` switches it off.
"""

from __future__ import annotations

import os
from dataclasses import replace

from tileagent.compiler.ir.expr import as_expr, make_binop
from tileagent.compiler.ir.simplify import same_expr, static_int
from tileagent.compiler.ir.stmt import AtomicAdd, Buffer, For, If, Let, NamedBarrier, Store, While
from tileagent.compiler.ir.visit import substitute
from tileagent.compiler.tir import (AsyncCommit, AsyncCopy, AsyncProxyFence, AsyncWait, Barrier, BulkStore,
                                    BulkStoreWait, Declare, DeviceModule, VecAtomicAdd, VecCopy)

BUDGET_BYTES = 64  # registers a thread may spend on forwarded runs (16 words)
RUN_BYTES = 16  # the copies' runs it takes: 16-byte vectors, as measured (narrower runs: not measured, unchanged)
_WRITERS = {Store: "buffer", AtomicAdd: "buffer", VecCopy: "dst", VecAtomicAdd: "dst", AsyncCopy: "dst"}
_QUIET = (Let, Declare, Barrier, NamedBarrier, AsyncCommit, AsyncWait, AsyncProxyFence, BulkStore, BulkStoreWait)


def enabled() -> bool:
    """Whether the rewrite runs (``TILEAGENT_FORWARD_SHARED=0`` switches it off, for A/B runs)."""
    return os.environ.get("TILEAGENT_FORWARD_SHARED", "").strip() != "0"


def forward_shared_reads(module: DeviceModule) -> DeviceModule:
    """``module`` with the reads described in the module docstring forwarded from registers."""
    kernels = []
    for k in module.kernels:
        state = {"budget": BUDGET_BYTES, "n": 0}
        kernels.append(replace(k, body=_stmts(tuple(k.body), state)))
    return replace(module, kernels=tuple(kernels))


def _stmts(stmts: tuple, state) -> tuple:
    out = []
    for s in stmts:  # nested bodies first
        for name in ("body", "then_body", "else_body"):
            inner = getattr(s, name, None)
            if isinstance(inner, tuple) and inner:
                new = _stmts(inner, state)
                if new is not inner:
                    s = replace(s, **{name: new})
        out.append(s)
    k = 0
    while k < len(out):
        fill = _fill(out[k])
        k += (_forward(out, k, fill, state) if fill is not None else 0) or 1
    return stmts if len(out) == len(stmts) and all(a is b for a, b in zip(out, stmts)) else tuple(out)


def _unit(s) -> tuple:
    """(loop variable or None, trips, body) of ``s``: an unrolled loop of static trip count from 0 in steps of 1, else
    ``s`` alone as one trip (a loop of one trip is no loop after lowering)."""
    if isinstance(s, For) and s.kind == "unroll" and static_int(s.extent) is not None and static_int(s.start) == 0 \
            and static_int(s.step) == 1:
        return s.var, static_int(s.extent), s.body
    return None, 1, (s,)


def _rebuilt(s, body: tuple) -> tuple:
    """``s`` (a statement ``_unit`` took apart) with ``body``: the loop with that body, or the statements alone."""
    return (replace(s, body=body),) if _unit(s)[0] is not None else body


def _fill(s):
    """(loop variable, trips, the VecCopy) when ``s`` is (an unrolled loop whose body is) one VecCopy from a global
    buffer into a shared one of the same dtype."""
    var, trips, body = _unit(s)
    c = body[0] if len(body) == 1 else None
    if isinstance(c, VecCopy) and c.dst.scope == "shared" and c.src.scope == "global" and c.dst.dtype == c.src.dtype \
            and c.width * c.dst.dtype.bytes == RUN_BYTES:
        return var, trips, c
    return None


def _forward(out: list, k: int, fill, state) -> int:
    """Rewrite ``out[k]`` (the filling ``fill``) and the reads after it in place; the number of statements now where
    ``out[k]`` was (0: nothing forwarded)."""
    var, trips, copy = fill
    w, shared = copy.width, copy.dst
    nbytes = trips * w * shared.dtype.bytes
    if nbytes > state["budget"]:
        return 0
    reads = []  # (index in out, its loop variable, the VecCopies to forward)
    for j in range(k + 1, len(out)):
        tvar, ttrips, body = _unit(out[j])
        matched, clean = [], True
        if ttrips == trips and (tvar is None) == (var is None):
            want = substitute(as_expr(copy.dst_index), {var: tvar}) if var is not None else as_expr(copy.dst_index)
            for x in body:
                if clean and isinstance(x, VecCopy) and x.src is shared and x.dst.scope == "local" and \
                        x.width == w and same_expr(as_expr(x.src_index), want):
                    matched.append(x)
                elif _may_write(x, shared):
                    clean = False
        elif _may_write(out[j], shared):
            clean = False
        if matched:
            reads.append((j, tvar, matched))
        if not clean:
            break
    if not reads:
        return 0
    state["budget"] -= nbytes
    state["n"] += 1
    regs = Buffer(f"{shared.name}_fwd{state['n']}", (trips * w,), shared.dtype, "local")
    def at(v):  # the register run of iteration v (None: the single trip)
        return make_binop("*", v, w) if v is not None else as_expr(0)

    for j, tvar, matched in reversed(reads):
        body = tuple(replace(x, src=regs, src_index=at(tvar)) if x in matched else x for x in _unit(out[j])[2])
        out[j:j + 1] = _rebuilt(out[j], body)
    filled = (Declare(regs, span=copy.span),) + _rebuilt(out[k], (
        VecCopy(regs, at(var), copy.src, copy.src_index, w, copy.span, copy.eviction_policy),
        VecCopy(shared, copy.dst_index, regs, at(var), w, copy.span)))
    out[k:k + 1] = filled
    return len(filled)


def _may_write(s, buf: Buffer) -> bool:
    """Whether statement ``s`` (at any depth) may write ``buf``: a writer naming it, or a kind not known here."""
    if isinstance(s, _QUIET):
        return False
    field = _WRITERS.get(type(s))
    if field is not None:
        return getattr(s, field) is buf
    if isinstance(s, (For, If, While)):
        return any(_may_write(x, buf) for name in ("body", "then_body", "else_body")
                   for x in (getattr(s, name, ()) or ()))
    return True


__all__ = ["BUDGET_BYTES", "forward_shared_reads"]
