"""Emulation of warp specialization for ``compiler.emulate``: ``WarpSpecialize``, ``MbarrierArrive``, ``SetMaxNReg``.

In: the emulated block (``compiler.emulate._Block``) and one statement. Out: the block's state updated;
``EmulationError`` where the program would hang or break the barrier protocol.
Model: the producer side of a ``WarpSpecialize`` runs as a coroutine next to the consumers, who run in lock-step as
every other body does. The producer runs only when the consumers wait on an mbarrier whose phase cannot complete
yet: it then issues as far as it can, until it waits itself for a stage the consumers have not released (or ends).
If the consumers' barrier still cannot complete, both sides wait for each other: the kernel would hang, an
EmulationError. After the consumer body the producer must run to its end. Inside the consumer body a ``Barrier`` (or
a ``WgmmaFence`` with sync) synchronizes the consumer threads, which is all it has to. A producer's wait for a free
stage that completes orders the consumers' earlier reads before its next loads (the race detector marks them
released for the loads alone: an unsynchronized access among the consumers stays a race). ``MbarrierArrive`` counts
one arrival per warp with an active lane (every lane must be active; with ``per_thread``, one per active thread)
and completes a phase that expects no bytes as soon as its last arrival comes. ``SetMaxNReg`` changes no value.
"""

from __future__ import annotations

import torch

from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.ir.stmt import For, If
from tileagent.compiler.tir import MbarrierArrive, MbarrierWait, SetMaxNReg, WarpSpecialize


class _Producer:
    """The producer side of one WarpSpecialize, advanced on demand (``advance``)."""

    def __init__(self, block, stmts, mask):
        self.block, self.done = block, mask is False
        self.steps = iter(()) if self.done else _steps(block, stmts, mask)

    def advance(self) -> None:
        """Run the producer until it waits for something the consumers have not done yet, or ends."""
        if not self.done:
            try:
                next(self.steps)
            except StopIteration:
                self.done = True


def _under(block, mask, fn):
    block.masks.append(mask)
    try:
        return fn()
    finally:
        block.masks.pop()


def _steps(block, stmts, mask):
    """Execute ``stmts`` for the threads of ``mask``, yielding whenever a wait cannot complete yet."""
    from tileagent.compiler.emulate import _wrap

    for s in stmts:
        if type(s) is For:
            extent = int(_under(block, mask, lambda: block.uniform(block.ev(s.extent), f"trip count of '{s.var.name}'")))
            start, step = _under(block, mask, lambda: (block.ev(s.start), block.ev(s.step)))
            for k in range(extent):
                block.env[s.var] = _wrap(start + k * step, s.var.dtype)
                yield from _steps(block, s.body, mask)
        elif type(s) is If:
            c = _under(block, mask, lambda: block.ev(s.cond))
            c = torch.as_tensor(c, dtype=torch.bool).expand(block.nt) if not isinstance(c, torch.Tensor) or \
                c.dim() == 0 else c.to(torch.bool)
            for body, m in ((s.then_body, mask & c), (s.else_body, mask & ~c)):
                if body and bool(m.any()):
                    yield from _steps(block, body, m)
        elif isinstance(s, MbarrierWait):
            while not _under(block, mask, lambda: ready(block, s)):
                yield
            block.run_masked([s], mask)
        else:
            block.run_masked([s], mask)


def ready(block, s: MbarrierWait) -> bool:
    """Whether the phase ``s`` waits for can complete now (its arrivals and bytes are in, or it completed)."""
    from tileagent.compiler.emulate_tma import _barrier

    _, bar = _barrier(block, s, s.barriers, s.index)
    parity = int(block.uniform(block.ev(s.parity), "mbarrier parity")) & 1
    if parity != bar["phase"] & 1:
        return True
    return bar["pending"] <= 0 and bar["delivered"] >= bar["expected"]


def wait_for_producer(block, s: MbarrierWait) -> None:
    """The consumers wait on ``s``: let the producer issue what it can first."""
    producer = getattr(block, "producer", None)
    if producer is not None and not ready(block, s):
        producer.advance()


def warp_specialize(block, s: WarpSpecialize) -> None:
    if block.mask is not None:
        raise EmulationError("WarpSpecialize under a thread-dependent branch; it is the kernel's body", s.span)
    c = block.ev(s.cond)
    c = c.to(torch.bool) if isinstance(c, torch.Tensor) and c.dim() else torch.full((block.nt,), bool(c))
    producer_mask = c if bool(c.any()) else False
    consumer_mask = block.narrowed(~c)
    if consumer_mask is False or int((~c).sum()) != s.consumers:
        raise EmulationError(f"WarpSpecialize with {s.consumers} consumer threads in a block of {block.nt}", s.span)
    outer = getattr(block, "producer", None), getattr(block, "sync_group", None)
    block.producer, block.sync_group = _Producer(block, s.then_body, producer_mask), consumer_mask
    try:
        block.run_masked(s.else_body, consumer_mask)
        while not block.producer.done:
            before = _progress(block)
            block.producer.advance()
            if not block.producer.done and _progress(block) == before:
                raise EmulationError("the producer waits for a stage the consumers never release: the kernel "
                                     "would hang after the consumers finish", s.span)
    finally:
        block.producer, block.sync_group = outer


def _progress(block) -> tuple:
    return tuple((k, v["phase"], v["pending"], v["delivered"]) for k, v in getattr(block, "mbarriers", {}).items())


def mbarrier_arrive(block, s: MbarrierArrive) -> None:
    from tileagent.compiler.emulate_tma import _barrier

    # one arrival per warp, or per active thread for T.alloc_barrier's (warp specialization by hand)
    n = int(block.nt if block.mask is None else block.mask.sum()) if s.per_thread else \
        len(block.full_warps("MbarrierArrive"))
    key, bar = _barrier(block, s, s.barriers, s.index)
    bar["pending"] -= n
    if bar["pending"] < 0:
        raise EmulationError(f"{n} arrival(s) on {key[0].name}[{key[1]}] with {bar['pending'] + n} pending in its "
                             f"phase", s.span)
    if bar["pending"] == 0 and not bar["expected"] and not bar["loads"]:  # nothing to land: the phase completes
        bar.update(phase=bar["phase"] + 1, pending=bar["count"])


HANDLERS = {WarpSpecialize: warp_specialize, MbarrierArrive: mbarrier_arrive, SetMaxNReg: lambda block, s: None}
