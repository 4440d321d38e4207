"""Races between the iterations of one T.Parallel loop, found while the CPU interpreter (``compiler.interp``) runs it.

The interpreter runs each statement of a T.Parallel body for all iterations before the next statement, so an
iteration always sees the writes of the statements before it; on the GPU the iterations run concurrently, in no
fixed order. A kernel whose result depends on that order would pass on the CPU and be wrong, now and then, on the GPU.

In: a Parallel statement and its iteration shape (``watch``: which buffers to record, from the loop body), then, while
its body runs, each element load (``read``) and each store or atomic update (``write``) of a recorded buffer, with the
evaluated indices (tensors over the iteration space), the lanes that run it and its value; ``check`` after the body.
Out: ``check`` raises RaceFault at the DSL line of the racing access, naming the buffer, the element and the two
iterations; nothing otherwise.
Guarantees:
- recorded: the global and shared buffers that the body both loads and stores (two views of one storage count as one
  buffer: addresses are storage addresses), unless every access of one uses the same index, shown one-to-one with
  the iterations (``Y[r, c] = Y[r, c] * 2``); and the buffers it stores at indices not shown one-to-one (holding a
  loaded value, leaving out a loop variable, or mixing several in one index whose coefficients may collide). A
  loop with none costs one walk of its body per kernel call (``plan``), and a dict lookup per access.
- read-write race: an element that one iteration reads and a different iteration writes, by a store that changes the
  element (new bits != the bits before the store; NaNs alike, -0.0 == 0.0) or by an atomic update; where the reading
  iteration stores to the element too (a read-modify-write: ``hist[ids[i]] += 1``), the hint is the atomic update.
- write-write race: an element whose last stores by two different iterations leave different values.
- not races: an iteration's own reads and writes, in any order; several iterations storing the same value; atomic
  updates among themselves; accesses of lanes an ``if`` masks off; out-of-bounds global accesses (the interpreter
  drops them). Not looked for: races between two T.Parallel loops, between blocks, or between two executions of one
  loop (one per iteration of a loop around it); per-thread kernels (``T.get_thread_binding``). Both branches of a
  ``T.if_then_else`` count as read, as the interpreter evaluates both.
- cost: torch operations over the recorded accesses per execution of a recorded loop (a count or a sort of their
  addresses); no Python loop over elements. About 2-3x the interpreter's time on a one-statement recorded loop,
  nothing measurable on loops not recorded.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from tileagent.compiler.errors import RaceFault
from tileagent.compiler.ir.simplify import linear_form, static_int
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
_HINT_RMW = ("Several iterations read this element and write it back: their updates get lost in any order, also "
             "with the reads and the writes split into two loops; where one update an element is meant, read the "
             "value from a tensor this loop does not write (the input rather than the output being updated); where "
             "every iteration's update counts (a histogram, a scatter-add), update it in place with "
             "T.atomic_add(buffer[index], value) (or T.atomic_max / T.atomic_min), one atomic per iteration")
_HINT_WW = ("Make each element written by one iteration only (or by iterations that store the same value), or "
            "combine the values with T.atomic_add / T.atomic_max / T.atomic_min")


class Plan(NamedTuple):
    """What the body of a T.Parallel does to global and shared buffers (``plan``)."""

    loaded: frozenset  # buffers it loads
    stored: frozenset  # buffers it stores or updates atomically
    scattered: frozenset  # buffers it stores at indices not shown one-to-one with the iterations
    owned: frozenset  # buffers every access of which uses one index, shown one-to-one: each element is one iteration's


def plan(loop: Parallel) -> Plan:
    """The Plan of ``loop`` (indices compared after substituting the body's ``Let`` values)."""
    loaded, stored, scattered, indices = set(), set(), set(), {}
    extents = {v: static_int(e) for v, e in zip(loop.vars, loop.extents)}

    def visit(stmts, lets, inner):
        lets = dict(lets)
        for s in stmts:
            for e in stmt_exprs(s):
                for ld in loads(e):
                    if ld.buffer.scope in _SCOPES:
                        loaded.add(ld.buffer)
                        indices.setdefault(ld.buffer, []).append((substitute(tuple(ld.indices), lets), inner))
            if isinstance(s, Let):
                lets[s.var] = substitute(s.value, lets)
            elif isinstance(s, (Store, AtomicAdd)) and s.buffer.scope in _SCOPES:
                stored.add(s.buffer)
                at = substitute(tuple(s.indices), lets)
                indices.setdefault(s.buffer, []).append((at, inner))
                if isinstance(s, Store) and not _one_to_one(at, extents, inner):
                    scattered.add(s.buffer)
            if isinstance(s, For):
                inner = inner | {s.var}
            for name in ("body", "then_body", "else_body"):
                visit(getattr(s, name, ()) or (), lets, inner)

    visit(loop.body, {}, frozenset())
    owned = {b for b, uses in indices.items()
             if len({_form(at) for at, _ in uses}) == 1 and all(_one_to_one(at, extents, inner) for at, inner in uses)}
    return Plan(frozenset(loaded), frozenset(stored), frozenset(scattered), frozenset(owned))


def _form(indices):
    """A key equal for two index tuples that are the same linear functions (None-free: else the tuple itself)."""
    forms = [linear_form(e) for e in indices]
    if any(f is None for f in forms):
        return tuple(id(e) for e in indices)  # only the very same expressions (one Let value used twice) match
    return tuple((frozenset(f[0].items()), f[1]) for f in forms)


def _one_to_one(indices, extents: dict, inner) -> bool:
    """Whether the indices are shown to differ between any two iterations (``extents``: each loop variable's static
    extent, or None): no index holds a load or a variable of a loop inside the body, and each loop variable is
    covered by some linear index, in which the variables it holds, sorted by coefficient, have each a coefficient
    larger than the span of the ones before (``(by * 64 + i) * 1024 + j`` with j < 1024)."""
    covered = set()
    for e in indices:
        names = set(variables(e))
        if names & inner or next(loads(e), None) is not None:
            return False
        mine = [v for v in extents if v in names]
        form = linear_form(e) if mine else None
        if form is None or any(form[0].get(v, 0) == 0 for v in mine):
            continue
        span, ok = 0, True
        for v in sorted(mine, key=lambda v: abs(form[0][v])):
            if len(mine) > 1 and (extents[v] is None or abs(form[0][v]) <= span):
                ok = False
                break
            span += abs(form[0][v]) * ((extents[v] or 1) - 1)
        if ok:
            covered.update(mine)
    return all(v in covered for v in extents)


def watch(loop: Parallel, plans: dict, mem: dict, shape: tuple) -> Recorder | None:
    """The recorder for one execution of ``loop`` over ``shape`` (None when no buffer needs recording); ``plans``
    caches ``plan`` per loop, ``mem`` maps buffers to their tensors."""
    if loop not in plans:
        plans[loop] = plan(loop)
    p = plans[loop]
    if not p.stored:
        return None
    key = {b: mem[b].untyped_storage().data_ptr() for b in p.loaded | p.stored if b in mem}
    users: dict[int, int] = {}
    for k in key.values():
        users[k] = users.get(k, 0) + 1
    loaded, stored = p.loaded & key.keys(), p.stored & key.keys()
    both = {key[b] for b in loaded} & {key[b] for b in stored}
    both -= {key[b] for b in p.owned & key.keys() if users[key[b]] == 1}  # its elements are one iteration's each
    reads = {b for b in loaded if key[b] in both}
    writes = {b for b in stored if key[b] in both} | (p.scattered & key.keys())
    return Recorder(loop, shape, mem, reads, writes, key) if writes else None


_INT_OF = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(v: torch.Tensor, dtype) -> torch.Tensor:
    """``v`` as integers that are equal exactly when the stored values are (NaNs alike, -0.0 == 0.0)."""
    if dtype == torch.uint32:
        return v.to(torch.int64) & 0xFFFFFFFF
    if v.is_floating_point():
        if v.element_size() == 1:  # float8: no arithmetic on CPU
            v = v.to(torch.float32)
        v = torch.where(torch.isnan(v), torch.full_like(v, math.nan), v + 0)
        return v.view(_INT_OF[v.element_size()])
    return v


def _broadcast(*shapes) -> tuple:
    """The broadcast of ``shapes`` (RuntimeError when they do not broadcast), without torch's slower helper."""
    out = [1] * max(map(len, shapes))
    for shape in shapes:
        for k, n in enumerate(shape, len(out) - len(shape)):
            if n != 1 and out[k] not in (1, n):
                raise RuntimeError(f"shapes {shapes} do not broadcast")
            out[k] = n if n != 1 else out[k]
    return tuple(out)


def _num(v: torch.Tensor) -> str:
    """A stored value as the message shows it: floats to 6 digits, keeping a point (2.0), integers exactly."""
    x = v.item()
    if not isinstance(x, float):
        return str(x)
    text = f"{x:.6g}"
    return text if any(c in text for c in ".eni") else text + ".0"


class _Access:
    """One load or store statement's accesses of a recorded buffer, over its running iterations: ``iters`` and
    ``addrs`` (byte addresses in the storage) one entry an access; ``at`` its indices (ints or broadcastable
    tensors), ``shape`` their broadcast shape and ``sel`` the running entries of it (None: all)."""

    __slots__ = ("kind", "buf", "span", "iters", "addrs", "at", "shape", "sel", "changed", "vals")

    def __init__(self, kind, buf, span, at, shape, sel):
        self.kind, self.buf, self.span, self.at, self.shape, self.sel = kind, buf, span, at, shape, sel
        self.iters = self.addrs = self.changed = self.vals = None  # stores: whether each changes its element, values

    def entries(self, x) -> torch.Tensor:
        """``x`` (broadcastable to the access) at the running entries, flat."""
        flat = torch.as_tensor(x).expand(self.shape).reshape(-1)
        return flat if self.sel is None else flat[self.sel]


class _Numbering:
    """Compact numbers (``of``) for a set of byte addresses in units of ``unit`` bytes: offsets from the least when
    their range is small (no sort), else ranks among the distinct ones (``size``: how many numbers)."""

    def __init__(self, addrs: torch.Tensor, unit: int):
        self.unit, lo, hi = unit, int(addrs.min()), int(addrs.max())
        self.dense = (hi - lo) // unit <= 4 * len(addrs) + 65536
        if self.dense:
            self.lo, self.size, self.of = lo, (hi - lo) // unit + 1, (addrs - lo) // unit
        else:
            self.uniq, self.of = torch.unique(addrs, return_inverse=True)
            self.size = len(self.uniq)

    def lookup(self, addrs: torch.Tensor):
        """(numbers, found) of other addresses; numbers are valid where found."""
        if self.dense:
            pos = (addrs - self.lo) // self.unit
            found = (pos >= 0) & (pos < self.size)
            return pos.clamp_(0, self.size - 1), found
        pos = torch.searchsorted(self.uniq, addrs).clamp_(max=self.size - 1)
        return pos, self.uniq[pos] == addrs


class Recorder:
    """The accesses of recorded buffers during one execution of a T.Parallel loop (``watch``)."""

    def __init__(self, loop, shape, mem, reads, writes, key):
        self.loop, self.shape, self.mem, self.reads, self.writes, self.key = loop, shape, mem, reads, writes, key
        self.iters = torch.arange(math.prod(shape), dtype=torch.int64).reshape(shape)
        self.read_keys = {key[b] for b in reads}
        self.accesses: list[_Access] = []
        self.off = False  # indices that do not fit the iteration space (a nested loop): nothing is checked

    def _access(self, kind, buf, idx, keep, span, value=None) -> _Access | None:
        """The access's iterations and addresses, its indices kept for the message (None when they do not fit)."""
        if self.off:
            return None
        idx = [torch.as_tensor(i) for i in idx]
        keep = None if keep is None else torch.as_tensor(keep, dtype=torch.bool)
        more = ([] if keep is None else [keep.shape]) + ([] if value is None else [torch.as_tensor(value).shape])
        try:
            shape = _broadcast(tuple(self.iters.shape), *(tuple(i.shape) for i in idx), *map(tuple, more))
        except RuntimeError:
            self.off = True
            return None
        t = self.mem[buf]
        a = _Access(kind, buf, span, idx, shape, None if keep is None else keep.expand(shape).reshape(-1))
        addrs = t.storage_offset()
        for i, stride in zip(idx, t.stride()):
            addrs = addrs + i.to(torch.int64) * stride
        a.addrs, a.iters = a.entries(addrs * t.element_size()), a.entries(self.iters)
        return a

    def read(self, buf, idx, keep, span) -> None:
        """A load of ``buf[idx]`` by the iterations where ``keep`` (None: all)."""
        a = self._access("r", buf, idx, keep, span)
        if a is not None:
            self.accesses.append(a)

    def write(self, buf, idx, value, keep, span, atomic) -> None:
        """A store (``atomic`` False) or an atomic update of ``value`` into ``buf[idx]`` where ``keep``, before it
        happens."""
        a = self._access("a" if atomic else "w", buf, idx, keep, span, value)
        if a is None:
            return
        t = self.mem[buf]
        if atomic:
            a.changed = torch.ones(a.addrs.shape, dtype=torch.bool)
        else:
            a.vals = a.entries(value if t.dtype == torch.uint32 else torch.as_tensor(value).to(t.dtype))
            if self.key[buf] in self.read_keys:  # whether the store changes the element matters to the reads only
                whole = t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
                old = (whole.view(torch.int32) if t.dtype == torch.uint32 else whole)[a.addrs // t.element_size()]
                a.changed = _bits(old, t.dtype) != _bits(a.vals, t.dtype)
        self.accesses.append(a)

    # -- the check -------------------------------------------------------------------------------------------
    def check(self) -> None:
        """RaceFault at the first racing access (see the module docstring); reads against writes first."""
        if self.off:
            return
        groups: dict[int, list[_Access]] = {}
        for a in self.accesses:
            groups.setdefault(self.key[a.buf], []).append(a)
        for accesses in groups.values():
            self._read_write(accesses)
        for accesses in groups.values():
            self._write_write([a for a in accesses if a.kind == "w"])

    def _unit(self, accesses) -> int:
        return min(self.mem[a.buf].element_size() for a in accesses)

    def _read_write(self, accesses) -> None:
        reads = [a for a in accesses if a.kind == "r" and len(a.addrs)]
        writes = [a for a in accesses if a.kind != "r"]
        if not reads or not writes:
            return
        wa = torch.cat([a.addrs[a.changed] for a in writes])
        if not len(wa) or all(int(r.addrs.max()) < int(wa.min()) or int(r.addrs.min()) > int(wa.max()) for r in reads):
            return  # nothing changed, or no read in the range of the changes
        wi = torch.cat([a.iters[a.changed] for a in writes])
        num = _Numbering(wa, self._unit(accesses))
        lo = torch.zeros(num.size, dtype=torch.int64).scatter_reduce_(0, num.of, wi, "amin", include_self=False)
        hi = torch.full((num.size,), -1, dtype=torch.int64).scatter_reduce_(0, num.of, wi, "amax")
        for r in reads:  # in program order: the first racing read is reported
            pos, found = num.lookup(r.addrs)
            bad = found & (hi[pos] >= 0) & ((lo[pos] != r.iters) | (hi[pos] != r.iters))
            if bool(bad.any()):
                k = int(bad.nonzero()[0])
                me, here = int(r.iters[k]), (wa == r.addrs[k]) & (wi != int(r.iters[k]))
                other = int(wi[here].min())  # the first other iteration that changes the element
                w = next(a for a in writes if bool(((a.addrs == r.addrs[k]) & (a.iters == other) & a.changed).any()))
                how = "updates atomically" if w.kind == "a" else "writes"
                rmw = any(bool(((a.addrs == r.addrs[k]) & (a.iters == me)).any()) for a in writes if a.kind == "w")
                what = f"the read may see the element before or after that {'update' if w.kind == 'a' else 'write'}"
                raise RaceFault(f"T.Parallel iterations race on {r.buf.name}: iteration ({self._it(me)}) reads "
                                 f"{self._elem(r, k)} that iteration ({self._it(other)}) {how}{self._at(w, r)} in "
                                 f"the same loop; {_GPU.format(what=what)}. "
                                 f"{_HINT_RMW if rmw else _HINT['global' if r.buf.scope == 'global' else 'shared']}",
                                 r.span or w.span)

    def _write_write(self, writes) -> None:
        writes = [a for a in writes if len(a.addrs)]
        if not writes or (len(writes) == 1 and bool((writes[0].addrs[1:] > writes[0].addrs[:-1]).all())):
            return  # one store at increasing addresses: no element twice
        addrs = torch.cat([a.addrs for a in writes])
        num = _Numbering(addrs, self._unit(writes))
        if (num.dense and int(torch.bincount(num.of, minlength=num.size).max()) <= 1) or num.size == len(addrs):
            return  # no element stored twice
        iters = torch.cat([a.iters for a in writes])
        keys = torch.cat([_bits(a.vals, self.mem[a.buf].dtype).to(torch.int64) for a in writes])
        last = torch.arange(len(addrs), dtype=torch.int64)
        if len(writes) > 1:  # an iteration may store to an element twice: its last store counts
            pairs, pair = torch.unique(num.of * (int(self.iters.numel()) + 1) + iters, return_inverse=True)
            last = torch.full(pairs.shape, -1, dtype=torch.int64).scatter_reduce_(0, pair, last, "amax")
        fr, fk = num.of[last], keys[last]  # each iteration's last store to each element
        lo = torch.zeros(num.size, dtype=torch.int64).scatter_reduce_(0, fr, fk, "amin", include_self=False)
        hi = torch.zeros(num.size, dtype=torch.int64).scatter_reduce_(0, fr, fk, "amax", include_self=False)
        bad = (lo != hi).nonzero()
        if not len(bad):
            return
        here = last[fr == int(bad[0])]  # the element's last stores, one an iteration: the first two that differ
        here = here[torch.argsort(iters[here])]
        second = here[keys[here] != keys[here[0]]][0]
        (a, i), (b, j) = self._locate(writes, int(here[0])), self._locate(writes, int(second))
        what = "which value the element keeps depends on which iteration stores last"
        raise RaceFault(f"T.Parallel iterations race on {a.buf.name}: iterations ({self._it(int(a.iters[i]))}) and "
                         f"({self._it(int(b.iters[j]))}) write different values to {self._elem(a, i)} "
                         f"({_num(a.vals[i])} and {_num(b.vals[j])}{self._at(b, a)}) in the same loop; "
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
        return f"{a.buf.name}[{', '.join(str(int(a.entries(i)[k])) for i in a.at)}]"

    @staticmethod
    def _at(a: _Access, b: _Access) -> str:
        """`` at line N`` when access ``a`` is on another line than ``b``."""
        if a.span is None or (b.span is not None and a.span.line == b.span.line):
            return ""
        return f" at line {a.span.line}"
