"""Barrier insertion: put ``Barrier()`` between tile-level statements wherever shared or global memory written by
one is read or rewritten by a later one, or read by one and then overwritten.

In: a T.Kernel body of the tile IR (before lowering). Out: the same body with ``tir.Barrier`` statements added.
Guarantees: for every pair of statements A before B (also across loop iterations: B early in the body, A late)
where A writes a shared or global buffer that B reads or writes, or A reads one that B writes, a barrier runs between
them; except where A and B both write and neither reads (write after write) and both are plain per-thread stores
(a ``Store`` outside any tile op and ``T.Parallel``) whose address uses the thread index (not only through a value
read from a buffer, which may be one address in every thread), or A and B are one such
store of an address every thread writes, in two iterations: as in TileLang's thread sync, which orders only
read-after-write and write-after-read (TileLang's dequantizing GEMMs store each thread's values in a
``T.vectorized`` loop, its naive GEMV a row of A_shared by every thread: a barrier per element before this). A
barrier that orders only what came before a loop goes before it, where that leaves fewer barriers in the loop.
Global buffers count because two statements split their elements among the threads differently (a T.Parallel
writing a workspace, the next reading it reversed: another thread's element, written or not yet); the barrier
orders the block's own accesses only, blocks stay unordered.
Barriers are only placed at block-uniform points (between statements of kernel, loop and uniform-if bodies).
A loop that a ``break``/``continue`` may leave part-way
is analysed as if any statement of its body could be the last one run before the next iteration or the code after
it. Statements are the unit: the threads of one tile op never race with each other on their own tile. A
``SoftwarePipeline`` (``compiler.lower.pipeline``) brings its own barrier at the top of every iteration; only its
consumers are analysed inside. A tile op's reads and writes are its ``effects`` (``compiler.tileops``).
"""

from __future__ import annotations

from dataclasses import replace

from tileagent.compiler.ir.stmt import AtomicAdd, Evaluate, For, If, Let, Parallel, Store, While
from tileagent.compiler.language.cp_async import CALLS as _HAND_ASYNC
from tileagent.compiler.ir.visit import loads, walk
from tileagent.compiler.loop_exits import exits_early
from tileagent.compiler.lower.pipeline import SoftwarePipeline
from tileagent.compiler.tileops import op_for
from tileagent.compiler.tir import Barrier


def insert_barriers(body: tuple, thread_vars: tuple = (), kernel=None) -> tuple:
    """``body`` with barriers; ``thread_vars``: the kernel's threadIdx variables when it has per-thread code, whose
    ifs and loops that differ between threads are kept whole (a barrier inside them would not be reached by every
    thread): the barrier goes before them. An ``if`` of ``kernel`` whose arms are whole warp groups
    (``compiler.thread_ranges``: warp specialization by hand) gets barriers inside each arm as well, analysed as a
    block of its own (its threads synchronize through the arm's named barrier, ``compiler.lower.warp_groups``;
    between arms only the program's own barriers order anything)."""
    divergent = _divergent_vars(body, thread_vars) if thread_vars else None
    arms = _WarpGroupArms(kernel) if kernel is not None and thread_vars else None
    out, _ = _body(body, _EMPTY, divergent, arms)
    return out


class _WarpGroupArms:
    """Which ifs of a kernel split it into warp-group arms (the threads reaching each if tracked on the way down)."""

    def __init__(self, kernel):
        from tileagent.compiler.thread_ranges import _thread_lets

        self.kernel, self.lets = kernel, _thread_lets(kernel)
        self.reach = (0, kernel.num_threads)

    def ranges(self, s):
        from tileagent.compiler.thread_ranges import branch_ranges

        return branch_ranges(s, self.kernel, self.reach, self.lets) if isinstance(s, If) else None


class _Divergent(set):
    """The variables whose value may differ between threads (``_divergent_vars``); ``threads``: those of them that use
    the thread index outside any buffer read (an address made of them differs between threads by construction; one
    read from a buffer may be the same in every thread: ``s[cnt[0]]``)."""

    threads: frozenset = frozenset()


def _divergent_vars(body, thread_vars) -> _Divergent:
    """The thread variables and every Let-bound variable whose value may differ between threads: it reads one of
    them or any buffer (per-thread code keeps per-thread values in locals)."""
    found, threads = _Divergent(thread_vars), set(thread_vars)
    for s in walk(body):
        if isinstance(s, Let) and _differs(s.value, found):
            found.add(s.var)
            if _differs(s.value, threads, through_loads=False):
                threads.add(s.var)
    found.threads = frozenset(threads)
    return found


def _differs(e, divergent, through_loads: bool = True) -> bool:
    """Whether ``e`` may differ between threads: it uses a variable of ``divergent``, or (``through_loads``) reads a
    buffer; with ``through_loads`` False only a variable outside any buffer read counts (``_Divergent.threads``)."""
    from tileagent.compiler.ir.expr import Expr, Load, Var

    if isinstance(e, Var):
        return e in divergent
    if isinstance(e, Load) and through_loads:
        return True
    if isinstance(e, Expr) and not isinstance(e, Load):
        return any(_differs(getattr(e, n), divergent, through_loads) for n in getattr(e, "__slots__", ()))
    if isinstance(e, (tuple, list)):
        return any(_differs(x, divergent, through_loads) for x in e)
    return False


_EMPTY = (frozenset(), frozenset(), frozenset())


def _hazard(s, state, divergent) -> bool:
    """Whether ``s`` needs a barrier before it after statements that wrote and read ``state`` (buffers written,
    buffers read, (buffer, writer) pairs: see ``_writers``)."""
    written, read, writers = state
    w, r = _synced(s)
    if (r & written) or (w & read):
        return True
    return any(b == b2 and not (k == k2 and k is not None) for b, k in _writers(s, divergent) for b2, k2 in writers)


def _after(s, state, divergent) -> tuple:
    """``state`` with what ``s`` writes and reads added."""
    w, r = _synced(s)
    return state[0] | w, state[1] | r, state[2] | _writers(s, divergent)


def _join(a, b) -> tuple:
    return tuple(x | y for x, y in zip(a, b))


def _body(body, state, divergent=None, arms=None):
    out = []
    for s in body:
        if divergent is not None and ((isinstance(s, (If, While)) and _differs(s.cond, divergent)) or (
                isinstance(s, For) and _differs((s.start, s.extent, s.step), divergent))):
            if _hazard(s, state, divergent):  # taken whole: no barrier inside code not every thread runs
                out.append(Barrier())
                state = _EMPTY
            ranges = arms.ranges(s) if arms is not None else None
            if ranges is not None:  # each warp group's arm: a block of its own
                reach, bodies = arms.reach, []
                for arm, r_arm in ((s.then_body, ranges[0]), (s.else_body, ranges[1])):
                    arms.reach = r_arm
                    bodies.append(tuple(_body(arm, _EMPTY, divergent, arms)[0]))
                arms.reach = reach
                s = replace(s, then_body=bodies[0], else_body=bodies[1])
            out.append(s)
            state = _after(s, state, divergent)
            continue
        if isinstance(s, SoftwarePipeline):
            if _hazard(s, state, divergent):
                out.append(Barrier())
            # every iteration starts with a barrier (lower_pipeline); the staged tiles are only read in it
            consumers, state = _body(s.consumers, _EMPTY, divergent, arms)
            out.append(replace(s, consumers=tuple(consumers)))
            staged = frozenset(s.staged)
            state = (state[0] | staged, state[1], state[2] | {(b, None) for b in staged})
            continue
        if isinstance(s, (For, While)):
            if isinstance(s, While):  # its condition is evaluated before every iteration
                cond = If(s.cond, (), ())
                if _hazard(cond, state, divergent):
                    out.append(Barrier())
                    state = _EMPTY
                state = _after(cond, state, divergent)
            inner, end = _loop(s, state, divergent, arms)
            if isinstance(s, For) and state != _EMPTY and _barriers(inner):  # one before the loop rather than
                # one per iteration, where that leaves fewer in it
                hoisted, end_hoisted = _loop(s, _EMPTY, divergent, arms)
                if _barriers(hoisted) < _barriers(inner):
                    out.append(Barrier())
                    inner, end = hoisted, end_hoisted
            out.append(replace(s, body=tuple(inner)))
            state = end
            continue
        if isinstance(s, If):
            cond = If(s.cond, (), ())  # its condition is evaluated before either branch
            if _hazard(cond, state, divergent):
                out.append(Barrier())
                state = _EMPTY
            state = _after(cond, state, divergent)
            then_body, st1 = _body(s.then_body, state, divergent, arms)
            else_body, st2 = _body(s.else_body, state, divergent, arms)
            out.append(replace(s, then_body=tuple(then_body), else_body=tuple(else_body)))
            state = _join(st1, st2)
            continue
        if _hazard(s, state, divergent):
            out.append(Barrier())
            state = _EMPTY
        out.append(s)
        state = _after(s, state, divergent)
    return out, state


def _loop(s, state, divergent, arms) -> tuple:
    """(the loop's body with barriers, the state after the loop), entered with ``state``."""
    _, after_one = _body(s.body, state, divergent, arms)  # what one iteration leaves for the next one
    leavable = exits_early(s)
    if leavable:  # a break/continue leaves an iteration part-way: whatever the body touches carries
        after_one = _after(s, after_one, divergent)
    inner, end = _body(s.body, _join(state, after_one), divergent, arms)
    return inner, _join(end, after_one) if leavable else end


def _barriers(body) -> int:
    return sum(isinstance(x, Barrier) for x in walk(body))


def shared_effects(s, scopes=("shared",)) -> tuple[frozenset, frozenset]:
    """(buffers written, buffers read) of ``scopes`` (shared by default) by one tile-level statement, its nested
    body included."""
    w, r = set(), set()
    _effects(s, w, r, scopes)
    return frozenset(w), frozenset(r)


def _synced(s) -> tuple[frozenset, frozenset]:
    """The shared and global buffers a statement writes and reads: what a barrier orders."""
    return shared_effects(s, ("shared", "global"))


def _writers(s, divergent) -> frozenset:
    """(buffer, writer) for each shared or global buffer ``s`` writes. Two writes need no barrier between them when
    their writers are equal and not None: ``"thread"`` for plain per-thread stores whose address uses the thread
    index outside any buffer read (each thread's elements are its own), a store's id for one of an address every
    thread writes (that store in a later iteration: each thread's last write is the loop's last), None for the rest
    (an address read from a buffer, which may be one address in every thread: ``s[cnt[0]] = a`` then
    ``s[cnt[0]] = b``; tile ops, whose threads the layout picks, ``T.Parallel`` bodies, atomics, extern calls)."""
    if isinstance(s, Store) and divergent is not None and op_for(s) is None:
        writer = "thread" if _differs(s.indices, divergent.threads, through_loads=False) else \
            None if _differs(s.indices, divergent) else id(s)
        return frozenset((b, writer) for b in _synced(s)[0])
    if op_for(s) is None and isinstance(s, (For, While, If)):
        parts = s.body if isinstance(s, (For, While)) else s.then_body + s.else_body
        return frozenset().union(*(_writers(x, divergent) for x in parts))
    return frozenset((b, None) for b in _synced(s)[0])


def _effects(s, w, r, scopes):
    op = op_for(s)
    if op is not None:  # a tile op says what it touches
        effects = op.effects(s)
        w.update(b for b in effects.writes if b.scope in scopes)
        r.update(b for b in effects.reads if b.scope in scopes)
    elif isinstance(s, (Store, AtomicAdd)):
        if s.buffer.scope in scopes:
            w.add(s.buffer)
        for e in tuple(s.indices) + (s.value,):
            _reads(e, r, scopes)
    elif isinstance(s, Let):
        _reads(s.value, r, scopes)
    elif isinstance(s, Evaluate) and getattr(s.value, "name", None) in _HAND_ASYNC:
        pass  # cp.async by hand: ordered by the program's own barriers and waits (compiler.language.cp_async)
    elif isinstance(s, Evaluate):  # T.call_extern: a pointer it is given may be read and written through
        _reads(s.value, r, scopes)
        _reads(s.value, w, scopes)
    elif isinstance(s, (Parallel, For, SoftwarePipeline)):
        for x in s.body:
            _effects(x, w, r, scopes)
    elif isinstance(s, If):
        _reads(s.cond, r, scopes)
        for x in s.then_body + s.else_body:
            _effects(x, w, r, scopes)
    elif isinstance(s, While):
        _reads(s.cond, r, scopes)
        for x in s.body:
            _effects(x, w, r, scopes)


def _reads(e, r, scopes):
    r.update(ld.buffer for ld in loads(e) if ld.buffer.scope in scopes)
