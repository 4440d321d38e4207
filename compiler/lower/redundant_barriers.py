"""Block barriers that order nothing the next one does not: the first of the two dropped.

In: a lowered ``DeviceModule`` (thread IR, after ``compiler.lower.forward_shared``). Out: the same module where, in
one statement list, a ``Barrier`` followed by quiet statements (below) and then another ``Barrier`` of the same list
loses the first. Every access before the first barrier stays ordered against every access after the second, and
the statements between touch no memory another thread of the block touches in an order the first barrier decided.
Why: a reduction that goes through shared memory closes with a barrier (its scratch may be written again), and the
register work after it often ends at the barrier before the next shared-memory write (TileLang's LayerNorm forward:
statistics, then the normalized row into the output tile); each barrier costs the row's block a round of its warps.
Quiet statements:

- ``Declare``, ``Let``, and stores (``Store``, ``VecCopy``) into registers (scope "local");
- stores into a global tensor the kernel never loads, and stores only inside this stretch (no other writer to race
  with once the barrier is gone);
- loops and ifs whose own expressions and bodies are quiet;
and every expression of them loads only registers or global tensors the kernel never writes, and calls only math
and warp shuffles. Tensors are told apart by identity, as everywhere in the compiler (a tensor passed twice is
the caller's aliasing); a kernel that places a tensor at an address (``T.make_tensor``) or calls external code is
left as it was. ``TILEAGENT_DROP_BARRIERS=0`` switches it off.
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
from tileagent.compiler.tir import Barrier, Declare, DeviceModule, GlobalAt, VecCopy

_PURE_CALLS = frozenset(MATH) | {"shfl_xor"}
_KINDS = (Declare, Let, Store, VecCopy, For, If, While)  # the statements a stretch between barriers may hold


def enabled() -> bool:
    """Whether the rewrite runs (``TILEAGENT_DROP_BARRIERS=0`` switches it off, for A/B runs)."""
    return os.environ.get("TILEAGENT_DROP_BARRIERS", "").strip() != "0"


def drop_redundant_barriers(module: DeviceModule) -> DeviceModule:
    """``module`` without the barriers the module docstring describes."""
    kernels = []
    for k in module.kernels:
        facts = _facts(k.body)
        kernels.append(k if facts is None else replace(k, body=_stmts(tuple(k.body), facts)))
    return replace(module, kernels=tuple(kernels))


@dataclasses.dataclass
class _Facts:
    loaded: set  # global tensors some expression loads, or a statement of another kind names
    written: set  # global tensors something writes
    stores: Counter  # global tensor -> the Store / VecCopy statements into it


def _facts(body) -> _Facts | None:
    """What the kernel does to its global tensors; None where it places tensors or calls external code."""
    f = _Facts(set(), set(), Counter())
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


def _stmts(stmts: tuple, facts: _Facts) -> tuple:
    stmts = tuple(_nested(s, facts) for s in stmts)
    out = []
    for i, s in enumerate(stmts):
        if type(s) is Barrier and _covered(stmts, i, facts):
            continue
        out.append(s)
    return tuple(out)


def _nested(s, facts: _Facts):
    changes = {name: _stmts(tuple(getattr(s, name)), facts) for name in ("body", "then_body", "else_body")
               if isinstance(getattr(s, name, None), (tuple, list))}
    return replace(s, **changes) if changes else s


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


__all__ = ["drop_redundant_barriers", "enabled"]
