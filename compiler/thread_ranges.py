"""Warp-group ranges of a kernel's thread branches: TileLang's warp specialization by hand (``if tx < 128:``).

In: a Kernel with per-thread code (``T.get_thread_binding``) and the ``if`` statements of its body.
Out: for each ``if`` whose condition depends on the thread index alone and whose arms hold tile ops or barrier waits
(``warp_group_work``), the threads that take each arm, given the threads that reach it (``branch_ranges``); for each
statement, the warp-group range it runs in (``regions``); the kernel cut by range for layout inference (``parts``);
the checks: a fragment used by two ranges (``shared_fragments``, E509 in ``compiler.check``) and a target that cannot
lower such a kernel (``check_lowerable``, E602).
Guarantees: a range is returned only when it is a whole number of warp groups (128 consecutive threads starting at a
multiple of 128, as ``wgmma`` and ``setmaxnreg`` need), so a tile op in it can be lowered as the tile op of a block
of ``hi - lo`` threads whose thread index is ``tid - lo`` (``compiler.lower``); anything else is None, and tile ops
under such a branch stay an E509 (``compiler.check``).
"""

from __future__ import annotations

import numpy as np

from tileagent.compiler.ir.simplify import depends_on
from tileagent.compiler.ir.stmt import If, Kernel, Let
from tileagent.compiler.ir.visit import substitute, walk

WARP_GROUP = 128


def _thread_lets(k: Kernel) -> dict:
    """Var -> value of the kernel's Lets computed from its thread index (``wg = tx // 128``), that index as THREAD."""
    from tileagent.compiler.tir import THREAD

    out = {k.thread_vars[0]: THREAD}
    for s in walk(k.body):
        if isinstance(s, Let) and depends_on(s.value, tuple(out)):
            out[s.var] = substitute(s.value, out)
    return out


def _taken(cond, k: Kernel, lets: dict) -> np.ndarray | None:
    """Whether each thread of ``k`` takes the then-branch of an ``if`` on ``cond`` (None: it depends on more than
    the thread index, or the kernel's threads are not one-dimensional)."""
    from tileagent.compiler.lower.context import eval_per_thread_bool

    if k.threads[1] != 1 or k.threads[2] != 1:
        return None
    return eval_per_thread_bool(substitute(cond, lets), k.num_threads)


def _span(mask: np.ndarray, lo: int, hi: int):
    """(first, end) of the threads of [lo, hi) set in ``mask`` when they are consecutive whole warp groups, (lo, lo)
    when none is, else None."""
    idx = np.flatnonzero(mask[lo:hi]) + lo
    if idx.size == 0:
        return (lo, lo)
    first, end = int(idx[0]), int(idx[-1]) + 1
    if idx.size != end - first or first % WARP_GROUP or (end % WARP_GROUP and end != hi):
        return None
    return (first, end)


def branch_ranges(s: If, k: Kernel, reach: tuple[int, int], lets: dict | None = None):
    """((lo, hi) of the then-branch, (lo, hi) of the else-branch) of ``s`` for the threads ``reach`` = [lo, hi)
    that run it, when its condition is on the thread index alone, both are whole warp groups and its arms hold
    ``warp_group_work``; else None."""
    if not any(warp_group_work(x) for x in walk(s.then_body + s.else_body)):
        return None  # per-thread code alone
    mask = _taken(s.cond, k, lets if lets is not None else _thread_lets(k))
    if mask is None:
        return None
    then, other = _span(mask, *reach), _span(~mask, *reach)
    return None if then is None or other is None else (then, other)


def regions(k: Kernel) -> dict:
    """id(statement) -> (lo, hi) for each statement of ``k`` inside thread branches whose ranges are whole warp
    groups (the innermost range), and -> None inside any other branch on the thread index."""
    out: dict = {}
    if not k.thread_vars:
        return out
    lets = _thread_lets(k)

    def visit(stmts, reach):
        for s in stmts:
            if reach != (0, k.num_threads):
                out[id(s)] = reach
            if isinstance(s, If) and depends_on(s.cond, tuple(lets)):
                ranges = branch_ranges(s, k, reach, lets) if reach is not None else None
                visit(s.then_body, ranges[0] if ranges else None)
                visit(s.else_body, ranges[1] if ranges else None)
                continue
            for name in ("body", "then_body", "else_body"):
                visit(getattr(s, name, ()) or (), reach)

    visit(k.body, (0, k.num_threads))
    return out


def shared_fragments(k: Kernel, where: dict):
    """(fragment, (range, line), (range, line)) for the first fragment of ``k`` that statements of two thread ranges
    use (``where``: ``regions(k)``; the whole block counts as a range), else None: a fragment's registers are spread
    over the threads of the range that uses it, so another range cannot reach them."""
    from tileagent.compiler.ir.stmt import Alloc, Parallel, Store
    from tileagent.compiler.lower.smem import buffers_used
    from tileagent.compiler.tileops import op_for

    seen: dict = {}
    for s in walk(k.body):
        if isinstance(s, Alloc) or not (isinstance(s, (Parallel, Store)) or op_for(s) is not None):
            continue
        reach = where.get(id(s), (0, k.num_threads))
        for b in buffers_used(s):
            if b.scope != "fragment":
                continue
            first = seen.setdefault(b, (reach, s.span.line if s.span else "?"))
            if reach is not None and first[0] is not None and first[0] != reach:
                return b, first, (reach, s.span.line if s.span else "?")
    return None


def warp_group_work(x) -> bool:
    """Whether statement ``x`` makes the branch around it warp specialization by hand: a tile op or T.Parallel (but
    T.fill/T.clear of a thread's own local) or a barrier wait. Branches of per-thread code alone keep the rules of
    per-thread code (no compiler barriers inside: the program places its own)."""
    from tileagent.compiler.ir.stmt import Fill, MBarrierOp, Parallel
    from tileagent.compiler.tileops import op_for

    if isinstance(x, MBarrierOp):
        return x.op == "wait"
    if isinstance(x, Fill) and x.dst.buffer.scope in ("local", "var"):
        return False
    return op_for(x) is not None or isinstance(x, Parallel)


def hand_specialized(k: Kernel):
    """(the ``if``, the statement) of the first ``if`` on the thread index whose arms hold ``warp_group_work``
    (warp specialization by hand), else None."""
    if not k.thread_vars:
        return None
    thread = tuple(_thread_lets(k))
    ifs = [s for s in walk(k.body) if isinstance(s, If) and depends_on(s.cond, thread)]
    return next(((s, x) for s in ifs for x in walk(s.then_body + s.else_body) if warp_group_work(x)), None)


def check_lowerable(k: Kernel, target=None) -> None:
    """E602 for warp specialization by hand (``hand_specialized``) in a kernel lowered for a target without wgmma and
    mbarriers (below sm_90a: the CPU interpreter runs it all the same, ``compiler.interp_roles``)."""
    from tileagent.compiler.diagnostics import TargetError
    from tileagent.compiler.ir.stmt import MBarrierOp

    if target is not None and target.has("wgmma") and target.has("mbarrier"):
        return
    found = hand_specialized(k)
    if found is not None:
        s, x = found
        what = "a barrier wait" if isinstance(x, MBarrierOp) else "tile ops"
        name = target.name if target is not None else "this target"
        raise TargetError(f"warp specialization by hand ({what} in a branch on the thread index, line "
                          f"{x.span.line if x.span else '?'}) is lowered for sm_90a only (wgmma, mbarrier waits), "
                          f"not for {name}; the CPU interpreter runs it", s.span, code="E602",
                          hint="compile for cuda:sm_90a, or write the loop as T.Pipelined with T.copy / T.gemm "
                               "and let the compiler specialize the warps")


def parts(k: Kernel) -> list:
    """``k`` cut by warp-group range, for layout inference: [(kernel of the range's threads, whose body is the
    range's statements with every other range's taken out, the fragments its statements use)], the whole block's
    part first (its fragments: those no range uses). [(k, None)] when no statement runs in a warp-group range."""
    import dataclasses

    from tileagent.compiler.ir.stmt import Alloc
    from tileagent.compiler.lower.smem import buffers_used

    where = regions(k)
    whole = (0, k.num_threads)
    ranges = sorted({r for r in where.values() if r is not None})
    if not ranges:
        return [(k, None)]

    def keep(stmts, r) -> tuple:
        out = []
        for s in stmts:
            if where.get(id(s), whole) != r:
                continue
            bodies = {name: keep(getattr(s, name), r) for name in ("body", "then_body", "else_body")
                      if isinstance(getattr(s, name, None), tuple)}
            same = all(len(b) == len(getattr(s, n)) and all(x is y for x, y in zip(b, getattr(s, n)))
                       for n, b in bodies.items())  # the statement itself where nothing inside changed: layouts
            out.append(s if same else dataclasses.replace(s, **bodies))  # are keyed by its loops and ops
        return tuple(out)

    def tops(stmts, outer, r, found) -> list:
        for s in stmts:
            here = where.get(id(s), whole)
            if here == r and outer != r:
                found.append(s)
            for name in ("body", "then_body", "else_body"):
                tops(getattr(s, name, ()) or (), here, r, found)
        return found

    out, owned = [], set()
    for r in ranges:
        body = keep(tuple(tops(k.body, whole, r, [])), r)
        used = {b for s in walk(body) if not isinstance(s, Alloc) for b in buffers_used(s) if b.scope == "fragment"}
        owned |= used
        out.append((dataclasses.replace(k, body=body, threads=(r[1] - r[0], 1, 1)),
                    sorted(used, key=lambda b: b.name)))
    fragments = [s.buffer for s in walk(k.body) if isinstance(s, Alloc) and s.buffer.scope == "fragment"
                 and s.buffer not in owned]
    return [(dataclasses.replace(k, body=keep(k.body, whole)), fragments)] + out
