"""Barrier insertion: put ``Barrier()`` between tile-level statements wherever shared memory written by one is
read or rewritten by a later one, or read by one and then overwritten.

In: a T.Kernel body of the tile IR (before lowering). Out: the same body with ``tir.Barrier`` statements added.
Guarantees: for every pair of statements A before B (also across loop iterations: B early in the body, A late)
where A writes a shared buffer that B reads or writes, or A reads one that B writes, a barrier runs between them.
Barriers are only placed at block-uniform points (between statements of kernel, loop and uniform-if bodies).
Statements are the unit: the threads of one tile op never race with each other on their own tile. A
``SoftwarePipeline`` (``compiler.lower.pipeline``) brings its own barrier at the top of every iteration; only its
consumers are analysed inside. A tile op's reads and writes are its ``effects`` (``compiler.tileops``).
"""

from __future__ import annotations

from dataclasses import replace

from tileagent.compiler.ir.stmt import AtomicAdd, For, If, Let, Parallel, Store
from tileagent.compiler.ir.visit import loads
from tileagent.compiler.lower.pipeline import SoftwarePipeline
from tileagent.compiler.tileops import op_for
from tileagent.compiler.tir import Barrier


def insert_barriers(body: tuple) -> tuple:
    out, _ = _body(body, (frozenset(), frozenset()))
    return out


def _body(body, state):
    written, read = state
    out = []
    for s in body:
        if isinstance(s, SoftwarePipeline):
            w, r = shared_effects(s)
            if (r & written) or (w & read) or (w & written):
                out.append(Barrier())
            # every iteration starts with a barrier (lower_pipeline); the staged tiles are only read in it
            consumers, (written, read) = _body(s.consumers, (frozenset(), frozenset()))
            out.append(replace(s, consumers=tuple(consumers)))
            written = written | frozenset(s.staged)
            continue
        if isinstance(s, For):
            _, after_one = _body(s.body, (written, read))  # what one iteration leaves for the next one
            inner, (written, read) = _body(s.body, (written | after_one[0], read | after_one[1]))
            out.append(replace(s, body=tuple(inner)))
            continue
        if isinstance(s, If):
            then_body, st1 = _body(s.then_body, (written, read))
            else_body, st2 = _body(s.else_body, (written, read))
            out.append(replace(s, then_body=tuple(then_body), else_body=tuple(else_body)))
            written, read = st1[0] | st2[0], st1[1] | st2[1]
            continue
        w, r = shared_effects(s)
        if (r & written) or (w & read) or (w & written):
            out.append(Barrier())
            written, read = frozenset(), frozenset()
        out.append(s)
        written, read = written | w, read | r
    return out, (written, read)


def shared_effects(s) -> tuple[frozenset, frozenset]:
    """(shared buffers written, shared buffers read) by one tile-level statement, its nested body included."""
    w, r = set(), set()
    _effects(s, w, r)
    return frozenset(w), frozenset(r)


def _effects(s, w, r):
    op = op_for(s)
    if op is not None:  # a tile op says what it touches
        effects = op.effects(s)
        for buf in effects.writes:
            _add(w, buf)
        for buf in effects.reads:
            _add(r, buf)
    elif isinstance(s, (Store, AtomicAdd)):
        _add(w, s.buffer)
        for e in tuple(s.indices) + (s.value,):
            _reads(e, r)
    elif isinstance(s, Let):
        _reads(s.value, r)
    elif isinstance(s, (Parallel, For, SoftwarePipeline)):
        for x in s.body:
            _effects(x, w, r)
    elif isinstance(s, If):
        _reads(s.cond, r)
        for x in s.then_body + s.else_body:
            _effects(x, w, r)


def _add(target, buf):
    if buf.scope == "shared":
        target.add(buf)


def _reads(e, r):
    for ld in loads(e):
        _add(r, ld.buffer)
