"""Block barriers that order nothing: the first of two with nothing between them to order, and one whose two sides
touch different memory.

In: a lowered ``DeviceModule`` (thread IR, after ``compiler.lower.forward_shared``). Out: the same module where

1. in one statement list, a ``Barrier`` followed by quiet statements (below) and then another ``Barrier`` of the
   same list loses the first. Every access before the first barrier stays ordered against every access after the
   second, and the statements between touch no memory another thread of the block touches in an order the first
   barrier decided. Why: a reduction that goes through shared memory closes with a barrier (its scratch may be
   written again), and the register work after it often ends at the barrier before the next shared-memory write
   (TileLang's LayerNorm forward: statistics, then the normalized row into the output tile); each barrier costs the
   row's block a round of its warps.
2. (with ``TILEAGENT_DROP_BARRIERS=sides``) a ``Barrier`` whose two sides (back to the previous barrier of its
   statement list, on to the next one; in the kernel's own list also the kernel's start or end) touch different
   global tensors and shared bytes, or only read the same ones, is dropped: whatever one side touches, the other does
   not write, so no access of one thread needs ordering against another thread's. The sides may hold only the
   statement kinds of ``_KINDS`` and the async-proxy fence (anything else, an asynchronous copy, an mbarrier, a
   tensor-core step, keeps the barrier); shared buffers are told apart by their bytes in the arena (buffers whose
   lives do not overlap share bytes). Why: barriers are placed on the tile IR, before ``forward_shared`` serves a
   tile's reads from registers; TileLang's LayerNorm forward then kept a barrier after its copies (its rows now read
   only from registers) and the reduction's closing one: 2 of its 4 barriers, and 64 registers a thread (48 without
   them).

Quiet statements (rule 1):

- ``Declare``, ``Let``, and stores (``Store``, ``VecCopy``) into registers (scope "local");
- stores into a global tensor the kernel never loads, and stores only inside this stretch (no other writer to race
  with once the barrier is gone);
- loops and ifs whose own expressions and bodies are quiet;
and every expression of them loads only registers or global tensors the kernel never writes, and calls only math
and warp shuffles. Tensors are told apart by identity, as everywhere in the compiler (a tensor passed twice is
the caller's aliasing); a kernel that places a tensor at an address (``T.make_tensor``) or calls external code is
left as it was. ``TILEAGENT_DROP_BARRIERS=0`` switches it off; the second rule runs only with ``=sides``: measured
on an H100 (BENCHMARKS.md, round 2 session 44) it gained nothing on TileLang's LayerNorm and RMSNorm and on six suite
configs, and its one change to the suite's RMSNorm at D=4096 (the closing barrier before the epilogue) came with
0.90x torch.compile against 1.00x without it.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import replace

from tileagent.compiler.intrinsics import MATH
from tileagent.compiler.ir.expr import Call, Expr, Load
from tileagent.compiler.ir.stmt import Buffer, Evaluate, For, If, Let, Store, While
from tileagent.compiler.ir.visit import loads, walk
from tileagent.compiler.tir import AsyncProxyFence, Barrier, Declare, DeviceModule, GlobalAt, VecCopy

_PURE_CALLS = frozenset(MATH) | {"shfl_xor"}
_KINDS = (Declare, Let, Store, VecCopy, For, If, While)  # the statements a stretch between barriers may hold


def enabled() -> bool:
    """Whether the rewrite runs (``TILEAGENT_DROP_BARRIERS=0`` switches it off, for A/B runs)."""
    return os.environ.get("TILEAGENT_DROP_BARRIERS", "").strip() != "0"


def sides_enabled() -> bool:
    """Whether barriers whose sides touch different memory go too (``TILEAGENT_DROP_BARRIERS=sides`` only)."""
    return os.environ.get("TILEAGENT_DROP_BARRIERS", "").strip() == "sides"


def drop_redundant_barriers(module: DeviceModule) -> DeviceModule:
    """``module`` without the barriers the module docstring describes."""
    kernels = []
    for k in module.kernels:
        facts = _facts(k.body, k.shared_offsets)
        kernels.append(k if facts is None else replace(k, body=_stmts(tuple(k.body), facts, sides_enabled())))
    return replace(module, kernels=tuple(kernels))


@dataclasses.dataclass
class _Facts:
    loaded: set  # global tensors some expression loads, or a statement of another kind names
    written: set  # global tensors something writes
    stores: Counter  # global tensor -> the Store / VecCopy statements into it
    shared: dict  # shared buffer -> its bytes in the arena, (start, end): buffers with disjoint lives share bytes

    def overlap(self, a: set, b: set) -> bool:
        """Whether buffers of ``a`` and ``b`` share memory: the same tensor, or shared buffers whose bytes meet (one
        without a place in the arena meets every shared buffer)."""
        def span(x):
            return self.shared.get(x, (0, 1 << 62))

        return bool(a & b) or any(span(x)[0] < span(y)[1] and span(y)[0] < span(x)[1]
                                  for x in a if x.scope != "global" for y in b if y.scope != "global")


def _facts(body, shared_offsets: dict) -> _Facts | None:
    """What the kernel does to its global tensors; None where it places tensors or calls external code."""
    f = _Facts(set(), set(), Counter(), {b: (o, o + b.static_bytes()) for b, o in shared_offsets.items()})
    for s in walk(body):
        if isinstance(s, (GlobalAt, Evaluate)):
            return None
        for e in _exprs(s):
            f.loaded.update(x.buffer for x in loads(e) if x.buffer.scope == "global")
        if isinstance(s, (Store, VecCopy)):
            dst = _dst(s)
            if isinstance(s, VecCopy) and s.src.scope == "global":
                f.loaded.add(s.src)
            if dst.scope == "global":
                f.written.add(dst)
                f.stores[dst] += 1
        elif not isinstance(s, (Declare, Let, For, If, While, Barrier)):  # any other kind: reads and writes what it names
            named = _buffers(s)
            f.loaded |= named
            f.written |= named
    return f


def _stmts(stmts: tuple, facts: _Facts, sides: bool, top: bool = True) -> tuple:
    """``stmts`` without their redundant barriers; ``sides``: rule 2 on; ``top``: the kernel's own list."""
    stmts = tuple(_nested(s, facts, sides) for s in stmts)
    out = []
    for i, s in enumerate(stmts):
        if type(s) is Barrier and (_covered(stmts, i, facts) or sides and _apart(out, stmts[i + 1:], facts, top)):
            continue
        out.append(s)
    return tuple(out)


def _nested(s, facts: _Facts, sides: bool):
    changes = {name: _stmts(tuple(getattr(s, name)), facts, sides, top=False)
               for name in ("body", "then_body", "else_body") if isinstance(getattr(s, name, None), (tuple, list))}
    return replace(s, **changes) if changes else s


def _apart(before: list, after: tuple, facts: _Facts, top: bool) -> bool:
    """Whether a barrier with ``before`` the statements kept before it in its list and ``after`` those after it orders
    nothing: from the barrier before it to the one after it, the two sides touch different global tensors and shared
    bytes, or only read the same ones. In the kernel's own list (``top``) a side may run to the kernel's start or end;
    in a loop's or an if's, both must end at a barrier of the list (else the side would run on into the previous or
    next iteration, or the code around the loop)."""
    starts = [i + 1 for i, s in enumerate(before) if type(s) is Barrier]
    end = next((i for i, s in enumerate(after) if type(s) is Barrier), None)
    if not top and (not starts or end is None):
        return False
    sides = [_touched(before[max(starts, default=0):]), _touched(after[:len(after) if end is None else end])]
    if None in sides:
        return False
    (r1, w1), (r2, w2) = sides
    return not (facts.overlap(w1, r2 | w2) or facts.overlap(r1, w2))


def _touched(stmts) -> tuple[set, set] | None:
    """(buffers read, buffers written) of the shared and global buffers that ``stmts`` touch, at any depth; None
    when one holds a statement of a kind not analysed here (an asynchronous copy, a tensor-core or mbarrier step)."""
    read, written = set(), set()
    for s in walk(stmts):
        if type(s) not in _KINDS and type(s) is not AsyncProxyFence:  # the fence orders the thread's own writes
            return None
        for e in _exprs(s):
            read.update(x.buffer for x in _nodes(e) if isinstance(x, Load) and x.buffer.scope != "local")
        if isinstance(s, VecCopy) and s.src.scope != "local":
            read.add(s.src)
        if isinstance(s, (Store, VecCopy)) and _dst(s).scope != "local":
            written.add(_dst(s))
    return read, written


def _covered(stmts: tuple, i: int, facts: _Facts) -> bool:
    """Whether the barrier at ``i`` is followed by quiet statements up to another barrier of ``stmts``."""
    j = i + 1
    while j < len(stmts) and type(stmts[j]) is not Barrier:
        j += 1
    if j == len(stmts):
        return False
    region = stmts[i + 1:j]
    here = Counter()
    for s in walk(region):
        if not _quiet(s, facts):
            return False
        if isinstance(s, (Store, VecCopy)):
            dst = _dst(s)
            if dst.scope == "global":
                here[dst] += 1
    return all(facts.stores[b] == n for b, n in here.items())


def _quiet(s, facts: _Facts) -> bool:
    if type(s) not in _KINDS:  # (a WarpSpecialize is an If, and not quiet)
        return False
    if isinstance(s, (Store, VecCopy)):
        dst = _dst(s)
        if dst.scope == "global" and dst in facts.loaded:
            return False
        if dst.scope not in ("global", "local"):
            return False
        if isinstance(s, VecCopy) and s.src.scope != "local" and not (
                s.src.scope == "global" and s.src not in facts.written):
            return False
    return all(_quiet_expr(e, facts) for e in _exprs(s))


def _dst(s):
    """The buffer a Store or VecCopy writes."""
    return s.buffer if isinstance(s, Store) else s.dst


def _quiet_expr(e, facts: _Facts) -> bool:
    for x in _nodes(e):
        if isinstance(x, Load) and not (x.buffer.scope == "local" or
                                        (x.buffer.scope == "global" and x.buffer not in facts.written)):
            return False
        if isinstance(x, Call) and x.name not in _PURE_CALLS:
            return False
    return True


def _exprs(s) -> list:
    """Every expression a statement holds itself (not its nested statements')."""
    out = []
    for f in dataclasses.fields(s):
        if f.name in ("body", "then_body", "else_body"):
            continue
        v = getattr(s, f.name)
        if isinstance(v, Expr):
            out.append(v)
        elif isinstance(v, tuple):
            out += [x for x in v if isinstance(x, Expr)]
    return out


def _nodes(e):
    """Every node of expression ``e``."""
    yield e
    for name in getattr(e, "__slots__", ()):
        v = getattr(e, name)
        if isinstance(v, Expr):
            yield from _nodes(v)
        elif isinstance(v, tuple):
            for x in v:
                if isinstance(x, Expr):
                    yield from _nodes(x)


def _buffers(x, seen=None) -> set:
    """The global tensors an object names, through its fields (tensor maps, regions) at any depth."""
    seen = set() if seen is None else seen
    out = set()
    if id(x) in seen:
        return out
    seen.add(id(x))
    if isinstance(x, Buffer):
        return {x} if x.scope == "global" else out
    if isinstance(x, (tuple, list)):
        for v in x:
            out |= _buffers(v, seen)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            out |= _buffers(getattr(x, f.name), seen)
    return out


__all__ = ["drop_redundant_barriers", "enabled", "sides_enabled"]
