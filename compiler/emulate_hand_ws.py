"""Emulation of warp specialization written by hand (``compiler.lower.warp_groups``) for ``compiler.emulate``:
``WarpGroupRange``, per-thread ``MbarrierArrive``s, waits inside warp-group arms, cp.async by hand.

In: the emulated block (``compiler.emulate._Block``) of a kernel whose body holds a ``WarpGroupRange`` (``active``)
and one statement. Out: the block's state updated; ``EmulationError`` where the program would hang or break the
barrier protocol.
Model: the arms of an ``if`` on the thread index that wait on mbarriers run as concurrent roles
(``compiler.interp_roles``: one runs at a time and hands over when it waits for a phase that has not completed; when
all wait, the kernel would hang: an EmulationError naming each wait); inside a ``WarpGroupRange`` a ``Barrier`` (or a
wgmma fence with sync) synchronizes the range's threads, and a wait is made by them. A per-thread arrive counts one
arrival per active thread and completes the phase at the last one; cp.async by hand copies at once (so its arrival
after the copies, ``cp_async``, is an ordinary one) and its group instructions and proxy fences order nothing here.
A wait on a fresh barrier's parity 1 returns at once (the phase "before the first"), as the hand-written producers
expect. A phase with TMA bytes (``T.tma_copy(..., barrier=...)``) completes at a wait once its arrivals came and the
loads delivered the announced bytes: they land then, as in ``compiler.emulate_tma``.
"""

from __future__ import annotations

import torch

from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.tir import MbarrierWait, WarpGroupRange


def prepare(kernel) -> frozenset | None:
    """Once per launch of ``kernel``: the ids of its ``if`` statements whose arms wait on mbarriers when it is
    warp-specialized by hand (holds a WarpGroupRange), else None (``_Block.hand_ws``)."""
    from tileagent.compiler.interp_roles import waiting_ifs

    if not any(isinstance(x, WarpGroupRange) for x in walk(kernel.body)):
        return None
    return waiting_ifs(kernel.body, lambda x: isinstance(x, MbarrierWait))


def active(block) -> bool:
    """Whether the block's kernel is warp-specialized by hand (``prepare``)."""
    return block.hand_ws is not None


def warp_group_range(block, s: WarpGroupRange) -> None:
    want = (block.tid >= s.lo) & (block.tid < s.hi)
    if block.mask is None or not torch.equal(block.mask, want):
        raise EmulationError(f"WarpGroupRange [{s.lo}, {s.hi}) run by other threads than its own", s.span)
    outer, block.sync_group = getattr(block, "sync_group", None), block.mask
    try:
        block.body(s.body)
    finally:
        block.sync_group = outer


def concurrent_if(block, s, c) -> bool:
    """Run the arms of ``if`` ``s`` (condition values ``c``) as concurrent roles when they wait on mbarriers; False
    when they do not (the caller runs them one after the other)."""
    from tileagent.compiler.interp_roles import Scheduler

    if id(s) not in block.hand_ws:
        return False
    if getattr(block, "roles", None) is None:
        block.roles = Scheduler(_StateOf(block))
    arms = []
    for body, m in ((s.then_body, block.narrowed(c)), (s.else_body, block.narrowed(~c))):
        if body and m is not False:
            ids = block.tid if m is None else block.tid[m]
            arms.append((f"threads {int(ids[0])}-{int(ids[-1])}", lambda b=body, m=m: block.run_masked(b, m)))
    block.roles.run_arms(arms, s.span)
    return True


class _StateOf:
    """What one role keeps across its waits: the mask stack, loop mask, scalar environment and sync group."""

    def __init__(self, block):
        self.block = block

    def save_state(self):
        b = self.block
        return list(b.masks), b.loop_mask, dict(b.env), b.span, getattr(b, "sync_group", None)

    def restore_state(self, state) -> None:
        b = self.block
        masks, b.loop_mask, env, b.span, b.sync_group = state
        b.masks, b.env = list(masks), dict(env)


def wait(block, s: MbarrierWait, key, bar: dict) -> None:
    """A wait inside a warp-group arm: returns when the phase of its parity has completed, parking the role until
    then (a fresh barrier's parity 1 counts as completed)."""
    parity = int(block.uniform(block.ev(s.parity), "mbarrier parity")) & 1
    if not (parity != bar["phase"] & 1 or _complete(block, bar, key, s)):
        roles = getattr(block, "roles", None)
        if roles is None or roles.current() is roles.root:
            raise EmulationError(f"wait on {key[0].name}[{key[1]}] (parity {parity}) would hang: {bar['pending']} "
                                 f"arrival(s) missing and no other warp group runs to make them", s.span)
        name = f"{key[0].name}[{key[1]}]"
        if s.label is not None:  # the program's own barrier
            barriers, index = s.label
            at = int(block.uniform(block.ev(index), 'barrier index')) if barriers.counts[1:] else 0
            name = f"{barriers.name}[{at}]"
        roles.block(lambda: parity != bar["phase"] & 1 or _complete(block, bar, key, s),
                    f"{name} phase parity {parity}", s.span)
    # the wait acquires what the phase's arrivals released: the race detector's epochs cannot say whose, so a new
    # epoch begins (as at a warp group's barrier); the interpreter checks the branches exactly (interp_role_race)
    block.epoch += 1


def _complete(block, bar: dict, key, s) -> bool:
    """Complete the barrier's phase when its arrivals came and its TMA loads delivered the announced bytes (they land
    now); False when not yet."""
    from tileagent.compiler.emulate_tma import complete_phase

    if bar["pending"] > 0 or bar["delivered"] < bar["expected"] or not (bar["expected"] or bar["loads"]):
        return False
    complete_phase(block, bar, key, s.span)
    return True


def evaluate(block, e) -> None:
    """cp.async by hand (``compiler.language.cp_async``): each active thread's copy lands now; the program's
    ``T.fence_proxy_async()`` is each active thread's proxy fence (``emulate_wgmma.proxy_fence``); the rest orders
    nothing in this model."""
    from tileagent.compiler.emulate_wgmma import proxy_fence
    from tileagent.compiler.language.cp_async import CP_ASYNC, FENCE

    if e.name == FENCE:
        proxy_fence(block, None)
    if e.name != CP_ASYNC:
        return
    dst, src = e.args[0].args[0], e.args[1].args[0]
    n = int(e.args[2].value)
    ids = block.active()
    d = block.lanes(block.ev(dst.indices[0]), torch.int64)[ids]
    s_idx = block.lanes(block.ev(src.indices[0]), torch.int64)[ids]
    keep = torch.ones(ids.shape, dtype=torch.bool)
    if len(e.args) > 3:
        keep = block.lanes(block.ev(e.args[3]), torch.bool)[ids]
    step = torch.arange(n, dtype=torch.int64)
    dmem, smem = block.buffer_memory(dst.buffer), block.buffer_memory(src.buffer)
    di, si = (d[:, None] + step).reshape(-1), (s_idx[:, None] + step).reshape(-1)
    if bool(((di < 0) | (di >= dmem.numel())).any()) or bool(((si < 0) | (si >= smem.numel())).any()):
        raise EmulationError(f"cp.async by hand from '{src.buffer.name}' into '{dst.buffer.name}' out of bounds",
                             block.span)
    vals = smem[si].to(dmem.dtype)
    dmem[di] = torch.where(keep.repeat_interleave(n), vals, torch.zeros_like(vals))


HANDLERS = {WarpGroupRange: warp_group_range}
