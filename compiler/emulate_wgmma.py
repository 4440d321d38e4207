"""Emulation of the sm_90a warpgroup MMA statements of the thread IR: ``WgmmaFence``, ``Wgmma``, ``WgmmaCommit``,
``WgmmaWait`` (see ``compiler.tir``), for ``compiler.emulate``.

In: the emulated block (its shared arena, whose byte 0 stands for a 1024-byte-aligned shared-window address as the
``__align__(1024)`` arena of the CUDA target, registers, masks) and one statement. Out: registers updated when a
wait retires a group; ``EmulationError`` when the program breaks the rules.
Guarantees (what a run checks):

- Operands are read the way the hardware decodes a matrix descriptor, not through the compiler's layout: element
  (r, c) of a 128B-swizzled canonical tile at byte ``start + (r // 8) * SBO + (r % 8) * 128 + 2 c`` with address
  bits [4:6] XORed with bits [7:9] of the absolute arena address, so a wrong start, SBO, swizzle or a tile that is not
  on a 1024-byte swizzle boundary gives wrong numbers; every byte read must lie inside the operand's buffer.
- ``WgmmaFence`` is a block barrier (every thread, not divergent). ``Wgmma`` is executed by whole warpgroups (all
  128 threads active), with descriptor starts uniform within each warpgroup, and only after a ``WgmmaFence``
  executed since the last ``WgmmaWait`` (or the block's start).
- Results are asynchronous: at issue the accumulator registers become NaN (undefined); chained Wgmmas on the same
  registers see the pending values; a ``WgmmaWait(N)`` writes the results of all but the newest N committed groups.
  A group still pending (or Wgmmas never committed) when the block ends raises EmulationError: a missing
  ``wgmma.wait_group`` fails the run; reading an accumulator before its wait reads NaN.
Not modelled: the shared-memory race detector for the asynchronous operand reads (the lowering waits before the
gemm ends, so a stage is never overwritten under a pending Wgmma).
"""

from __future__ import annotations

import torch

from tileagent.compiler.emulate_tensor import WARP_SIZE, EmulationError
from tileagent.compiler.tir import Wgmma, WgmmaCommit, WgmmaFence, WgmmaWait

GROUP = 128  # threads of a warpgroup


def _state(block) -> dict:
    st = getattr(block, "wgmma_state", None)
    if st is None:
        st = block.wgmma_state = {"fenced": False, "open": [], "groups": [], "shadow": {}}
    return st


def _warpgroups(block, what: str, span) -> list[int]:
    """The warpgroups executing ``what``: every thread of each must be active and present."""
    warps = block.full_warps(what)
    groups = sorted({int(w) // 4 for w in warps})
    for q in groups:
        need = set(range(4 * q, 4 * q + 4))
        if not need <= {int(w) for w in warps} or (q + 1) * GROUP > block.nt:
            raise EmulationError(f"{what} in warpgroup {q}: all four warps ({min(need)}..{max(need)}) must execute "
                                 f"it; the block has {block.nt} threads", span)
    return groups


def wgmma_fence(block, s: WgmmaFence) -> None:
    block.barrier(s)  # the __syncthreads between the proxy fence and wgmma.fence: the whole block, not divergent
    _warpgroups(block, "wgmma.fence", s.span)
    _state(block)["fenced"] = True


def _read_tile(block, buf, start_el: int, sbo: int, rows: int, cols: int, span, what: str) -> torch.Tensor:
    """[rows, cols] elements of a 128B-swizzled canonical tile whose descriptor starts at element ``start_el``."""
    off = block.offset[buf]
    nbytes = int(buf.shape[0]) * buf.dtype.bytes
    r = torch.arange(rows)[:, None]
    c = torch.arange(cols)[None, :]
    addr = off + start_el * buf.dtype.bytes + (r // 8) * sbo + (r % 8) * 128 + 2 * c
    addr = addr ^ (((addr >> 7) & 7) << 4)
    bad = (addr < off) | (addr + 2 > off + nbytes)
    if bool(bad.any()):
        i, j = (int(x) for x in bad.nonzero()[0])
        raise EmulationError(f"Wgmma {what} descriptor reads byte {int(addr[i, j])} for element ({i}, {j}), outside "
                             f"'{buf.name}' (bytes {off}..{off + nbytes - 1} of the shared arena)", span)
    pairs = torch.stack([block.arena[addr], block.arena[addr + 1]], -1).contiguous()
    return pairs.view(torch.int16).squeeze(-1).view(buf.dtype.torch)


def _uniform_start(block, expr, q: int, what: str, span) -> int:
    v = block.lanes(block.ev(expr), torch.int64)[q * GROUP:(q + 1) * GROUP]
    if bool((v != v[0]).any()):
        raise EmulationError(f"Wgmma {what} descriptor start differs within warpgroup {q}", span)
    return int(v[0])


def wgmma(block, s: Wgmma) -> None:
    st = _state(block)
    if s.dtype not in ("float16", "bfloat16") or s.a_buf.dtype != s.dtype or s.b_buf.dtype != s.dtype or \
            s.c_buf.dtype != "float32" or s.a_buf.scope != "shared" or s.b_buf.scope != "shared" or \
            s.c_buf.scope != "local":
        raise EmulationError(f"Wgmma wants float16/bfloat16 shared A and B and a local float32 C, got "
                             f"{s.a_buf.scope} {s.a_buf.dtype}, {s.b_buf.scope} {s.b_buf.dtype}, "
                             f"{s.c_buf.scope} {s.c_buf.dtype}", s.span)
    if s.n % 8 or not 8 <= s.n <= 256 or len(s.c) != s.n // 2:
        raise EmulationError(f"Wgmma m64n{s.n}k16 needs N in 8..256 (a multiple of 8) and N / 2 accumulator "
                             f"registers, got {len(s.c)}", s.span)
    if s.b_major == "mn" and s.n > 64:
        raise EmulationError(f"Wgmma with an N-major B reads one 64-wide swizzle block; N = {s.n}", s.span)
    groups = _warpgroups(block, "Wgmma", s.span)
    if not groups:
        return
    if not st["fenced"]:
        raise EmulationError("Wgmma issued without a wgmma.fence since the last wgmma.wait_group (or the start of "
                             "the kernel): accumulator registers written before it are not ordered", s.span)
    mem = block.buffer_memory(s.c_buf)
    shadow = st["shadow"].setdefault(s.c_buf, mem.clone())
    regs = torch.stack([block.lanes(block.ev(r), torch.int64) for r in s.c], 1)  # [nt, n / 2]
    lane = torch.arange(GROUP)
    w, g, t = lane // WARP_SIZE, lane % WARP_SIZE // 4, lane % 4
    j = torch.arange(s.n // 2) // 4
    hh, p = torch.arange(s.n // 2) // 2 % 2, torch.arange(s.n // 2) % 2
    rows = (16 * w + g)[:, None] + 8 * hh[None, :]
    cols = (8 * j + p)[None, :] + 2 * t[:, None]
    for q in groups:
        a = _read_tile(block, s.a_buf, _uniform_start(block, s.a_index, q, "A", s.span), s.a_sbo, 64, 16, s.span, "A")
        b0 = _uniform_start(block, s.b_index, q, "B", s.span)
        b = (_read_tile(block, s.b_buf, b0, s.b_sbo, s.n, 16, s.span, "B").T if s.b_major == "k"
             else _read_tile(block, s.b_buf, b0, s.b_sbo, 16, s.n, s.span, "B"))
        d = a.float() @ b.float()
        threads = torch.arange(q * GROUP, (q + 1) * GROUP)
        idx = regs[threads]
        if bool(((idx < 0) | (idx >= mem.shape[-1])).any()):
            raise EmulationError(f"Wgmma accumulator register index outside '{s.c_buf.name}' ({mem.shape[-1]})",
                                 s.span)
        vals = d[rows, cols] + (shadow[threads[:, None], idx] if s.accumulate else 0)
        shadow[threads[:, None], idx] = vals
        mem[threads[:, None], idx] = float("nan")
        st["open"].append((s.c_buf, threads, idx, vals))


def wgmma_commit(block, s: WgmmaCommit) -> None:
    _warpgroups(block, "wgmma.commit_group", s.span)
    st = _state(block)
    st["groups"].append(st["open"])
    st["open"] = []


def wgmma_wait(block, s: WgmmaWait) -> None:
    _warpgroups(block, "wgmma.wait_group", s.span)
    st = _state(block)
    keep = max(int(s.pending), 0)
    while len(st["groups"]) > keep:
        for buf, threads, idx, vals in st["groups"].pop(0):
            block.mem[buf][threads[:, None], idx] = vals
    if not st["groups"] and not st["open"]:
        st["shadow"] = {}
    st["fenced"] = False


def finish_wgmma(block) -> None:
    """At the end of a block: a Wgmma whose group was never waited for is an error."""
    st = getattr(block, "wgmma_state", None)
    if st and (st["groups"] or st["open"]):
        n = len(st["groups"]) + (1 if st["open"] else 0)
        raise EmulationError(f"{n} wgmma group(s) still pending when the block ends: a wgmma.wait_group is missing, "
                             "so the accumulators were never defined", block.span)


HANDLERS = {WgmmaFence: wgmma_fence, Wgmma: wgmma, WgmmaCommit: wgmma_commit, WgmmaWait: wgmma_wait}
