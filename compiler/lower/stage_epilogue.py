"""GEMM epilogues staged through shared memory (sm_90a): the accumulator leaves a block in 16-byte row runs.

In: a checked PrimFunc and the Target (before layout inference). Out: the same function where, in each T.Kernel
that runs a T.gemm inside a T.Pipelined loop on a target with wgmma and TMA in use (``instructions.tma.usable``),
every ``T.copy`` of that gemm's accumulator fragment to global memory that follows the loop in the same body becomes
two copies through a new shared tile of the destination's dtype with an XOR-swizzled layout: fragment -> shared (the
cast happens here, as the direct copy casts), then shared -> global (each thread stores 16-byte runs of a row).

Why: the wgmma accumulator gives a thread two neighbouring values per 8 columns, so a direct copy stores 4 bytes a
thread and a warp instruction touches eight rows. On the H200 a 128 x 256 fp16 tile stored that way cost 30 us of
a 4096^3 GEMM's 210 (the time at K=0 of a fit over K, 7 us without the store); staged, the GEMM ran 8% faster, and
one block per SM walking the tiles (T.Persistent) 6-10% (BENCHMARKS.md, round 2 session 21). The swizzle spreads a
warp's eight rows over distinct banks.

Guarantees: values are unchanged, element for element (the same cast, and the second copy drops what falls outside
the destination as the direct one did). Where the loop is at the kernel's top level, its stages are dead after it
and the tile reuses their bytes (``compiler.lower.smem`` puts a barrier before the reuse): staged only while all the
stages hold the tile, so the kernel's shared memory and pipeline depth do not change. Where the loop is inside
serial loops and ifs (a ``T.Persistent`` tile loop, whose producer refills the stages while the consumers store),
the tile gets bytes of its own: staged only while it fits beside the pipeline at one stage less than written (at
least 2; ``plan_pipelines`` then fits the stages). Kernels of per-thread code are left as written.
``TILEAGENT_STAGE_EPILOGUE=0`` turns it off for the process.
"""

from __future__ import annotations

import os
from dataclasses import replace

from tileagent.compiler.ir.stmt import Alloc, AnnotateLayout, Buffer, Copy, For, Gemm, If, Kernel, PrimFunc, Region
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.language.annotations import SwizzledLayout
from tileagent.compiler.lower.smem import buffers_used

ENV = "TILEAGENT_STAGE_EPILOGUE"
VECTOR_BYTES = 16
RESERVED_BYTES = 2048  # what a tile of its own leaves free: mbarriers, the arena's alignment slack


def enabled() -> bool:
    """Whether staging is on for this process (``TILEAGENT_STAGE_EPILOGUE=0`` turns it off)."""
    return os.environ.get(ENV, "1").strip() != "0"


def stage_epilogues(func: PrimFunc, target) -> PrimFunc:
    """``func`` with its accumulator epilogues staged (see the module docstring); ``func`` itself when none is."""
    from tileagent.compiler.instructions.tma import usable

    if not (enabled() and target.has("wgmma") and usable(target)):
        return func
    body = tuple(_kernel(s, target) if isinstance(s, Kernel) else s for s in func.body)
    return func if all(a is b for a, b in zip(body, func.body)) else replace(func, body=body)


def _kernel(k: Kernel, target) -> Kernel:
    if k.thread_vars:
        return k
    names = {s.buffer.name for s in walk(k.body) if isinstance(s, Alloc)}
    allocs: list = []
    body = _in_body(k.body, k, target, names, allocs, top=True)
    return replace(k, body=tuple(allocs) + body) if allocs else k


def _in_body(stmts: tuple, k: Kernel, target, names: set, allocs: list, top: bool) -> tuple:
    """``stmts`` with the copies after its pipelined gemm loop staged; the loop is looked for in ``stmts``, else
    inside its serial loops and ifs (a ``T.Persistent`` tile loop)."""
    loop = next((n for n, s in enumerate(stmts) if isinstance(s, For) and s.kind == "pipelined"
                 and any(isinstance(g, Gemm) for g in walk(s.body))), None)
    if loop is None:
        out = []
        for s in stmts:
            if isinstance(s, For) and s.kind == "serial":
                s = replace(s, body=_in_body(s.body, k, target, names, allocs, top=False))
            elif isinstance(s, If) and not s.else_body:
                s = replace(s, then_body=_in_body(s.then_body, k, target, names, allocs, top=False))
            out.append(s)
        return stmts if all(a is b for a, b in zip(out, stmts)) else tuple(out)
    pipelined = stmts[loop]
    stages = max(1, int(pipelined.annotations.get("num_stages") or 1))
    accumulators = {g.c.buffer for g in walk(pipelined.body) if isinstance(g, Gemm)}
    piped = {b for b in buffers_used(pipelined) if b.scope == "shared"}
    staged_bytes = sum(b.static_bytes() for b in piped)
    if top:  # the stages are dead after the loop: the tile reuses their bytes
        room = 0 if any(piped & buffers_used(s) for s in stmts[loop + 1:]) else staged_bytes * stages
    else:  # the producer refills the stages while the consumers store: a tile of its own, at most one stage less
        others = sum(n for b, n in _footprint(k).items() if b not in piped)
        room = target.shared_bytes - RESERVED_BYTES - others - staged_bytes * max(2, stages - 1)
    body = list(stmts[:loop + 1])
    for s in stmts[loop + 1:]:
        tile = _staged_tile(s, accumulators, names)
        if tile is None or tile.static_bytes() > room:
            body.append(s)
            continue
        room -= 0 if top else tile.static_bytes()
        names.add(tile.name)
        allocs.append(Alloc(tile, span=s.span))
        whole = Region.whole(tile)
        body += [AnnotateLayout(((tile, SwizzledLayout(tile)),), span=s.span),
                 Copy(s.src, whole, span=s.span), Copy(whole, s.dst, span=s.span)]
    return tuple(body) if len(body) != len(stmts) else stmts


def _footprint(k: Kernel) -> dict:
    """Shared buffer -> the bytes it takes, all the stages of the pipelined loop that fills it counted."""
    out = {s.buffer: s.buffer.static_bytes() for s in walk(k.body)
           if isinstance(s, Alloc) and s.buffer.scope == "shared"}
    for loop in walk(k.body):
        if isinstance(loop, For) and loop.kind == "pipelined":
            stages = max(1, int(loop.annotations.get("num_stages") or 1))
            for b in buffers_used(loop):
                if b in out:
                    out[b] = max(out[b], b.static_bytes() * stages)
    return out


def _staged_tile(s, accumulators: set, names: set) -> Buffer | None:
    """The shared tile ``s`` is staged through, or None when it is not an accumulator's copy to global memory that
    staging helps: a 2-D tile whose rows are whole 16-byte vectors of the destination's dtype."""
    if not (isinstance(s, Copy) and s.src.buffer in accumulators and s.dst.buffer.scope == "global"):
        return None
    shape = s.src.matrix_shape()
    if len(shape) != 2 or s.src.extents != tuple(s.src.buffer.shape) or s.dst.tile_shape() != shape:
        return None
    dtype = s.dst.buffer.dtype
    if (shape[1] * dtype.bytes) % VECTOR_BYTES or shape[1] * dtype.bytes < 2 * VECTOR_BYTES:
        return None
    name, n = f"{s.src.buffer.name}_staged", 1
    while name in names:
        name, n = f"{s.src.buffer.name}_staged{n}", n + 1
    return Buffer(name, shape, dtype, "shared", s.span)

