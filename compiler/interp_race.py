"""Races between the iterations of one T.Parallel loop, found while the CPU interpreter (``compiler.interp``) runs it.

The interpreter runs each statement of a T.Parallel body for all iterations before the next statement, so an
iteration always sees the writes of the statements before it; on the GPU the iterations run concurrently, in no
fixed order. A kernel whose result depends on that order would pass on the CPU and be wrong, now and then, on the GPU.

In: a Parallel statement and its iteration shape (``watch``: which buffers to record, from the loop body), then, while
its body runs, each element load (``read``) and each store or atomic update (``write``) of a recorded buffer, with the
evaluated indices (tensors over the iteration space), the lanes that run it and its value; ``check`` after the body.
Out: ``check`` raises KernelFault at the DSL line of the racing access, naming the buffer, the element and the two
iterations; nothing otherwise.
Guarantees:
- recorded: the global and shared buffers that the body both loads and stores (two views of one storage count as one
  buffer: addresses are storage addresses), and the buffers it stores at indices not plainly one-to-one with the
  iterations (holding a loaded value, leaving out a loop variable, or mixing several in one index). A loop with
  none costs one walk of its body per kernel call.
- read-write race: an element that one iteration reads and a different iteration writes, by a store that changes the
  element (new bits != the bits before the store; NaNs alike, -0.0 == 0.0) or by an atomic update.
- write-write race: an element whose last stores by two different iterations leave different values.
- not races: an iteration's own reads and writes, in any order; several iterations storing the same value; atomic
  updates among themselves; accesses of lanes an ``if`` masks off; out-of-bounds global accesses (the interpreter
  drops them). Not looked for: races between two T.Parallel loops, between blocks, or between two executions of one
  loop (one per iteration of a loop around it); per-thread kernels (``T.get_thread_binding``).
- cost: a few torch operations over the recorded accesses (a sort of their addresses) per execution of a recorded
  loop; no Python loop over elements.
"""

from __future__ import annotations

import math

import torch

from tileagent.compiler.errors import KernelFault
from tileagent.compiler.ir.simplify import linear_form
from tileagent.compiler.ir.stmt import AtomicAdd, For, Let, Parallel, Store
from tileagent.compiler.ir.visit import loads, stmt_exprs, substitute, variables

_SCOPES = ("global", "shared", "shared.dyn")
_GPU = ("on the GPU the iterations of one T.Parallel run concurrently in no fixed order, so {what}; the CPU "
        "interpreter runs each statement for all iterations before the next, which hides it")
_HINT = {
    "global": "Make each element read and written by one iteration only (read from a tensor this loop does not write, "
              "e.g. the input rather than the output being updated), or do the writes in a later T.Kernel; "
              "accumulate with T.atomic_add / T.atomic_max / T.atomic_min",
    "shared": "Split the loop in two T.Parallel loops, the reads (into a fragment) in the first and the writes in the "
              "second (TileAgent places a barrier between them for shared memory), or make each element read and "
              "written by one iteration only; accumulate with T.atomic_add / T.atomic_max / T.atomic_min",
}
_HINT_WW = ("Make each element written by one iteration only (or by iterations that store the same value), or "
            "combine the values with T.atomic_add / T.atomic_max / T.atomic_min")


def plan(loop: Parallel) -> tuple[frozenset, frozenset, frozenset]:
    """(loaded, stored, scattered): the global and shared buffers the body of ``loop`` loads, stores (or updates
    atomically), and stores at indices not plainly one-to-one with the iterations."""
    loaded, stored, scattered = set(), set(), set()

    def visit(stmts, lets, inner):
        lets = dict(lets)
        for s in stmts:
            for e in stmt_exprs(s):
                loaded.update(ld.buffer for ld in loads(e) if ld.buffer.scope in _SCOPES)
            if isinstance(s, Let):
                lets[s.var] = substitute(s.value, lets)
            elif isinstance(s, (Store, AtomicAdd)) and s.buffer.scope in _SCOPES:
                stored.add(s.buffer)
                if isinstance(s, Store) and not _one_to_one(substitute(tuple(s.indices), lets), loop.vars, inner):
                    scattered.add(s.buffer)
            if isinstance(s, For):
                inner = inner | {s.var}
            for name in ("body", "then_body", "else_body"):
                visit(getattr(s, name, ()) or (), lets, inner)

    visit(loop.body, {}, frozenset())
    return frozenset(loaded), frozenset(stored), frozenset(scattered)


def _one_to_one(indices, loop_vars, inner) -> bool:
    """Whether the indices are shown to differ between any two iterations: each loop variable is, alone, the only
    varying part of some index (``bx * 64 + i``); no index holds a load or a variable of a loop inside the body."""
    covered = set()
    for e in indices:
        names = set(variables(e))
        if names & inner or next(loads(e), None) is not None:
            return False
        mine = [v for v in loop_vars if v in names]
        if len(mine) == 1:
            form = linear_form(e)
            if form is not None and form[0].get(mine[0], 0) != 0:
                covered.add(mine[0])
    return all(v in covered for v in loop_vars)


def watch(loop: Parallel, plans: dict, mem: dict, shape: tuple) -> Recorder | None:
    """The recorder for one execution of ``loop`` over ``shape`` (None when no buffer needs recording); ``plans``
    caches ``plan`` per loop, ``mem`` maps buffers to their tensors."""
    if loop not in plans:
        plans[loop] = plan(loop)
    loaded, stored, scattered = plans[loop]
    if not stored:
        return None
    key = {b: mem[b].untyped_storage().data_ptr() for b in loaded | stored}
    both = {key[b] for b in loaded} & {key[b] for b in stored}
    reads = {b for b in loaded if key[b] in both}
    writes = {b for b in stored if key[b] in both} | set(scattered)
    return Recorder(loop, shape, mem, reads, writes, key) if writes else None


def _bits(v: torch.Tensor, dtype) -> torch.Tensor:
    """``v`` as int64 keys that are equal exactly when the stored values are (NaNs alike, -0.0 == 0.0)."""
    if dtype == torch.uint32:
        return v.to(torch.int64) & 0xFFFFFFFF
    if v.is_floating_point():
        v = v.to(torch.float64)
        return torch.where(torch.isnan(v), torch.full_like(v, math.nan), v + 0.0).view(torch.int64)
    return v.to(torch.int64)


class _Access:
    """One load or store statement's accesses of a recorded buffer, over its running iterations."""

    __slots__ = ("kind", "buf", "span", "iters", "addrs", "idx", "changed", "keys", "vals")

    def __init__(self, kind, buf, span, iters, addrs, idx):
        self.kind, self.buf, self.span, self.iters, self.addrs, self.idx = kind, buf, span, iters, addrs, idx
        self.changed = self.keys = self.vals = None


class Recorder:
    """The accesses of recorded buffers during one execution of a T.Parallel loop (``watch``)."""

    def __init__(self, loop, shape, mem, reads, writes, key):
        self.loop, self.shape, self.mem, self.reads, self.writes, self.key = loop, shape, mem, reads, writes, key
        self.iters = torch.arange(math.prod(shape), dtype=torch.int64).reshape(shape)
        self.accesses: list[_Access] = []
        self.off = False  # indices that do not fit the iteration space (a nested loop): nothing is checked

    def _flat(self, buf, idx, keep, extra=()):
        """The running (iterations, flat indices, extras) of an access, and its byte addresses in the storage."""
        parts = [self.iters] + [torch.as_tensor(i) for i in idx] + [torch.as_tensor(x) for x in extra]
        if keep is not None:
            parts.append(torch.as_tensor(keep, dtype=torch.bool))
        try:
            parts = [p.reshape(-1) for p in torch.broadcast_tensors(*parts)]
        except RuntimeError:
            self.off = True
            return None
        if keep is not None:
            sel = parts.pop()
            parts = [p[sel] for p in parts]
        t = self.mem[buf]
        addrs = torch.full_like(parts[0], t.storage_offset())
        for i, stride in zip(parts[1:1 + len(idx)], t.stride()):
            addrs += i.to(torch.int64) * stride
        return parts, addrs * t.element_size()

    def read(self, buf, idx, keep, span) -> None:
        """A load of ``buf[idx]`` by the iterations where ``keep`` (None: all)."""
        flat = None if self.off else self._flat(buf, idx, keep)
        if flat is not None:
            parts, addrs = flat
            self.accesses.append(_Access("r", buf, span, parts[0], addrs, parts[1:]))

    def write(self, buf, idx, value, keep, span, atomic) -> None:
        """A store (``atomic`` False) or an atomic update of ``value`` into ``buf[idx]`` where ``keep``, before it
        happens."""
        flat = None if self.off else self._flat(buf, idx, keep, (value,))
        if flat is None:
            return
        parts, addrs = flat
        n = len(idx)
        a = _Access("a" if atomic else "w", buf, span, parts[0], addrs, parts[1:1 + n])
        t = self.mem[buf]
        if atomic:
            a.changed = torch.ones(addrs.shape, dtype=torch.bool)
        else:
            index = tuple(i.to(torch.int64) for i in a.idx)
            old = (t.view(torch.int32) if t.dtype == torch.uint32 else t)[index]
            a.vals = parts[1 + n] if t.dtype == torch.uint32 else parts[1 + n].to(t.dtype)
            a.keys = _bits(a.vals, t.dtype)
            a.changed = _bits(old, t.dtype) != a.keys
        self.accesses.append(a)

    # -- the check -------------------------------------------------------------------------------------------
    def check(self) -> None:
        """KernelFault at the first racing access (see the module docstring); reads against writes first."""
        if self.off:
            return
        groups: dict[int, list[_Access]] = {}
        for a in self.accesses:
            groups.setdefault(self.key[a.buf], []).append(a)
        for accesses in groups.values():
            self._read_write(accesses)
        for accesses in groups.values():
            self._write_write([a for a in accesses if a.kind == "w"])

    def _read_write(self, accesses) -> None:
        reads = [a for a in accesses if a.kind == "r"]
        writes = [a for a in accesses if a.kind != "r"]
        if not reads or not writes:
            return
        wa = torch.cat([a.addrs[a.changed] for a in writes])
        wi = torch.cat([a.iters[a.changed] for a in writes])
        if not len(wa):
            return
        uniq, inv = torch.unique(wa, return_inverse=True)
        lo = torch.zeros(uniq.shape, dtype=torch.int64).scatter_reduce(0, inv, wi, "amin", include_self=False)
        hi = torch.zeros(uniq.shape, dtype=torch.int64).scatter_reduce(0, inv, wi, "amax", include_self=False)
        for r in reads:  # in program order: the first racing read is reported
            pos = torch.searchsorted(uniq, r.addrs).clamp_(max=len(uniq) - 1)
            bad = (uniq[pos] == r.addrs) & ((lo[pos] != r.iters) | (hi[pos] != r.iters))
            if bool(bad.any()):
                k = int(bad.nonzero()[0])
                me, here = int(r.iters[k]), (wa == r.addrs[k]) & (wi != int(r.iters[k]))
                other = int(wi[here].min())  # the first other iteration that changes the element
                w = next(a for a in writes if bool(((a.addrs == r.addrs[k]) & (a.iters == other) & a.changed).any()))
                how = "updates atomically" if w.kind == "a" else "writes"
                what = f"the read may see the element before or after that {'update' if w.kind == 'a' else 'write'}"
                raise KernelFault(f"T.Parallel iterations race on {r.buf.name}: iteration ({self._it(me)}) reads "
                                  f"{self._elem(r, k)} that iteration ({self._it(other)}) {how}{self._at(w, r)} in "
                                  f"the same loop; {_GPU.format(what=what)}. "
                                  f"{_HINT['global' if r.buf.scope == 'global' else 'shared']}", r.span or w.span)

    def _write_write(self, writes) -> None:
        if not writes or (len(writes) == 1 and bool((writes[0].addrs[1:] > writes[0].addrs[:-1]).all())):
            return  # one store at increasing addresses: no element twice
        addrs = torch.cat([a.addrs for a in writes])
        uniq, rank = torch.unique(addrs, return_inverse=True)
        if len(uniq) == len(addrs):
            return
        iters, keys = torch.cat([a.iters for a in writes]), torch.cat([a.keys for a in writes])
        seq = torch.arange(len(addrs), dtype=torch.int64)
        pairs, pair = torch.unique(rank * (int(self.iters.numel()) + 1) + iters, return_inverse=True)
        last = torch.full(pairs.shape, -1, dtype=torch.int64).scatter_reduce(0, pair, seq, "amax")
        fr, fk = rank[last], keys[last]  # each iteration's last store to each element
        lo = torch.zeros(uniq.shape, dtype=torch.int64).scatter_reduce(0, fr, fk, "amin", include_self=False)
        hi = torch.zeros(uniq.shape, dtype=torch.int64).scatter_reduce(0, fr, fk, "amax", include_self=False)
        bad = (lo != hi).nonzero()
        if not len(bad):
            return
        here = last[fr == int(bad[0])]  # the element's last stores, one an iteration: the first two that differ
        here = here[torch.argsort(iters[here])]
        second = here[keys[here] != keys[here[0]]][0]
        (a, i), (b, j) = self._locate(writes, int(here[0])), self._locate(writes, int(second))
        what = "which value the element keeps depends on which iteration stores last"
        raise KernelFault(f"T.Parallel iterations race on {a.buf.name}: iterations ({self._it(int(a.iters[i]))}) and "
                          f"({self._it(int(b.iters[j]))}) write different values to {self._elem(a, i)} "
                          f"({a.vals[i].item()} and {b.vals[j].item()}{self._at(b, a)}) in the same loop; "
                          f"{_GPU.format(what=what)}. {_HINT_WW}", a.span or b.span)

    # -- naming ----------------------------------------------------------------------------------------------
    @staticmethod
    def _locate(accesses, n):
        """The access and the position in it of entry ``n`` of the accesses' concatenation."""
        for a in accesses:
            if n < len(a.addrs):
                return a, n
            n -= len(a.addrs)
        raise IndexError(n)

    def _it(self, flat: int) -> str:
        values = []
        for extent in reversed(self.shape):
            flat, v = divmod(flat, extent)
            values.append(v)
        return ", ".join(f"{var.name}={v}" for var, v in zip(self.loop.vars, reversed(values)))

    @staticmethod
    def _elem(a: _Access, k: int) -> str:
        return f"{a.buf.name}[{', '.join(str(int(i[k])) for i in a.idx)}]"

    @staticmethod
    def _at(a: _Access, b: _Access) -> str:
        """`` at line N`` when access ``a`` is on another line than ``b``."""
        if a.span is None or (b.span is not None and a.span.line == b.span.line):
            return ""
        return f" at line {a.span.line}"
