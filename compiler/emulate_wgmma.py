"""Emulation of the sm_90a warpgroup MMA statements of the thread IR: ``WgmmaFence``, ``Wgmma``, ``WgmmaCommit``,
``WgmmaWait``, ``AsyncProxyFence`` (see ``compiler.tir``), for ``compiler.emulate``.

In: the emulated block (its shared arena, whose byte 0 stands for a 1024-byte-aligned shared-window address as the
``__align__(1024)`` arena of the CUDA target, registers, masks) and one statement. Out: registers updated when a
wait retires a group; ``EmulationError`` when the program breaks the rules.
Guarantees (what a run checks):

- Operands are read the way the hardware decodes a matrix descriptor, not through the compiler's layout: the
  statement's start address (the arena offset), LBO, SBO and swizzle are packed by the same
  ``encode_descriptor`` the CUDA code uses and unpacked by ``decode_descriptor``; then (PTX "Shared Memory Matrix
  Layout", W the swizzle width, e the element size) a K-major element (r, k) lies at byte
  ``start + (r // 8) * SBO + (r % 8) * W + e k``, an MN-major element (k, n) at
  ``start + (k // 8) * SBO + (k % 8) * W + (n // (W / e)) * LBO + e (n % (W / e))``, and every address has bits
  [4, 4 + log2(W / 16)) XORed with bits [7, 7 + log2(W / 16)) of the absolute arena address. So a wrong start, LBO,
  SBO, swizzle, encoding or a tile that is not on its swizzle-atom boundary gives wrong numbers; every byte read must
  lie inside the operand's buffer.
- ``WgmmaFence`` is a block barrier (every thread, not divergent) and an async-proxy fence; with ``sync=False``
  (``wgmma.fence`` alone) neither. ``Wgmma`` is executed by whole warpgroups (all 128 threads active), with
  descriptor starts uniform within each warpgroup, and only after a ``WgmmaFence`` executed since the last
  ``WgmmaWait`` (or the block's start).
- Results are asynchronous: at issue the accumulator registers become NaN (undefined); a ``WgmmaWait(N)`` retires
  all but the newest N committed groups, carrying out their Wgmmas in issue order: the shared operands are read then
  (the latest moment the hardware may read them), chained Wgmmas on the same registers accumulate onto each other,
  and the results land in the registers, except registers a still-pending Wgmma writes, which stay NaN (so reading an
  accumulator under ``wait_group 1`` before the wait that retires its newest Wgmma reads NaN). Reading or writing
  such a register (a load, a store, a vector copy; ``check_registers``) before that wait raises EmulationError, and
  so does a group still pending (or Wgmmas never committed) when the block ends: a missing or misplaced
  ``wgmma.wait_group`` (T.wait_wgmma) fails the run. A chain of Wgmmas on the same registers accumulates from their
  values when the first of them was issued (a register written after a wait retired it starts a new chain).
- ``WgmmaRS`` (A from registers) reads its A elements from the named registers of each warpgroup thread at issue
  (PTX A layout, ``instructions.wgmma.a_position``; uint32 registers unpacked low half first) and checks at the
  retiring wait that those registers still hold the same bits: writing them while the wgmma is pending is undefined
  on the hardware and an EmulationError here. Its B, accumulators and groups behave as ``Wgmma``'s.
- The operand bytes of pending Wgmmas are busy: with the race detector on, a shared-memory write to them (a store,
  a vector copy, a landing cp.async) before the wait that retires the Wgmma raises EmulationError
  (``check_not_busy``); without it, the late read gives wrong numbers.
- With the race detector on, the operand reads take part in it as reads by every thread of the warpgroup: at issue
  the bytes must not have been written since the last barrier (read-after-write), and at the retiring wait they are
  recorded as read in that barrier epoch, so a write by any thread (a store; a cp.async, checked when it is issued,
  ``emulate_tensor.async_copy``) before the next barrier is a race (write-after-read): the wait only retires the
  warpgroup's wgmma for the waiting thread, another thread's overwrite needs a barrier after it.
- Proxies (race detector on): every generic-proxy write to shared memory (a store, a vector copy, a landing
  cp.async; ``note_generic_write``) leaves its bytes unfenced until the writing thread runs ``fence.proxy.async``
  (``AsyncProxyFence`` or a ``WgmmaFence`` with ``sync``); a Wgmma reading an unfenced byte raises EmulationError.
"""

from __future__ import annotations

import functools

import torch

from tileagent.compiler.emulate_tensor import EmulationError, unpack
from tileagent.compiler.instructions.wgmma import a_position, d_position, decode_descriptor, encode_descriptor
from tileagent.compiler.instructions.base import k_step
from tileagent.compiler.intrinsics import TF32_DTYPES, truncate_tf32
from tileagent.compiler.tir import AsyncProxyFence, Wgmma, WgmmaCommit, WgmmaFence, WgmmaRS, WgmmaWait

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
    if s.sync:
        proxy_fence(block, s)
        block.barrier(s)  # the __syncthreads between the proxy fence and wgmma.fence: the whole block, not divergent
    _warpgroups(block, "wgmma.fence", s.span)
    _state(block)["fenced"] = True


def note_generic_write(block, byte_positions: torch.Tensor, threads: torch.Tensor) -> None:
    """Record a generic-proxy write to shared memory (race detector on): the bytes stay unfenced for their writer
    until it runs ``fence.proxy.async``."""
    dirty = getattr(block, "proxy_dirty", None)
    if dirty is None:
        dirty = block.proxy_dirty = torch.full((block.arena.shape[0],), -1, dtype=torch.int32)
    dirty[byte_positions] = threads.to(torch.int32)


def proxy_fence(block, s) -> None:
    """``fence.proxy.async.shared::cta`` by the active threads: their generic writes become visible to the async
    proxy (a barrier still has to order them before another thread's wgmma)."""
    dirty = getattr(block, "proxy_dirty", None)
    if dirty is None:
        return
    if block.mask is None:
        dirty.fill_(-1)
    else:
        dirty[torch.isin(dirty, block.active().to(torch.int32))] = -1


def _check_readable(block, buf, addr: torch.Tensor, q: int, what: str, span) -> None:
    """Race detector: the bytes a Wgmma of warpgroup ``q`` reads were fenced for the async proxy by their writers
    and not written since the last barrier."""
    if not block.check_races:
        return
    b = torch.cat([addr.reshape(-1), addr.reshape(-1) + 1])
    dirty = getattr(block, "proxy_dirty", None)
    if dirty is not None and bool((dirty[b] >= 0).any()):
        byte = int(b[(dirty[b] >= 0).nonzero()[0]])
        i = (byte - block.offset[buf]) // buf.dtype.bytes
        raise EmulationError(f"Wgmma {what} reads {buf.name}[{i}], written by thread {int(dirty[byte])} through the "
                             "generic proxy (st.shared / cp.async) with no fence.proxy.async.shared::cta by that "
                             "thread since: the tensor core may read the old bytes", span)
    bad = block.w_epoch[b] == block.epoch
    if bool(bad.any()):
        byte = int(b[bad.nonzero()[0]])
        raise block._race(buf, byte, block._who_wrote(buf, byte), f"read by the wgmma of warpgroup {q}")


def _record_reads(block, addrs, q: int) -> None:
    """Race detector: the operand bytes count as read, in the current barrier epoch, by every thread of warpgroup
    ``q`` (the wait retires the wgmma for the waiting thread only)."""
    if not block.check_races:
        return
    b = torch.unique(torch.cat([x for a in addrs for x in (a.reshape(-1), a.reshape(-1) + 1)]))
    stale = b[block.r_epoch[b] != block.epoch]
    block.rmin[stale], block.rmax[stale] = block.nt, -1
    block.r_epoch[b] = block.epoch
    block.r_released[b] = False
    block.r_group[b] = -1  # no named barrier has ordered these reads (compiler.emulate_sync)
    block.rmin[b] = torch.clamp(block.rmin[b], max=q * GROUP)
    block.rmax[b] = torch.clamp(block.rmax[b], min=(q + 1) * GROUP - 1)


def hardware_addresses(desc: dict, rows: int, cols: int, mn_major: bool, eb: int) -> torch.Tensor:
    """[rows, cols] shared byte addresses the tensor core reads for a decoded descriptor (``decode_descriptor``):
    K-major element (r, k) or MN-major element (k, n), swizzle applied (module docstring)."""
    w = desc["swizzle"]
    r = torch.arange(rows)[:, None]
    c = torch.arange(cols)[None, :]
    addr = desc["start"] + (r // 8) * desc["sbo"] + (r % 8) * w
    if mn_major:
        per = w // eb
        addr = addr + (c // per) * desc["lbo"] + (c % per) * eb
    else:
        addr = addr + c * eb
    bits = (w // 16).bit_length() - 1
    return addr ^ (((addr >> 7) & ((1 << bits) - 1)) << 4)


def _tile_addresses(block, buf, start_el: int, lbo: int, sbo: int, width: int, rows: int, cols: int,
                    mn_major: bool, span, what: str) -> torch.Tensor:
    """Arena byte addresses [rows, cols] (MN-major: [16 K rows, N]; K-major: [M or N rows, 16]) of a canonical tile
    read through the descriptor whose fields are given, decoded as the hardware decodes it (module docstring)."""
    off = block.offset[buf]
    eb = buf.dtype.bytes
    nbytes = int(buf.shape[0]) * eb
    try:
        desc = decode_descriptor(encode_descriptor(off + start_el * eb, lbo, sbo, width))
    except ValueError as e:
        raise EmulationError(f"Wgmma {what}: {e}", span) from None
    if desc["base_offset"] or not desc["swizzle"]:
        raise EmulationError(f"Wgmma {what} descriptor: base offset {desc['base_offset']} / swizzle "
                             f"{desc['swizzle']} is not modelled", span)
    addr = hardware_addresses(desc, rows, cols, mn_major, eb)
    bad = (addr < off) | (addr + eb > off + nbytes)
    if bool(bad.any()):
        i, j = (int(x) for x in bad.nonzero()[0])
        raise EmulationError(f"Wgmma {what} descriptor reads byte {int(addr[i, j])} for element ({i}, {j}), outside "
                             f"'{buf.name}' (bytes {off}..{off + nbytes - 1} of the shared arena)", span)
    return addr


def _values(block, buf, addr: torch.Tensor) -> torch.Tensor:
    """The elements at byte addresses ``addr``: 16-bit ones as their dtype, 32-bit ones as float32 truncated to TF32
    (the tensor core reads a register's upper 19 bits)."""
    eb = buf.dtype.bytes
    raw = torch.stack([block.arena[addr + i] for i in range(eb)], -1).contiguous()
    if eb == 2:
        return raw.view(torch.int16).squeeze(-1).view(buf.dtype.torch)
    return truncate_tf32(raw.view(torch.int32).squeeze(-1).view(torch.float32))


def _mark_busy(block, addrs, delta: int) -> None:
    """Count the arena bytes that pending Wgmmas read (``busy``; the race detector refuses writes to them)."""
    busy = getattr(block, "wgmma_busy", None)
    if busy is None:
        busy = block.wgmma_busy = torch.zeros(block.arena.shape[0], dtype=torch.int32)
    for addr in addrs:
        b = torch.cat([addr.reshape(-1), addr.reshape(-1) + 1])
        busy.index_add_(0, b, torch.full_like(b, delta, dtype=torch.int32))


def check_not_busy(block, buf, byte_positions: torch.Tensor) -> None:
    """EmulationError when a shared-memory write hits bytes a pending (issued, not yet retired) Wgmma reads: the
    tensor core reads its operands asynchronously, any time before the wgmma.wait_group that retires it."""
    busy = getattr(block, "wgmma_busy", None)
    if busy is None or not len(byte_positions):
        return
    hit = busy[byte_positions] > 0
    if bool(hit.any()):
        byte = int(byte_positions[hit.nonzero()[0]])
        i = (byte - block.offset[buf]) // buf.dtype.bytes
        raise EmulationError(f"shared memory {buf.name}[{i}] written while a wgmma that reads it is pending (issued "
                             "and not yet retired by wgmma.wait_group): the tensor core may read the new value",
                             block.span)


@functools.lru_cache(maxsize=None)
def _d_positions(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols), each [128, n / 2]: where register d[i] of each warpgroup thread sits in D (``d_position``)."""
    pos = torch.tensor([[d_position(t, i) for i in range(n // 2)] for t in range(GROUP)])
    return pos[..., 0], pos[..., 1]


def _uniform_start(block, expr, q: int, what: str, span) -> int:
    v = block.lanes(block.ev(expr), torch.int64)[q * GROUP:(q + 1) * GROUP]
    if bool((v != v[0]).any()):
        raise EmulationError(f"Wgmma {what} descriptor start differs within warpgroup {q}", span)
    return int(v[0])


@functools.lru_cache(maxsize=None)
def _a_positions() -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols), each [128, 8]: where A element i of each warpgroup thread sits in the 64 x 16 tile."""
    pos = torch.tensor([[a_position(t, i) for i in range(8)] for t in range(GROUP)])
    return pos[..., 0], pos[..., 1]


def _register_a(block, s: WgmmaRS, threads: torch.Tensor):
    """(A tile [64, 16] in the element dtype, register memory, indices [128, r], their current bits) of one
    warpgroup's WgmmaRS."""
    mem = block.buffer_memory(s.a_buf)
    idx = torch.stack([block.lanes(block.ev(r), torch.int64) for r in s.a], 1)[threads]
    if bool(((idx < 0) | (idx >= mem.shape[-1])).any()):
        raise EmulationError(f"WgmmaRS A register index outside '{s.a_buf.name}' ({mem.shape[-1]})", s.span)
    bits = mem[threads[:, None], idx].clone()
    vals = unpack(bits.to(torch.int64), s.dtype) if s.a_buf.dtype == "uint32" else bits.to(torch.float32)
    rows, cols = _a_positions()
    tile = torch.empty(64, 16, dtype=torch.float32)
    tile[rows, cols] = vals.float()
    return tile, mem, idx, bits


def wgmma(block, s) -> None:
    """Issue a ``Wgmma`` (SS) or ``WgmmaRS`` (A in registers)."""
    st = _state(block)
    rs = isinstance(s, WgmmaRS)
    if rs:
        a_ok = s.a_buf.scope == "local" and s.a_buf.dtype in (s.dtype, "uint32") and \
            len(s.a) == (4 if s.a_buf.dtype == "uint32" else 8)
    else:
        a_ok = s.a_buf.scope == "shared" and s.a_buf.dtype == s.dtype
    tf32 = not rs and {s.dtype, str(s.a_buf.dtype), str(s.b_buf.dtype)} <= set(TF32_DTYPES)
    if tf32:
        a_ok = s.a_buf.scope == "shared" and s.a_major == s.b_major == "k"
    if s.dtype not in ("float16", "bfloat16", *(TF32_DTYPES if tf32 else ())) or not a_ok or \
            (s.b_buf.dtype != s.dtype and not tf32) or \
            s.c_buf.dtype != "float32" or s.b_buf.scope != "shared" or s.c_buf.scope != "local":
        raise EmulationError(f"{type(s).__name__} wants float16/bfloat16 {'register' if rs else 'shared'} A, a "
                             f"shared B and a local float32 C, got {s.a_buf.scope} {s.a_buf.dtype}, "
                             f"{s.b_buf.scope} {s.b_buf.dtype}, {s.c_buf.scope} {s.c_buf.dtype}", s.span)
    if s.n % 8 or not 8 <= s.n <= 256 or len(s.c) != s.n // 2:
        raise EmulationError(f"Wgmma m64n{s.n}k16 needs N in 8..256 (a multiple of 8) and N / 2 accumulator "
                             f"registers, got {len(s.c)}", s.span)
    groups = _warpgroups(block, "Wgmma", s.span)
    if not groups:
        return
    if not st["fenced"]:
        raise EmulationError("Wgmma issued without a wgmma.fence since the last wgmma.wait_group (or the start of "
                             "the kernel): accumulator registers written before it are not ordered", s.span)
    mem = block.buffer_memory(s.c_buf)
    shadow = st["shadow"].setdefault(s.c_buf, mem.clone())  # the registers as the chain of Wgmmas starts from them
    pending = _pending(block, s.c_buf)
    regs = torch.stack([block.lanes(block.ev(r), torch.int64) for r in s.c], 1)  # [nt, n / 2]
    for q in groups:
        threads = torch.arange(q * GROUP, (q + 1) * GROUP)
        a0 = None if rs else _uniform_start(block, s.a_index, q, "A", s.span)
        kk = k_step(s.b_buf)  # K of one wgmma: 16, or 8 for TF32
        a = _register_a(block, s, threads) if rs else \
            _tile_addresses(block, s.a_buf, a0, s.a_lbo, s.a_sbo, s.a_swizzle, 64, kk, False, s.span, "A") \
            if s.a_major == "k" else \
            _tile_addresses(block, s.a_buf, a0, s.a_lbo, s.a_sbo, s.a_swizzle, kk, 64, True, s.span, "A").T
        b0 = _uniform_start(block, s.b_index, q, "B", s.span)
        b = (_tile_addresses(block, s.b_buf, b0, s.b_lbo, s.b_sbo, s.b_swizzle, s.n, kk, False, s.span, "B").T
             if s.b_major == "k" else
             _tile_addresses(block, s.b_buf, b0, s.b_lbo, s.b_sbo, s.b_swizzle, kk, s.n, True, s.span, "B"))
        if not rs:
            _check_readable(block, s.a_buf, a, q, "A", s.span)
        _check_readable(block, s.b_buf, b, q, "B", s.span)
        idx = regs[threads]
        if bool(((idx < 0) | (idx >= mem.shape[-1])).any()):
            raise EmulationError(f"Wgmma accumulator register index outside '{s.c_buf.name}' ({mem.shape[-1]})",
                                 s.span)
        rows = threads[:, None].expand_as(idx)
        fresh = ~pending[rows, idx]  # no pending Wgmma writes them: the chain starts from their current values
        shadow[rows[fresh], idx[fresh]] = mem[rows[fresh], idx[fresh]]
        pending[rows, idx] = True
        mem[threads[:, None], idx] = float("nan")
        _mark_busy(block, (b,) if rs else (a, b), 1)
        st["open"].append((s, threads, idx, a, b))


def _retire(block, st, group) -> None:
    """Carry out a group's Wgmmas in issue order: read the operands now (the latest the hardware may read them),
    chain the accumulators through the shadow registers, write the results and free the operand bytes."""
    for s, threads, idx, a_addr, b_addr in group:
        rows, cols = _d_positions(s.n)
        if isinstance(a_addr, tuple):  # WgmmaRS: the A tile read at issue; its registers must be unchanged
            a_vals, a_mem, a_idx, bits = a_addr
            now = a_mem[threads[:, None], a_idx]
            same = (now == bits) | (torch.isnan(now) & torch.isnan(bits)) if now.is_floating_point() else now == bits
            changed = (~same).any(1)
            if bool(changed.any()):
                t = int(threads[changed.nonzero()[0]])
                raise EmulationError(f"thread {t} wrote an A register of '{s.a_buf.name}' while the wgmma reading it "
                                     "was pending (before the wgmma.wait_group that retires it): undefined on the "
                                     "hardware", s.span)
        else:
            a_vals = _values(block, s.a_buf, a_addr).float()
        d = a_vals @ _values(block, s.b_buf, b_addr).float()
        shadow = st["shadow"][s.c_buf]
        vals = d[rows, cols] + (shadow[threads[:, None], idx] if s.accumulate else 0)
        shadow[threads[:, None], idx] = vals
        block.mem[s.c_buf][threads[:, None], idx] = vals
        shared = (b_addr,) if isinstance(a_addr, tuple) else (a_addr, b_addr)
        _mark_busy(block, shared, -1)
        _record_reads(block, shared, int(threads[0]) // GROUP)


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
        _retire(block, st, st["groups"].pop(0))
    block.wgmma_pending = {}
    for pending in st["groups"] + [st["open"]]:  # registers a pending Wgmma writes stay undefined
        for w, threads, idx, _, _ in pending:
            block.mem[w.c_buf][threads[:, None], idx] = float("nan")
            _pending(block, w.c_buf)[threads[:, None].expand_as(idx), idx] = True
    if not st["groups"] and not st["open"]:
        st["shadow"] = {}
    st["fenced"] = False


def _pending(block, buf) -> torch.Tensor:
    """[threads, registers] of ``buf``: True where an issued, not yet retired Wgmma writes the register."""
    table = getattr(block, "wgmma_pending", None)
    if table is None:
        table = block.wgmma_pending = {}
    if buf not in table:
        table[buf] = torch.zeros(block.mem[buf].shape, dtype=torch.bool)
    return table[buf]


def check_registers(block, buf, idx: torch.Tensor, verb: str) -> None:
    """EmulationError when an active thread reads or writes (``verb``) accumulator registers ``idx`` ([nt, width])
    of ``buf`` that an issued Wgmma not yet retired by a ``wgmma.wait_group`` writes: undefined on the hardware (a
    T.wgmma_gemm's accumulator used before the T.wait_wgmma that retires it)."""
    pending = block.wgmma_pending.get(buf)
    if pending is None:
        return
    hit = pending[block.tid[:, None].expand_as(idx), idx.clamp(0, pending.shape[-1] - 1)].any(1)
    if block.mask is not None:
        hit &= block.mask
    if bool(hit.any()):
        t = int(hit.nonzero()[0])
        i = int(idx[t][pending[t, idx[t].clamp(0, pending.shape[-1] - 1)]][0])
        raise EmulationError(f"thread {t} {verb} register {buf.name}[{i}] while the wgmma that writes it is pending "
                             "(issued, not yet retired): an accumulator is undefined until the wgmma.wait_group "
                             "(T.wait_wgmma after a T.wgmma_gemm) that retires its group", block.span)


def finish_wgmma(block) -> None:
    """At the end of a block: a Wgmma whose group was never waited for is an error."""
    st = getattr(block, "wgmma_state", None)
    if st and (st["groups"] or st["open"]):
        n = len(st["groups"]) + (1 if st["open"] else 0)
        raise EmulationError(f"{n} wgmma group(s) still pending when the block ends: a wgmma.wait_group is missing, "
                             "so the accumulators were never defined", block.span)


HANDLERS = {WgmmaFence: wgmma_fence, Wgmma: wgmma, WgmmaRS: wgmma, WgmmaCommit: wgmma_commit, WgmmaWait: wgmma_wait,
            AsyncProxyFence: proxy_fence}
