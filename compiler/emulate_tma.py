"""Emulation of the TMA and mbarrier statements of the thread IR for ``compiler.emulate``: ``MbarrierInit``,
``MbarrierArriveExpectTx``, ``TmaLoad``, ``MbarrierWait``.

In: the emulated block (``compiler.emulate._Block``) and one statement. Out: the block's shared memory and barrier
state updated; ``EmulationError`` where the program breaks a rule the hardware would punish with a hang, a fault or
a race.
Model (PTX ISA "mbarrier", "cp.async.bulk.tensor"): each barrier has a phase parity, the arrivals still pending in
the current phase (reset to the init count when a phase completes), the bytes expected (``expect_tx``) and the TMA
loads issued on it. A ``TmaLoad`` reads its box when issued (out-of-bounds elements as zero) and is placed as TMA
places it (``compiler.instructions.tma.tma_offsets``: column blocks and the swizzle XOR of the byte offset, from
the destination's start, which must be aligned to 128 bytes and to 8 x the swizzle width); its bytes land only when
a ``MbarrierWait`` completes the phase, so reading the tile before the wait sees the old bytes. A wait for the
current phase's parity completes it when every arrival came and the loads delivered exactly the expected bytes;
otherwise the kernel would hang (arrivals or bytes missing) or the transaction count would underflow (more bytes
than expected): both are EmulationErrors, as is a wait on a parity whose phase is two or more phases old (it
returns at once on the hardware, but the program has lost track), loads still in flight when the block ends, and a
TmaLoad into bytes another thread read since the last barrier (the load may write as soon as it is issued).
Bulk stores (``BulkStore``, ``BulkStoreWait``): see ``bulk_store``.
"""

from __future__ import annotations

import math

import torch

from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.instructions.tma import atom_bytes, tma_offsets
from tileagent.compiler.tir import BulkStore, BulkStoreWait, MbarrierArriveExpectTx, MbarrierInit, MbarrierWait, TmaLoad


def _state(block) -> dict:
    st = getattr(block, "mbarriers", None)
    if st is None:
        st = block.mbarriers = {}
    return st


def _single_thread(block, what: str) -> int:
    ids = block.active()
    if len(ids) != 1:
        raise EmulationError(f"{what} executed by {len(ids)} threads; the lowering issues it from one", block.span)
    return int(ids[0])


def _barrier(block, s, buf, index) -> tuple:
    i = int(block.uniform(block.ev(index), f"mbarrier index of {buf.name}"))
    if not 0 <= i < int(buf.shape[0]):
        raise EmulationError(f"mbarrier {buf.name}[{i}] outside its {buf.shape[0]} barriers", s.span)
    bar = _state(block).get((buf, i))
    if bar is None:
        raise EmulationError(f"mbarrier {buf.name}[{i}] used before MbarrierInit", s.span)
    return (buf, i), bar


def mbarrier_init(block, s: MbarrierInit) -> None:
    _single_thread(block, "MbarrierInit")
    st = _state(block)
    for i in range(s.first, s.first + s.count):
        old = st.get((s.barriers, i))
        if old is not None and (old["loads"] or old["expected"]):
            raise EmulationError(f"MbarrierInit of {s.barriers.name}[{i}] while transfers on it are pending", s.span)
        st[(s.barriers, i)] = {"phase": 0, "pending": s.arrivals, "count": s.arrivals, "expected": 0,
                               "delivered": 0, "loads": []}


def expect_tx(block, s: MbarrierArriveExpectTx) -> None:
    _single_thread(block, "MbarrierArriveExpectTx")
    key, bar = _barrier(block, s, s.barriers, s.index)
    if s.arrive and bar["pending"] <= 0:
        raise EmulationError(f"arrive on {key[0].name}[{key[1]}] with no arrival pending in its phase", s.span)
    bar["pending"] -= 1 if s.arrive else 0
    bar["expected"] += s.bytes


def tma_load(block, s: TmaLoad) -> None:
    thread = _single_thread(block, "TmaLoad")
    tm = s.tmap
    key, bar = _barrier(block, s, s.barriers, s.barrier_index)
    dims = [int(block.uniform(block.ev(d), "tensor map dim")) for d in tm.dims]
    strides = [1] + [int(block.uniform(block.ev(x), "tensor map stride")) for x in tm.strides]
    coords = [int(block.uniform(block.ev(c), "TMA coordinate")) for c in s.coords]
    src = block.buffer_memory(tm.buffer)
    elem = tm.buffer.dtype.bytes
    # box gathered outermost first (row-major in shared memory), zeros outside the tensor
    idx = torch.zeros((), dtype=torch.int64)
    ok = torch.ones((), dtype=torch.bool)
    for d in reversed(range(tm.rank)):
        i = coords[d] + torch.arange(tm.box[d], dtype=torch.int64)
        idx = idx[..., None] * 0 + idx[..., None] + i * strides[d]
        ok = ok[..., None] & ((i >= 0) & (i < dims[d]))
    idx, ok = idx.reshape(-1), ok.reshape(-1)
    vals = torch.zeros(idx.numel(), dtype=src.dtype)
    if bool(ok.any()):
        vals[ok] = src[idx[ok]]
    # placement: the box's R rows x box[0] columns, swizzled as TMA does, from the destination's start
    dst_index = int(block.uniform(block.ev(s.dst_index), "TMA destination"))
    start = block.offset[s.dst] + dst_index * elem
    need = atom_bytes(tm.swizzle)
    if start % need:
        raise EmulationError(f"TmaLoad into {s.dst.name} at shared byte {start}: TMA with "
                             f"{tm.swizzle or 'no'} swizzle needs a multiple of {need}", s.span)
    cols, rows = tm.box[0], math.prod(tm.box[1:])
    place = torch.from_numpy(tma_offsets(rows, cols, elem, tm.swizzle).reshape(-1)) // elem + dst_index
    if int(place.max()) >= int(s.dst.shape[0]):
        raise EmulationError(f"TmaLoad into {s.dst.name} writes past its {s.dst.shape[0]} elements", s.span)
    ids = torch.full((place.numel(),), thread, dtype=torch.int64)
    if block.check_races:  # the load may write as soon as it is issued
        block.race_issue(s.dst, place[:, None], ids)
    bar["loads"].append((s.dst, place, vals))
    bar["delivered"] += place.numel() * elem


def mbarrier_wait(block, s: MbarrierWait) -> None:
    from tileagent.compiler import emulate_hand_ws
    from tileagent.compiler.emulate_ws import wait_for_producer

    group = getattr(block, "sync_group", None)  # the consumer threads of a WarpSpecialize
    if emulate_hand_ws.active(block):  # warp specialization by hand: the waiting arm parks until the phase completes
        return emulate_hand_ws.wait(block, s, *_barrier(block, s, s.barriers, s.index))
    if block.mask is not None and not s.for_free_stage and not (group is not None and torch.equal(block.mask, group)):
        raise EmulationError("MbarrierWait by a subset of the block's threads; the lowering waits in all", s.span)
    if not s.for_free_stage:
        wait_for_producer(block, s)
    key, bar = _barrier(block, s, s.barriers, s.index)
    parity = int(block.uniform(block.ev(s.parity), "mbarrier parity")) & 1
    if s.for_free_stage and block.check_races:  # the consumers' reads so far happen before the loads that follow
        block.r_released[block.r_epoch == block.epoch] = True
    if parity != bar["phase"] & 1:  # that parity's phase completed already (the one before the current)
        if bar["phase"] == 0 and not s.for_free_stage:  # "phase -1" reads as complete, but nothing was loaded
            raise EmulationError(f"wait on {key[0].name}[{key[1]}] with parity {parity} before its first phase "
                                 f"completed: it returns at once and the data is not there", s.span)
        return
    if bar["pending"] > 0 or bar["delivered"] < bar["expected"]:
        raise EmulationError(f"wait on {key[0].name}[{key[1]}] (parity {parity}) would hang: {bar['pending']} "
                             f"arrival(s) missing, {bar['delivered']} of {bar['expected']} bytes issued", s.span)
    complete_phase(block, bar, key, s.span)


def complete_phase(block, bar: dict, key, span) -> None:
    """The barrier's phase completes (its arrivals came, its loads delivered at least the announced bytes): the
    loads land, the next phase begins; more bytes than announced is an EmulationError."""
    if bar["delivered"] > bar["expected"]:
        raise EmulationError(f"{key[0].name}[{key[1]}]: the loads deliver {bar['delivered']} bytes, expect_tx "
                             f"announced {bar['expected']} (the phase could complete early)", span)
    for dst, place, vals in bar["loads"]:
        _land(block, dst, place, vals)
    bar.update(phase=bar["phase"] + 1, pending=bar["count"], expected=0, delivered=0, loads=[])


def _land(block, dst, place, vals) -> None:
    mem = block.mem[dst]
    if block.check_races:
        from tileagent.compiler.emulate_wgmma import check_not_busy

        nb = dst.dtype.bytes
        b = (block.offset[dst] + place[:, None] * nb + torch.arange(nb)).reshape(-1)
        check_not_busy(block, dst, b)
        block.w_epoch[b] = -1  # visible to every thread that waited on the barrier
    mem[place] = vals.to(mem.dtype)


def finish_tma(block) -> None:
    """At the end of the block: no TMA load may still be in flight, no bulk store unwaited for."""
    for (buf, i), bar in getattr(block, "mbarriers", {}).items():
        if bar["loads"]:
            raise EmulationError(f"the block ends with TMA loads on {buf.name}[{i}] never waited for", block.span)
    for thread, stores in getattr(block, "bulk_pending", {}).items():
        if stores:
            raise EmulationError(f"the block ends with bulk stores of thread {thread} never waited for", block.span)


def bulk_store(block, s: BulkStore) -> None:
    """Each active thread's copy takes the shared bytes as they are when issued; they land in global memory at that
    thread's ``BulkStoreWait``, which also checks that nobody rewrote them in between (the hardware may read them at
    any time until then). Addresses and the size must be 16-byte multiples, both ranges inside their buffers."""
    elem = s.src.dtype.bytes
    n = s.nbytes // elem
    if s.nbytes <= 0 or s.nbytes % 16 or n * elem != s.nbytes:
        raise EmulationError(f"BulkStore of {s.nbytes} bytes: want a positive multiple of 16", s.span)
    ids = block.active()
    src_idx, dst_idx = (block.lanes(block.ev(x), torch.int64)[ids] for x in (s.src_index, s.dst_index))
    for name, byte in ((s.src.name, block.offset[s.src] + src_idx * elem), (s.dst.name, dst_idx * elem)):
        bad = (byte % 16 != 0).nonzero()
        if len(bad):
            j = int(bad[0])
            raise EmulationError(f"BulkStore of thread {int(ids[j])}: {name} at byte {int(byte[j])}, not a multiple of "
                                 "16", s.span)
    vals = block.read(s.src, block.ev(s.src_index), n, "bulk store from")[ids]
    block.elements(s.dst, block.ev(s.dst_index), n, "bulk store to")
    pending = getattr(block, "bulk_pending", None)
    if pending is None:
        pending = block.bulk_pending = {}
    for j, t in enumerate(ids.tolist()):
        pending.setdefault(t, []).append((s, int(src_idx[j]), int(dst_idx[j]), vals[j].clone()))


def bulk_store_wait(block, s: BulkStoreWait) -> None:
    pending = getattr(block, "bulk_pending", {})
    for t in block.active().tolist():
        for st, si, di, vals in pending.pop(t, []):
            now = block.buffer_memory(st.src)[si:si + vals.numel()]
            if not torch.equal(now.contiguous().view(torch.uint8), vals.view(torch.uint8)):  # bits: NaN poison too
                raise EmulationError(f"shared bytes of {st.src.name} that thread {t}'s bulk store reads were rewritten "
                                     "before its BulkStoreWait", s.span)
            dst = block.buffer_memory(st.dst)
            dst[di:di + vals.numel()] = vals.to(dst.dtype)


def _ws_handlers() -> dict:
    from tileagent.compiler.emulate_hand_ws import HANDLERS as HAND
    from tileagent.compiler.emulate_ws import HANDLERS as WS

    return {**WS, **HAND}


BULK_HANDLERS = {BulkStore: bulk_store, BulkStoreWait: bulk_store_wait}
HANDLERS = {MbarrierInit: mbarrier_init, MbarrierArriveExpectTx: expect_tx, TmaLoad: tma_load,
            MbarrierWait: mbarrier_wait, **_ws_handlers()}
