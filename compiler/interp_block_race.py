"""Races between thread blocks on atomically updated global memory, found while the CPU interpreter runs a kernel.

The interpreter runs a kernel's blocks one after another, so an element that block 0 sets (``out[i] = 0``) and the
other blocks then add to (``T.atomic_add(out[i], part)``) comes out right on the CPU; on the GPU the blocks run in no
fixed order and the store may land after some of the additions (played LLM session 36: a layer norm backward that
zeroed dgamma in the kernel that accumulates it passed every CPU check).

Likewise a read-modify-write by plain loads and stores (``acc[s, j] = acc[s, j] + x``) from several blocks adds
every part on the CPU and loses updates on the GPU (played LLM 48b: a segment mean over 2048 blocks, exported).

In: a T.Kernel (``watch``: the global buffers its body updates atomically, element or tile atomics of any op, and
those it both reads and writes with plain accesses; None when there are none: nothing is recorded), then, block by
block (``block``), each plain write of such a buffer (a store, a tile op's region) and each atomic update (``note``).
Out: ``check`` after the last block raises RaceFault at the DSL line of the store, naming the buffer, the element and
two blocks: one that stored it and another that updated it atomically, or two that stored it, in the same launch;
nothing otherwise.
Guarantees: a race is an element that a plain write of one block and an atomic update of a different block both
reach in one launch (in either order), or, in a buffer the kernel also reads, plain writes of two blocks of which
the later changes the value the earlier left (seen after each block). Not races: a block's own stores and updates of
an element (its threads order them with barriers), atomic updates among themselves, writes in an earlier T.Kernel
scope (another launch), the same value stored again (a flag), two blocks' writes to a buffer the kernel only writes.
Not looked for: a block reading what another wrote (no record of loads).
Cost: two int32 tensors the size of each watched buffer per launch, and an indexed write into them per watched
store or update.
"""

from __future__ import annotations

import math

import torch

from tileagent.compiler.errors import RaceFault
from tileagent.compiler.ir.stmt import AtomicAdd, AtomicAddTile, Store
from tileagent.compiler.ir.visit import loads, stmt_exprs, walk


def watch(kernel, mem: dict) -> "BlockRaces | None":
    """A recorder for ``kernel``'s launch, or None when no global buffer of it is updated atomically or both read
    and stored by plain accesses."""
    bufs = {s.buffer for s in walk(kernel.body) if isinstance(s, AtomicAdd)}
    bufs |= {s.dst.buffer for s in walk(kernel.body) if isinstance(s, AtomicAddTile)}
    read = {ld.buffer for s in walk(kernel.body) for e in stmt_exprs(s) for ld in loads(e)}
    read |= {getattr(x, "buffer", x) for s in walk(kernel.body) for x in (getattr(s, "src", None),) if x is not None}
    rmw = {s.buffer for s in walk(kernel.body) if isinstance(s, Store) and s.buffer in read}
    bufs = [b for b in bufs | rmw if b.scope == "global" and b in mem]
    return BlockRaces({b: mem[b].shape for b in bufs}, {b: mem[b] for b in rmw if b in bufs}) if bufs else None


class BlockRaces:
    def __init__(self, shapes: dict, rmw: dict | None = None):
        self.shapes, self.rmw = shapes, rmw or {}  # rmw: buffer read and stored by plain accesses -> its memory
        self.value = {b: torch.empty(t.numel(), dtype=t.dtype) for b, t in self.rmw.items()}  # after its last storer
        self.touched: dict = {b: [] for b in self.rmw}  # (elements, the block that stored each before) this block
        self.stored_twice: dict = {}  # buffer -> (element, first block, second block) of its first race
        self.stored = {b: torch.full((math.prod(s),), -1, dtype=torch.int32) for b, s in shapes.items()}
        self.updated = {b: torch.full((math.prod(s),), -1, dtype=torch.int32) for b, s in shapes.items()}
        self.updated_by_two = {b: torch.zeros((math.prod(s),), dtype=torch.bool) for b, s in shapes.items()}
        self.spans: dict = {}  # (buffer, "store" / "atomic") -> the first such access's span
        self.current = 0

    def block(self, linear: int) -> None:
        """The block that runs from now on (its linear index in launch order)."""
        self._settle()
        self.current = linear

    def _settle(self) -> None:
        """After a block: the elements of read-and-stored buffers it stored whose value it changed from the one
        another block stored (the same value stored again, a flag, is no race); the first found is kept."""
        for buf, parts in self.touched.items():
            if parts and buf not in self.stored_twice:
                flat, prior = (torch.cat(x) for x in zip(*parts))
                now = self.rmw[buf].reshape(-1)[flat]
                bits = (now.view(torch.uint8).reshape(len(flat), -1) !=  # any dtype (fp8, bool); a NaN stored again
                        self.value[buf][flat].view(torch.uint8).reshape(len(flat), -1)).any(1)  # is the same value
                changed = (prior >= 0) & (prior != self.current) & bits
                if bool(changed.any()):
                    k = int(changed.nonzero()[0])
                    self.stored_twice[buf] = (int(flat[k]), int(prior[k]), self.current)
                self.value[buf][flat] = now
            parts.clear()

    def note(self, buf, flat: torch.Tensor, span, atomic: bool) -> None:
        """A plain write (``atomic`` False) or an atomic update of the elements ``flat`` (linear indices) of
        ``buf`` by the current block."""
        if buf not in self.stored or flat.numel() == 0:
            return
        self.spans.setdefault((buf, "atomic" if atomic else "store"), span)
        if not atomic:
            if buf in self.rmw:
                self.touched[buf].append((flat, self.stored[buf][flat]))  # a copy: who stored them before
            self.stored[buf][flat] = self.current
            return
        seen = self.updated[buf][flat]
        self.updated_by_two[buf][flat] |= (seen >= 0) & (seen != self.current)
        self.updated[buf][flat] = torch.where(seen >= 0, seen, torch.full_like(seen, self.current))

    def check(self) -> None:
        self._settle()
        for buf, (k, first, second) in self.stored_twice.items():
            element = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), self.shapes[buf])) \
                if self.shapes[buf] else ()
            raise RaceFault(
                f"thread blocks race on '{buf.name}': element {list(element)} is read and stored by block {first} "
                f"and by block {second} in the same kernel launch; blocks run at the same time on the GPU, so one "
                f"block's store can overwrite another's update of the element (the CPU runs blocks one after "
                f"another). Add into such an element with T.atomic_add, or give each block elements of its own and "
                f"combine them in a later T.Kernel scope", self.spans.get((buf, "store")))
        for buf, stored in self.stored.items():
            updated, two = self.updated[buf], self.updated_by_two[buf]
            race = (stored >= 0) & (updated >= 0) & (two | (updated != stored))
            if not bool(race.any()):
                continue
            k = int(race.nonzero()[0])
            element = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), self.shapes[buf])) \
                if self.shapes[buf] else ()
            store, atomic = self.spans.get((buf, "store")), self.spans.get((buf, "atomic"))
            other = "other blocks" if bool(two[k]) else f"block {int(updated[k])}"
            at = f" at line {atomic.line}" if atomic is not None else ""
            raise RaceFault(
                f"thread blocks race on '{buf.name}': element {list(element)} is stored by block {int(stored[k])} "
                f"and updated atomically by {other}{at} in the same kernel launch; blocks run in no fixed order on "
                f"the GPU, so the store may land after some of the updates (the CPU runs blocks one after "
                f"another). Initialize it in an earlier T.Kernel scope, or update it atomically everywhere", store)
