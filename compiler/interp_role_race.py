"""Races between the warp-specialized branches of a block (``compiler.interp_roles``), found by happens-before.

The CPU interpreter runs a block's concurrent branches one at a time and hands over at barrier waits, so a branch
reading shared memory that another branch writes sees whatever that schedule gave it; on the GPU the branches run at
the same time and only the program's barriers order them. An arrive releases what its branch did before it; a wait
that sees a phase complete acquires what every arrive of that phase released; the code before a branch split
happens before the branches, and the branches before the code after them.

In: from the scheduler, each role's fork (its parent's clock) and the join of a split; from the interpreter, each
barrier arrive (barrier, index, the phase it counts toward), each completed wait (the phase it saw complete) and each
access of a shared buffer by a role (flat element indices of the running lanes, read or write, its span).
Out: RaceFault at the DSL line of the second access when two accesses of one shared element by different roles,
at least one a write, are not ordered by the barriers: it names the buffer, the element, both branches and both lines.
Guarantees: vector clocks (one epoch per role, advanced at each arrive): an access ordered after another through any
chain of arrives and completed waits is never reported, whatever order the interpreter happened to run them in; the
check does not depend on that order either. Not looked for: global memory, and accesses outside a branch split.
Cost: per access, a few torch operations over its elements; nothing for kernels without warp-specialized branches.
"""

from __future__ import annotations

import torch

from tileagent.compiler.errors import RaceFault


class RoleRaces:
    def __init__(self):
        self.clock: dict = {}  # role -> {role: epoch}
        self.index: dict = {}  # role -> its column in the shadow arrays
        self.roles: list = []
        self.phases: dict = {}  # (barrier key, phase) -> clock released into it
        self.shadow: dict = {}  # buffer -> _Shadow

    # -- clocks ----------------------------------------------------------------------------------------------
    def _clock(self, role) -> dict:
        c = self.clock.get(role)
        if c is None:  # forked: the parent's clock at the split (the parent waits while its branches run)
            c = dict(self._clock(role.parent)) if role.parent is not None else {}
            c[role] = 1
            self.clock[role] = c
            self.index[role] = len(self.roles)
            self.roles.append(role)
        return c

    @staticmethod
    def _join(into: dict, other: dict) -> None:
        for r, e in other.items():
            if into.get(r, 0) < e:
                into[r] = e

    def join(self, parent, children) -> None:
        """The split's branches ended: the parent's code after it follows everything they did."""
        mine = self._clock(parent)
        for c in children:
            self._join(mine, self._clock(c))
        mine[parent] = mine.get(parent, 1) + 1

    def arrive(self, role, key, phase: int) -> None:
        mine = self._clock(role)
        self._join(self.phases.setdefault((key, phase), {}), mine)
        mine[role] += 1

    def acquire(self, role, key, phase: int) -> None:
        self._join(self._clock(role), self.phases.get((key, phase), {}))

    # -- accesses --------------------------------------------------------------------------------------------
    def access(self, role, buf, flat: torch.Tensor, write: bool, span, numel: int) -> None:
        """Role ``role`` reads or writes elements ``flat`` (a 1-d int64 tensor) of shared buffer ``buf``."""
        if flat.numel() == 0:
            return
        mine = self._clock(role)
        me = self.index[role]
        sh = self.shadow.get(buf)
        if sh is None:
            sh = self.shadow[buf] = _Shadow(numel)
        sh.grow(len(self.roles))
        known = torch.tensor([mine.get(r, 0) for r in self.roles], dtype=torch.int64)
        w = sh.writer[flat]
        bad = (w >= 0) & (w != me)
        bad &= known[w.clamp(min=0)] < sh.w_epoch[flat]
        if bool(bad.any()):
            k = int(bad.nonzero()[0])
            self._report(buf, int(flat[k]), role, "reads" if not write else "writes", span,
                         self.roles[int(w[k])], "written", int(sh.w_line[flat[k]]))
        if write:
            for q in range(len(self.roles)):
                if q == me:
                    continue
                late = sh.r_epoch[q][flat] > known[q]
                if bool(late.any()):
                    k = int(late.nonzero()[0])
                    self._report(buf, int(flat[k]), role, "writes", span, self.roles[q], "read",
                                 int(sh.r_line[q][flat[k]]))
            sh.writer[flat] = me
            sh.w_epoch[flat] = mine[role]
            sh.w_line[flat] = span.line if span is not None else 0
        else:
            sh.r_epoch[me][flat] = mine[role]
            sh.r_line[me][flat] = span.line if span is not None else 0

    @staticmethod
    def _report(buf, element: int, role, verb: str, span, other, done: str, line: int) -> None:
        risk = "this read may see the value from before that write" if done == "written" else \
            "this write may land before that read"
        raise RaceFault(
            f"the block's warp-specialized branches race on shared '{buf.name}' (flat element {element}): "
            f"{role.name} {verb} it here, {done} by {other.name} at line {line}, and no barrier wait orders the two "
            f"(on the GPU the branches run at the same time: {risk})", span)


class _Shadow:
    """Per element of one shared buffer: its last writer (role column, -1: none), the writer's epoch and line, and per
    role the epoch and line of its last read."""

    def __init__(self, numel: int):
        self.numel = numel
        self.writer = torch.full((numel,), -1, dtype=torch.int64)
        self.w_epoch = torch.zeros(numel, dtype=torch.int64)
        self.w_line = torch.zeros(numel, dtype=torch.int32)
        self.r_epoch: list = []
        self.r_line: list = []

    def grow(self, roles: int) -> None:
        while len(self.r_epoch) < roles:
            self.r_epoch.append(torch.zeros(self.numel, dtype=torch.int64))
            self.r_line.append(torch.zeros(self.numel, dtype=torch.int32))
