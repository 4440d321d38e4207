"""Warp-group ranges of a kernel's thread branches: TileLang's warp specialization by hand (``if tx < 128:``).

In: a Kernel with per-thread code (``T.get_thread_binding``) and the ``if`` statements of its body.
Out: for each ``if`` whose condition depends on the thread index alone, the threads that take each branch, given the
threads that reach it (``branch_ranges``); for each statement, the warp-group range it runs in (``regions``).
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
    from tileagent.compiler.lower.context import LowerContext

    if k.threads[1] != 1 or k.threads[2] != 1:
        return None
    probe = LowerContext.__new__(LowerContext)  # per_thread_bool reads nothing but the thread count
    probe.threads = k.num_threads
    return probe.per_thread_bool(substitute(cond, lets))


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
    that run it, when its condition is on the thread index alone and both are whole warp groups; else None."""
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


def check_lowerable(k: Kernel) -> None:
    """E602 for warp specialization by hand in a kernel lowered for a GPU (its layouts inferred): an ``if`` on the
    thread index whose arms hold tile ops or barrier waits (the CPU interpreter runs them: ``compiler.interp_roles``;
    the GPU lowering of a warp group's own tile ops and of ``T.alloc_barrier`` barriers is not built)."""
    from tileagent.compiler.diagnostics import TargetError
    from tileagent.compiler.ir.stmt import Fill, MBarrierOp, Parallel
    from tileagent.compiler.tileops import op_for

    def warp_group_work(x) -> bool:
        if isinstance(x, MBarrierOp):
            return x.op == "wait"
        if isinstance(x, Fill) and x.dst.buffer.scope in ("local", "var"):  # the thread's own
            return False
        return op_for(x) is not None or isinstance(x, Parallel)

    if not k.thread_vars:
        return
    thread = tuple(_thread_lets(k))
    ifs = [s for s in walk(k.body) if isinstance(s, If) and depends_on(s.cond, thread)]
    for s, x in ((s, x) for s in ifs for x in walk(s.then_body + s.else_body)):
        if warp_group_work(x):
            what = "a barrier wait" if isinstance(x, MBarrierOp) else "tile ops"
            raise TargetError(f"warp specialization by hand ({what} in a branch on the thread index, line "
                              f"{x.span.line if x.span else '?'}) runs on the CPU interpreter only: the GPU lowering "
                              f"of a warp group's own tile ops and of T.alloc_barrier barriers is not built",
                              s.span, code="E602",
                              hint="write the loop as T.Pipelined with T.copy / T.gemm and let the compiler "
                                   "specialize the warps on sm_90a")
