"""Bank-conflict padding of staging tiles: a shared tile that only carries a fragment out to global memory.

In: one kernel's planned body (tile IR), the fragments' layouts and the shared layouts already chosen (gemm operands,
annotations, TMA destinations). Out: ``{buffer: Layout.row_major(shape, pad)}`` for the tiles to pad (often none).
Which: a shared tile of static shape with no layout of its own, every access a whole-tile ``T.copy`` outside any
loop, written from fragments and read into global memory (an epilogue's ``T.copy(acc, O_s); T.copy(O_s, O[...])``).
Its rows stay contiguous (the bulk store copies them row by row; vector runs read them as before), and each
fragment-to-tile store instruction of a warp is counted in shared-memory wavefronts (a store of w bytes a thread is
served in phases of 128 bytes; a phase costs the most distinct 4-byte words any bank holds); the pad (a multiple of
16 bytes a row, up to 128) with the fewest wavefronts, the smallest on ties, is taken when it beats none.
Why: wgmma's accumulator puts a warp's 8 rows x 16 bytes in one store; rows of 256 bytes start on the same bank, so
that store takes 8 wavefronts. Flash attention's epilogue (128 x 128 fp16, H100, clock64 stamps of each block's
phases) spent 2,185 cycles a block storing O_s (of 90,500); padded, 432 (BENCHMARKS.md, round 2 session 36).
Guarantees: only such tiles change; a pad keeps every row start on 16 bytes (bulk stores need it). The caller
adopts the padding only where the kernel's shared memory still fits (``passes._plan_shared``).
"""

from __future__ import annotations

import math

import numpy as np

from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import Copy, For
from tileagent.compiler.layout.layout import Layout

MAX_PAD_BYTES = 128
WORDS = 1 << 30  # more 4-byte words than any shared address has


def staging_pads(body: tuple, fragments: dict, shared: dict) -> dict:
    """The staging tiles of ``body`` to pad and their padded layouts (see the module docstring)."""
    uses: dict = {}
    for s, looped in _statements(body):
        for buf in _shared_mentioned(s):
            uses.setdefault(buf, []).append((s, looped))
    out = {}
    for buf, stmts in uses.items():
        shape = tuple(static_int(n) for n in buf.shape)
        if buf in shared or len(shape) < 2 or None in shape:
            continue
        writes = [s for s, looped in stmts if _whole_copy(s, buf, "dst") and s.src.buffer.scope == "fragment"
                  and not looped]
        reads = [s for s, looped in stmts if _whole_copy(s, buf, "src") and s.dst.buffer.scope == "global"
                 and not looped]
        if not writes or len(writes) + len(reads) != len(stmts) or not reads:
            continue
        frags = [fragments.get(s.src.buffer) for s in writes]
        if any(f is None or tuple(f.shape) != shape for f in frags):
            continue
        elem = buf.dtype.bytes
        costs = {pad: sum(store_wavefronts(f, Layout.row_major(shape, pad), elem) for f in frags)
                 for pad in range(0, MAX_PAD_BYTES // elem + 1, max(1, 16 // elem))}
        best = min(costs, key=lambda p: (costs[p], p))
        if costs[best] < costs[0]:
            out[buf] = Layout.row_major(shape, best)
    return out


def store_wavefronts(frag, layout: Layout, elem: int) -> int:
    """Shared-memory wavefronts of storing fragment ``frag`` into a tile laid out as ``layout`` (elements of
    ``elem`` bytes), one store per run of consecutive registers (up to 16 bytes), summed over its warps."""
    run = 1
    while run * 2 <= frag.vector_width and run * 2 * elem <= 16:
        run *= 2
    table = frag.index_table()[: frag.threads_used, ::run]
    addresses = (table @ np.array(layout._strides())) * elem
    inside = (table < np.array(frag.shape)).all(axis=-1)
    lanes = -len(table) % 32  # the last warp's missing lanes, as lanes outside
    addresses = np.pad(addresses, ((0, lanes), (0, 0)))
    inside = np.pad(inside, ((0, lanes), (0, 0)))
    # one store a (warp, register run): rows of 32 lanes
    return _store_cost(addresses.reshape(-1, 32, addresses.shape[1]).transpose(0, 2, 1).reshape(-1, 32),
                       inside.reshape(-1, 32, inside.shape[1]).transpose(0, 2, 1).reshape(-1, 32), run * elem)


def _wavefronts(addresses: list[int], width: int) -> int:
    """Wavefronts of one warp-wide store of ``width`` bytes a lane at these byte addresses: lanes in phases of
    128 bytes; a phase costs the most distinct words that one of the 32 banks holds."""
    return _store_cost(np.array([addresses]), np.ones((1, len(addresses)), bool), width)


def _store_cost(addresses: np.ndarray, inside: np.ndarray, width: int) -> int:
    """Wavefronts of stores (one a row of ``addresses``, its lanes where ``inside``) of ``width`` bytes a lane,
    summed: each store's lanes that take part go in phases of 128 bytes; a phase costs the most distinct 4-byte
    words that one of the 32 banks holds."""
    per_phase = max(1, 128 // max(width, 4))
    phase = (np.cumsum(inside, axis=1) - 1) // per_phase  # the phase of each taking-part lane, in lane order
    group = np.arange(len(addresses))[:, None] * (addresses.shape[1] + 1) + phase
    first, last = addresses // 4, (addresses + width - 1) // 4
    words = [(group * WORDS + first + j)[inside & (first + j <= last)] for j in range(int((last - first).max()) + 1)]
    pairs = np.unique(np.concatenate(words))  # distinct (phase, word), as phase * WORDS + word
    groups, per_bank = np.unique((pairs // WORDS) * 32 + pairs % 32, return_counts=True)  # (phase, bank): words
    _, at = np.unique(groups // 32, return_index=True)
    return int(np.maximum.reduceat(per_bank, at).sum()) if len(at) else 0


def _statements(body, looped: bool = False):
    """(statement without nested statements, inside a loop) for every such statement of ``body``."""
    for s in body:
        nested = [getattr(s, name, ()) or () for name in ("body", "then_body", "else_body")]
        if any(nested):
            for child in nested:
                yield from _statements(child, looped or isinstance(s, For))
        else:
            yield s, looped


def _shared_mentioned(s) -> set:
    from tileagent.compiler.lower.smem import buffers_used

    return {b for b in buffers_used(s) if b.scope == "shared"}


def _whole_copy(s, buf, side: str) -> bool:
    """Whether ``s`` is a T.copy with the whole of ``buf`` as its ``side`` ("src" / "dst")."""
    if not isinstance(s, Copy) or getattr(s, side).buffer is not buf:
        return False
    region = getattr(s, side)
    return all(static_int(x) == 0 for x in region.starts) and \
        math.prod(static_int(n) or 0 for n in region.extents) == math.prod(static_int(n) for n in buf.shape)
