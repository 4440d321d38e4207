"""CPU interpreter of the tile IR: the semantic reference every other backend is checked against.

In: a checked PrimFunc, its arguments as CPU torch tensors (and Python scalars), and the values of its dynamic
shape variables. Out: the tensor arguments updated in place.
Guarantees: thread blocks run one after another (bx fastest; last to first within ``block_order.blocks_backward``);
tile ops run as torch operations (each op's ``interpret``, ``compiler.tileops``); T.Parallel nests run vectorized over
their whole iteration space (an ``if`` inside runs masked), and an element of global or shared memory that one of
their iterations reads and another writes, or that two write with different values, raises KernelFault
(``compiler.interp_race``: on the GPU the iterations run in no fixed order); T.Pipelined runs as a serial loop. In
per-thread code the arms of an ``if`` on the thread index that wait on barriers run as concurrent roles
(``compiler.interp_roles``), and a tile op or T.Parallel in an arm is that warp group's: the whole tile, once.
Float arithmetic rounds to the expression's dtype after every operation, computing in float32 (float64 for
float64), as the GPU does. Global memory is guarded: out-of-bounds reads give 0, out-of-bounds writes are dropped.
On-chip buffers start as NaN (floats) so reads of unwritten data show up; an out-of-bounds on-chip access raises
KernelFault at the DSL line. Under ``time_limit(s)`` a run stops with InterpreterTimeLimit as soon as a kernel's
blocks so far say its grid would pass the limit (after its first block), or a loop iteration starts past it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time

import torch

from tileagent.compiler import block_order
from tileagent.compiler.errors import InterpreterTimeLimit, KernelArgumentError, KernelFault
from tileagent.compiler.host_memory import tensor_at
from tileagent.compiler.intrinsics import (MATH, as_tensor, compute_dtype, float_binop, float_call, reinterpret,
                                           storage, to_float)
from tileagent.compiler import warp_shuffle
from tileagent.compiler.ir.expr import BinOp, Call, Cast, Cmp, Const, Load, Select, Unary, Var, is_extern
from tileagent.compiler.ir.printer import region_str
from tileagent.compiler.atomic_ops import combine, fetch
from tileagent.compiler.ir.stmt import (Alloc, AnnotateLayout, Assert, AtomicAdd, Buffer, Evaluate, For, If,
                                        ImportSource, Kernel, Let, LoopExit, MBarrierOp, NamedBarrier, Parallel,
                                        PrimFunc, Print, Region, RngInit, Store, UseSwizzle, While)
from tileagent.compiler import interp_block_race, interp_race, random_philox
from tileagent.compiler.interp_roles import Scheduler, waiting_ifs
from tileagent.compiler.tileops import op_for

_NARROW_INDEX = (torch.bool, torch.uint8, torch.int8, torch.int16)  # torch indexes with a uint8/bool tensor as a mask
_INT_POISON = -(2**30) + 7
_deadline: float | None = None  # the time.monotonic() a run under ``time_limit`` must end by


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Kernels run inside stop with InterpreterTimeLimit rather than run past ``seconds`` from now (None: no limit).
    The evaluator's run at a config's full sizes uses it to give up early on a grid the interpreter cannot finish."""
    global _deadline
    outer = _deadline
    _deadline = None if seconds is None else time.monotonic() + seconds
    try:
        yield
    finally:
        _deadline = outer


def _pace(done: int, blocks: int, start: float, span) -> None:
    """InterpreterTimeLimit when ``done`` of a kernel's ``blocks``, run since ``start``, say the rest would end past
    the deadline."""
    now = time.monotonic()
    needed = (now - start) / done * blocks
    if now + needed - (now - start) > _deadline:
        at = f" (the kernel at line {span.line})" if span is not None else ""
        raise InterpreterTimeLimit(f"the interpreter would need about {needed:.3g} s for {blocks} blocks{at}, past "
                                   f"its time limit", needed_s=needed)


def _lane_count(active):
    """How many lanes the mask ``active`` leaves running; None when it masks nothing."""
    if not isinstance(active, torch.Tensor) or active.dim() == 0 or bool(active.all()):
        return None
    return int(active.sum())


class ExitLoop(Exception):
    """A ``break``/``continue`` (``kind``) on its way to the loop it leaves (``_Interpreter.iteration``)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def foreign_code(call: Call, span):
    """E602 for a kernel that calls CUDA code (``T.call_extern``) on a CPU target (interpreter, SIMT emulator)."""
    from tileagent.compiler.diagnostics import TargetError

    name = call.name.split(":", 1)[-1]
    return TargetError(f"T.call_extern('{name}', ...) calls CUDA code (T.import_source), which the CPU targets "
                       f"cannot run", span, code="E602",
                       hint="run the kernel on the GPU (the CUDA target); on the CPU, write the function in the DSL")


def _lane_ranges(m) -> str:
    """The threads set in lane mask ``m`` as ranges: "0-127, 256-383"."""
    idx = torch.nonzero(m).reshape(-1).tolist()
    parts, start = [], None
    for n, i in enumerate(idx):
        if start is None:
            start = i
        if n + 1 == len(idx) or idx[n + 1] != i + 1:
            parts.append(f"{start}-{i}" if i > start else f"{i}")
            start = None
    return ", ".join(parts)


def run(func: PrimFunc, args: dict, env: dict) -> None:
    """Execute ``func``. ``args`` maps each parameter (Buffer or Var) to its tensor or number; ``env`` binds the
    dynamic shape Vars to ints."""
    interp = _Interpreter(args, env)
    for s in func.body:
        interp.stmt(s, None)


_UNSIGNED_WIDE = (torch.uint16, torch.uint32, torch.uint64)

class _Interpreter:
    def __init__(self, args: dict, env: dict):
        self.mem: dict[Buffer, torch.Tensor] = {}
        self.env: dict[Var, object] = dict(env)
        for p, v in args.items():
            if isinstance(p, Buffer):
                self.mem[p] = v
            else:
                self.env[p] = v
        self.shapes: dict[Buffer, tuple[int, ...]] = {b: tuple(t.shape) for b, t in self.mem.items()}
        self.active = None  # the lanes of a T.Parallel nest that a runtime `if` leaves running (None: all)
        self.lanes = None  # per-thread kernels (T.get_thread_binding): arange(threads), one lane per thread
        self.lane_bufs: set = set()  # their local/var buffers: one copy per lane, stored [threads, *shape]
        self.loop_lanes = None  # the lanes active when the innermost loop's current iteration began
        self.race = None  # the interp_race.Recorder of the T.Parallel running now (None: none, or nothing to record)
        self.race_plans: dict = {}  # interp_race.plan of each T.Parallel run so far
        self.block_races = None  # the interp_block_race.BlockRaces of the kernel running now (None: nothing watched)
        self.roles = None  # the block's interp_roles.Scheduler once a warp-specialized `if` ran (None: none yet)
        self.waiting_ifs = frozenset()  # ids of the kernel's ifs whose arms wait on barriers (interp_roles)

    # -- statements ------------------------------------------------------------------------------------------
    def stmt(self, s, mask) -> None:
        if self.active is not None and self.lanes is not None and (isinstance(s, Parallel) or op_for(s) is not None):
            return self.warp_group_op(s)
        handler = self._HANDLERS.get(type(s))
        if handler is not None:
            handler(self, s, mask)
        else:  # a tile op runs itself
            op_for(s).interpret(s, self, mask)

    def body(self, stmts, mask) -> None:
        for s in stmts:
            self.stmt(s, mask)

    def kernel(self, s: Kernel, mask) -> None:
        grid = [int(self.ev(g)) for g in s.grid]
        if s.cluster is not None and any(g % c for g, c in zip(grid, s.cluster)):  # as the GPU launcher refuses it
            raise KernelArgumentError(f"T.Kernel at line {s.span.line if s.span else '?'}: grid "
                                      f"{tuple(grid) + (1,) * (3 - len(grid))} is not a multiple of its cluster_dims "
                                      f"{tuple(s.cluster)}")
        self.waiting_ifs = waiting_ifs(s.body, lambda x: isinstance(x, MBarrierOp) and x.op == "wait")
        if s.thread_vars:  # per-thread code: every statement runs for all threads at once, vectorized over lanes
            tx, ty, _ = s.threads
            self.lanes = torch.arange(s.num_threads, dtype=torch.int64)
            for var, value in zip(s.thread_vars, (self.lanes % tx, self.lanes // tx % ty, self.lanes // (tx * ty))):
                self.env[var] = value
        blocks, start = math.prod(grid), time.monotonic()
        self.block_races = interp_block_race.watch(s, self.mem)  # blocks racing on atomically updated memory
        try:
            backward = s.cluster is None and block_order.backward()
            order = (range(g - 1, -1, -1) if backward else range(g) for g in reversed(grid))
            for done, idx in enumerate(itertools.product(*order), 1):
                for var, value in zip(s.block_vars, reversed(idx)):
                    self.env[var] = value
                if self.block_races is not None:
                    self.block_races.block(done - 1)
                self.mbarriers = {}  # each block's own barriers (T.alloc_barrier): [completed phases, arrivals]
                self.rng = random_philox.States(1 if self.lanes is None else len(self.lanes))  # T.rng_init's
                self.block_threads, self.roles = s.num_threads, None
                self.body(s.body, None)
                if _deadline is not None:
                    _pace(done, blocks, start, s.span)
            if self.block_races is not None:
                self.block_races.check()
        finally:
            self.lanes, self.block_races = None, None

    def alloc(self, s: Alloc, mask) -> None:
        b = s.buffer
        lanes = self.lanes is not None and b.scope in ("local", "var")
        shape = ((len(self.lanes),) if lanes else ()) + tuple(b.shape)
        if b.scope == "global":  # T.make_tensor: the tensor at a host address
            shape = tuple(int(self.ev(d)) for d in b.shape)
            self.mem[b] = tensor_at(self.ev(s.init), math.prod(shape), b.dtype, b.name, s.span).view(shape)
            self.shapes[b] = shape
            return
        if s.view_of is not None:  # T.reshape: the same storage, row-major in this shape
            base = self.mem[s.view_of]
            self.mem[b] = base.view((base.shape[0],) + tuple(b.shape) if s.view_of in self.lane_bufs else b.shape)
        elif s.init is not None:
            self.mem[b] = as_tensor(self.ev(s.init), b.dtype).to(b.dtype.torch).expand(shape).clone()
        elif b.dtype.is_float:
            self.mem[b] = torch.full(shape, float("nan"), dtype=b.dtype.torch)
        else:
            self.mem[b] = torch.full(shape, _INT_POISON if b.dtype.bits >= 32 else 0, dtype=b.dtype.torch)
        self.shapes[b] = tuple(b.shape)
        if lanes or s.view_of in self.lane_bufs:
            self.lane_bufs.add(b)
        else:
            self.lane_bufs.discard(b)

    def for_(self, s: For, mask) -> None:
        bounds = [self.ev(x) for x in (s.start, s.extent, s.step)]
        if any(isinstance(x, torch.Tensor) and x.numel() > 1 and bool((x != x.reshape(-1)[0]).any()) for x in bounds):
            raise KernelFault(f"the loop over '{s.var.name}' has bounds that differ between threads", s.span)
        start, extent, step = (int(x.reshape(-1)[0]) if isinstance(x, torch.Tensor) else int(x) for x in bounds)
        for k in range(extent):
            self.env[s.var] = start + k * step
            if not self.iteration(s.body, mask):
                return

    def iteration(self, stmts, mask) -> bool:
        """Run one iteration of a loop body; False when a ``break`` left the loop (``continue`` ends the iteration)."""
        if _deadline is not None and time.monotonic() > _deadline:
            raise InterpreterTimeLimit("the interpreter passed its time limit inside a block")
        outer, self.loop_lanes = self.loop_lanes, self.active
        try:
            self.body(stmts, mask)
        except ExitLoop as e:
            return e.kind == "continue"
        finally:
            self.loop_lanes = outer
        return True

    def device_assert(self, s: Assert, mask) -> None:
        """``T.device_assert``: KernelFault when a running thread (or T.Parallel iteration) sees ``cond`` false."""
        ok = torch.as_tensor(self.ev(s.cond), dtype=torch.bool)
        running = self.active if self.active is not None else mask
        if bool((~ok if running is None else ~ok & torch.as_tensor(running)).any()):
            raise KernelFault(f"T.device_assert failed: {s.message or 'the condition is false'}", s.span)

    def loop_exit(self, s: LoopExit, mask) -> None:
        """``break``/``continue``: the lanes of a per-thread kernel that reach it must be all those that run the
        loop (``compiler.loop_exits`` proves its conditions block-uniform; this is the run-time twin)."""
        lanes = _lane_count(self.active)
        if lanes is not None and lanes != _lane_count(self.loop_lanes):
            if lanes == 0:
                return  # the branch no lane takes
            raise KernelFault(f"`{s.kind}` taken by some threads of the block only: its condition differs between "
                              f"threads", s.span)
        raise ExitLoop(s.kind)

    def while_(self, s: While, mask) -> None:
        while True:
            c = self.ev(s.cond)
            if isinstance(c, torch.Tensor):
                if c.numel() > 1 and bool((c != c.reshape(-1)[0]).any()):
                    raise KernelFault("the while loop's condition differs between threads", s.span)
                c = bool(c.reshape(-1)[0])
            if not c or not self.iteration(s.body, mask):
                return

    def parallel(self, s: Parallel, mask) -> None:
        n = len(s.vars)
        for d, (var, ext) in enumerate(zip(s.vars, s.extents)):
            shape = [1] * n
            shape[d] = int(self.ev(ext))
            self.env[var] = torch.arange(shape[d], dtype=torch.int64).reshape(shape)
        self.par_shape = tuple(int(self.ev(e)) for e in s.extents)  # T.rng_rand draws in this order
        outer = self.race
        if outer is not None:  # a T.Parallel inside another: its iterations are not the outer loop's
            outer.off = True
        elif self.lanes is None:  # races between its iterations: compiler.interp_race
            self.race = interp_race.watch(s, self.race_plans, self.mem, self.par_shape)
        try:
            self.body(s.body, mask)
            if self.race is not None and self.race is not outer:
                self.race.check()
        finally:
            self.par_shape, self.race = None, outer

    def if_(self, s: If, mask) -> None:
        c = self.ev(s.cond)
        if isinstance(c, torch.Tensor) and c.dim() > 0:
            c = c.to(torch.bool)
            outer = self.active
            if self.lanes is not None and id(s) in self.waiting_ifs:
                return self.concurrent_arms(s, c)
            try:
                for branch, m in ((s.then_body, c), (s.else_body, ~c)):
                    self.active = m if mask is None else mask & m
                    self.body(branch, self.active)
            finally:
                self.active = outer
        elif bool(c):
            self.body(s.then_body, mask)
        else:
            self.body(s.else_body, mask)

    def concurrent_arms(self, s: If, c) -> None:
        """The arms of a warp-specialized ``if`` (its threads wait on barriers) as concurrent roles
        (``compiler.interp_roles``); an arm no thread takes does not run."""
        if self.roles is None:
            self.roles = Scheduler(self)
        outer = self.active
        arms = []
        for branch, m in ((s.then_body, c), (s.else_body, ~c)):
            m = torch.broadcast_to(m, self.lanes.shape)
            m = m if outer is None else outer & m
            if branch and bool(m.any()):
                arms.append((f"threads {_lane_ranges(m)}", lambda b=branch, m=m: self._arm(b, m)))
        try:
            self.roles.run_arms(arms, s.span)
        finally:
            self.active = outer

    def _arm(self, branch, m) -> None:
        self.active = m
        self.body(branch, m)

    def save_state(self) -> tuple:
        """What one warp-specialized arm keeps across its waits (``compiler.interp_roles``)."""
        return dict(self.env), self.active, self.loop_lanes, self.race, getattr(self, "par_shape", None)

    def restore_state(self, state: tuple) -> None:
        env, self.active, self.loop_lanes, self.race, self.par_shape = state
        self.env = dict(env)

    def warp_group_op(self, s) -> None:
        """A tile op or T.Parallel in a thread branch (a warp group's, ``compiler.thread_ranges``): the whole tile,
        computed once by the branch's threads; nothing where no thread takes the branch."""
        if not bool(torch.as_tensor(self.active).any()):
            return
        outer, outer_loop = self.active, self.loop_lanes
        self.active = self.loop_lanes = None
        try:
            handler = self._HANDLERS.get(type(s))
            handler(self, s, None) if handler is not None else op_for(s).interpret(s, self, None)
        finally:
            self.active, self.loop_lanes = outer, outer_loop

    def let(self, s: Let, mask) -> None:
        self.env[s.var] = self.ev(s.value)

    def store(self, s: Store, mask) -> None:
        self.write_elements(s.buffer, s.indices, self.ev(s.value), mask, s.span, accumulate=False)

    def atomic_add(self, s: AtomicAdd, mask) -> None:
        if s.prev is not None:  # return_prev=True: each lane's update in lane order, its previous value kept
            old = self.fetch_elements(s.buffer, s.indices, self.ev(s.value), mask, s.span, s.op)
            return self.write_elements(s.prev.buffer, s.prev.indices, old, mask, s.span, accumulate=False)
        self.write_elements(s.buffer, s.indices, self.ev(s.value), mask, s.span,
                            accumulate=True if s.op == "add" else s.op)

    def fetch_elements(self, buf: Buffer, indices, value, mask, span, op: str):
        """``compiler.atomic_ops.fetch`` of ``value`` into ``buf[indices]`` where ``mask`` and in bounds; the
        previous values, broadcast over the lanes (0 where nothing was updated)."""
        idx, inb = self._element_indices(buf, indices, span)
        t = self.mem[buf]
        keep = mask if inb is None else (inb if mask is None else mask & inb)
        if self.race is not None and buf in self.race.writes:
            self.race.write(buf, idx, as_tensor(value, buf.dtype), keep, span, atomic=True)
        self.note_block_write(buf, idx, keep, span, atomic=True)
        parts = [torch.as_tensor(i) for i in idx] + [as_tensor(value, buf.dtype)]
        parts = torch.broadcast_tensors(*parts, *([torch.as_tensor(keep)] if keep is not None else []))
        flat = [p.reshape(-1) for p in parts]
        sel = flat[-1] if keep is not None else torch.ones(flat[0].shape, dtype=torch.bool)
        lin = torch.zeros(int(sel.sum()), dtype=torch.int64)
        for i, n in zip(flat[:len(idx)], self.shapes[buf]):
            lin = lin * int(n) + i[sel].to(torch.int64)
        view = t.view(-1)
        old, view[:] = fetch(view, lin, flat[len(idx)][sel].to(t.dtype), op)
        out = torch.zeros(sel.shape, dtype=t.dtype)
        out[sel] = old
        return out.reshape(parts[0].shape)

    def print_(self, s: Print, mask) -> None:
        value = self.mem[s.value] if isinstance(s.value, Buffer) else self.ev(s.value)
        blocks = {v.name: k for v, k in self.env.items() if isinstance(k, int) and v.name in ("bx", "by", "bz")}
        sys.stdout.write(f"{s.msg} {blocks} {getattr(s.value, 'name', '')} = {value}\n")

    def nothing(self, s, mask) -> None:
        pass

    def mbarrier(self, s: MBarrierOp, mask) -> None:
        """A barrier's phases (``T.alloc_barrier``): an arrive counts its threads (the running lanes of per-thread
        code, a T.ws group's, else the block's); a wait inside a warp-specialized ``if`` parks its branch until the
        phase completes (``compiler.interp_roles``); elsewhere code runs in program order, where a wait whose phase
        has not completed would block forever."""
        index = self.ev(s.index)
        if isinstance(index, torch.Tensor):
            if index.numel() > 1 and bool((index != index.reshape(-1)[0]).any()):
                raise KernelFault(f"barrier {s.barriers.name}[...]: the threads name different barriers", s.span)
            index = int(index.reshape(-1)[0])
        if not 0 <= index < len(s.barriers.counts):
            raise KernelFault(f"barrier index {index} is out of bounds of {s.barriers.name} "
                              f"({len(s.barriers.counts)} barriers)", s.span)
        key = (id(s.barriers), index)
        state = self.mbarriers.setdefault(key, [0, 0])
        if s.op != "wait":  # "arrive", or "arrive_cp_async" (cp.async.mbarrier.arrive.noinc: copies end at once here)
            if self.roles is not None:
                self.roles.races.arrive(self.roles.current(), key, state[0])
            if s.value is not None:
                state[1] += min(int(s.value), self.block_threads)
            elif self.lanes is not None and self.active is not None:
                state[1] += int(torch.broadcast_to(self.active, self.lanes.shape).sum())
            else:
                state[1] += self.block_threads
            count = s.barriers.counts[index]
            state[0], state[1] = state[0] + state[1] // count, state[1] % count
            return
        parity = self.ev(s.value)
        parity = int(parity.reshape(-1)[0]) if isinstance(parity, torch.Tensor) else int(parity)
        if self.roles is not None and (state[0] % 2 != parity % 2 or self.roles.current() is not self.roles.root):
            self.roles.block(lambda: state[0] % 2 != parity % 2, f"{s.barriers.name}[{index}] phase parity "
                             f"{parity % 2}", s.span)  # returns at once where the phase has completed
            # the latest completed phase of that parity: what the wait acquires (compiler.interp_role_race)
            return self.roles.races.acquire(self.roles.current(), key, state[0] - 1 - (state[0] - 1 - parity) % 2)
        if state[0] % 2 != parity % 2:
            return
        raise KernelFault(f"barrier wait on {s.barriers.name}[{index}] for phase parity {parity % 2}: it has "
                          f"completed {state[0]} phase(s), so the wait would block until an arrive that comes "
                          f"later in the source; TileAgent runs warp-specialized code (T.ws) in program order, "
                          f"so each wait must follow the arrives it waits for", s.span)

    def named_barrier(self, s: NamedBarrier, mask) -> None:
        """``bar.sync id, count``: orders nothing here (per-thread code runs statement by statement for all threads
        at once), but exactly ``count`` threads must reach it, or the GPU would hang or let it complete early."""
        if self.lanes is None or self.active is None:
            reached = self.block_threads
        else:
            reached = int(torch.broadcast_to(self.active, self.lanes.shape).sum())
        if reached != s.arrive_count:
            raise KernelFault(f"T.sync_threads({s.barrier_id}, {s.arrive_count}) is reached by {reached} of the "
                              f"block's {self.block_threads} threads, not {s.arrive_count}", s.span)

    def rng_init(self, s: RngInit, mask) -> None:
        active = self.active if self.lanes is not None else None
        self.rng.init(*(self.ev(x) for x in (s.seed, s.subsequence, s.offset)), active)

    def rng_draw(self, e: Call):
        """The next number of each running thread; in T.Parallel (a kernel of one thread: ``compiler.language.random``)
        the one thread's next numbers over the running iterations in row-major order."""
        if not bool(self.rng.ready.all()):
            raise KernelFault("T.rng_rand before T.rng_init")
        shape = getattr(self, "par_shape", None)
        if shape is not None:
            live = torch.ones(shape, dtype=torch.bool)
            live = live if self.active is None else live & torch.broadcast_to(self.active, shape)
            values, _ = self.rng.draw(live.sum().reshape(1))
            out = torch.zeros(shape, dtype=torch.int64)
            out[live] = values
        elif self.lanes is not None:
            live = torch.ones(len(self.lanes), dtype=torch.bool) if self.active is None else self.active.reshape(-1)
            values, thread = self.rng.draw(live.to(torch.int64))
            out = torch.zeros(len(self.lanes), dtype=torch.int64)
            out[thread] = values
        else:
            out = self.rng.draw(torch.ones(1, dtype=torch.int64))[0][0]
        return out if e.name == "rng_rand" else random_philox.uniform(out)

    def evaluate(self, s: Evaluate, mask) -> None:
        from tileagent.compiler.language.cp_async import CALLS, CP_ASYNC

        if not (isinstance(s.value, Call) and s.value.name in CALLS):
            raise foreign_code(s.value, s.span)
        if s.value.name == CP_ASYNC:  # lands at once here; commit/wait groups and proxy fences order nothing
            self.cp_async(*s.value.args, s.span)

    def cp_async(self, dst: Call, src: Call, elems: Const, span, predicate=None) -> None:
        """``T.ptx_cp_async``: each running thread's ``elems`` elements from its global element into its shared one
        (zeros where ``predicate`` is false)."""
        (dl, sl), active = (dst.args[0], src.args[0]), self.active
        n = int(elems.value)
        lanes = torch.ones(len(self.lanes) if self.lanes is not None else 1, dtype=torch.bool)
        lanes = lanes if active is None else torch.broadcast_to(active, lanes.shape)
        keep = torch.ones(lanes.shape, dtype=torch.bool) if predicate is None else \
            torch.broadcast_to(torch.as_tensor(self.ev(predicate), dtype=torch.bool), lanes.shape)
        flat = []
        for load in (dl, sl):
            idx, _ = self._element_indices(load.buffer, load.indices, span)
            lin = torch.zeros(lanes.shape, dtype=torch.int64)
            for i, extent in zip(idx, self.shapes[load.buffer]):
                lin = lin * int(extent) + torch.broadcast_to(torch.as_tensor(i, dtype=torch.int64), lanes.shape)
            flat.append(lin[lanes])
        d, src_view = self.mem[dl.buffer].view(-1), self.mem[sl.buffer].reshape(-1)
        if bool(((flat[0] < 0) | (flat[0] + n > d.numel())).any()):
            raise KernelFault(f"T.ptx_cp_async writes past the end of '{dl.buffer.name}'", span)
        step = torch.arange(n, dtype=torch.int64)
        if self.roles is not None and dl.buffer.scope == "shared":
            self.roles.races.access(self.roles.current(), dl.buffer, (flat[0][:, None] + step).reshape(-1), True,
                                    span, d.numel())
        s_idx = (flat[1][:, None] + step).reshape(-1)
        ok = (s_idx >= 0) & (s_idx < src_view.numel())  # as other global reads: out of bounds gives 0
        ok &= keep[lanes][:, None].expand(-1, n).reshape(-1)
        values = torch.zeros(s_idx.shape, dtype=d.dtype)
        values[ok] = src_view[s_idx[ok]].to(d.dtype)
        d[(flat[0][:, None] + step).reshape(-1)] = values

    _HANDLERS = {Kernel: kernel, Alloc: alloc, For: for_, Parallel: parallel, If: if_, Let: let, Store: store,
                 AtomicAdd: atomic_add, Print: print_, AnnotateLayout: nothing, UseSwizzle: nothing,
                 MBarrierOp: mbarrier, While: while_, Evaluate: evaluate, ImportSource: nothing,
                 NamedBarrier: named_barrier, RngInit: rng_init, LoopExit: loop_exit,
                 Assert: device_assert}

    # -- memory ----------------------------------------------------------------------------------------------
    def _shared_region(self, buf: Buffer, clip, write: bool, span) -> None:
        """A tile op's access of a shared region by the running branch (``compiler.interp_role_race``)."""
        shape, flat = self.shapes[buf], torch.zeros((), dtype=torch.int64)
        for dim, (_, lo, hi) in enumerate(clip):
            flat = flat.unsqueeze(-1) * shape[dim] + torch.arange(lo, hi, dtype=torch.int64)
        self.roles.races.access(self.roles.current(), buf, flat.reshape(-1), write, span, math.prod(shape))

    def _shared_elements(self, buf: Buffer, idx, mask, write: bool, span) -> None:
        """An element access of a shared buffer by the running branch's lanes (``mask``: the ones that run it)."""
        shape = self.shapes[buf]
        flat = torch.zeros((), dtype=torch.int64)
        for i, n in zip(idx, shape):
            flat = flat * n + torch.as_tensor(i, dtype=torch.int64).clamp(0, n - 1)
        if mask is not None:
            flat, mask = torch.broadcast_tensors(flat, torch.as_tensor(mask))
            flat = flat[mask]
        self.roles.races.access(self.roles.current(), buf, flat.reshape(-1), write, span, math.prod(shape))

    def _clip(self, r: Region, span):
        """Per dim: (start, in-bounds lo, hi). Faults on out-of-bounds on-chip regions."""
        shape = self.shapes[r.buffer]
        out = []
        for dim, (s, n) in enumerate(zip(r.starts, r.extents)):
            start = int(self.ev(s))
            lo, hi = max(start, 0), min(start + n, shape[dim])
            if r.buffer.scope != "global" and (lo != start or hi != start + n):
                raise KernelFault(f"region {region_str(r)} = [{start}, {start + n}) in dim {dim} is out of bounds "
                                  f"of '{r.buffer.name}' (shape {shape})", span)
            out.append((start, lo, hi))
        return out

    def read_region(self, r: Region, span) -> torch.Tensor:
        if r.buffer in self.lane_bufs:
            raise KernelFault(f"a tile op reads '{r.buffer.name}', a per-thread local of a kernel with per-thread "
                              f"code (T.get_thread_binding); read it element by element", span)
        t = self.mem[r.buffer]
        clip = self._clip(r, span)
        if self.roles is not None and r.buffer.scope == "shared":
            self._shared_region(r.buffer, clip, False, span)
        if all(lo == s and hi == s + n for (s, lo, hi), n in zip(clip, r.extents)):
            return t[tuple(slice(lo, hi) for _, lo, hi in clip)]
        tile = torch.zeros(r.extents, dtype=t.dtype)
        if all(hi > lo for _, lo, hi in clip):
            tile[tuple(slice(lo - s, hi - s) for s, lo, hi in clip)] = t[tuple(slice(lo, hi) for _, lo, hi in clip)]
        return tile

    def write_region(self, r: Region, tile: torch.Tensor, span, atomic: bool = False) -> None:
        t = self.mem[r.buffer]
        clip = self._clip(r, span)
        if r.buffer.dtype == "tfloat32":
            tile = to_float(tile, r.buffer.dtype)
        if r.buffer in self.lane_bufs:  # T.fill / T.clear of a per-thread local: the same tile in every thread
            if self.active is not None:
                raise KernelFault(f"a tile op writes the per-thread local '{r.buffer.name}' under a condition that "
                                  f"differs between threads", span)
            t[(slice(None),) + tuple(slice(lo, hi) for _, lo, hi in clip)] = tile
            return
        if self.roles is not None and r.buffer.scope == "shared":
            self._shared_region(r.buffer, clip, True, span)
        if all(hi > lo for _, lo, hi in clip):
            t[tuple(slice(lo, hi) for _, lo, hi in clip)] = tile[tuple(slice(lo - s, hi - s) for s, lo, hi in clip)]
            if self.block_races is not None and r.buffer in self.block_races.stored:
                ranges = [torch.arange(lo, hi).reshape([-1 if d == k else 1 for k in range(len(clip))])
                          for d, (_, lo, hi) in enumerate(clip)]
                self.note_block_write(r.buffer, ranges, None, span, atomic)

    def note_block_write(self, buf: Buffer, idx, keep, span, atomic: bool) -> None:
        """Tell the kernel's interp_block_race recorder (if it watches ``buf``) which elements this block writes."""
        if self.block_races is None or buf not in self.block_races.stored:
            return
        parts = torch.broadcast_tensors(*[torch.as_tensor(i) for i in idx],
                                        *([torch.as_tensor(keep)] if keep is not None else []))
        flat = torch.zeros(parts[0].shape, dtype=torch.int64)
        for i, n in zip(parts[:len(idx)], self.shapes[buf]):
            flat = flat * int(n) + i.to(torch.int64)
        self.block_races.note(buf, (flat[parts[-1]] if keep is not None else flat).reshape(-1), span, atomic)

    def _element_indices(self, buf: Buffer, indices, span):
        """Evaluated indices (broadcast tensors or ints) and the in-bounds mask (None when all in bounds)."""
        idx = [self.ev(i) for i in indices]
        idx = [i.long() if isinstance(i, torch.Tensor) and i.dtype in _NARROW_INDEX else i for i in idx]  # not masks
        shape = self.shapes[buf]
        inb = None
        for dim, (i, n) in enumerate(zip(idx, shape)):
            ok = (i >= 0) & (i < n) if isinstance(i, torch.Tensor) else (0 <= i < n)
            if isinstance(ok, bool):
                if ok:
                    continue
                ok = torch.tensor(False)
            live = ok if self.active is None else ok | ~self.active
            if buf.scope != "global" and not bool(live.all()):
                i_b, live_b = torch.broadcast_tensors(torch.as_tensor(i), live)
                bad = [int(x) for x in i_b.flatten()[~live_b.flatten()][:3]]
                raise KernelFault(f"index {bad[0]} is out of bounds for dim {dim} of '{buf.name}' (shape {shape})",
                                  span)
            inb = ok if inb is None else inb & ok
        return idx, inb

    def load(self, e: Load):
        buf = e.buffer
        idx, inb = self._element_indices(buf, e.indices, e.span)
        t = self.mem[buf]
        if self.race is not None and buf in self.race.reads:
            live = self.active if inb is None else (inb if self.active is None else inb & self.active)
            self.race.read(buf, idx, live, e.span)
        if self.roles is not None and buf.scope == "shared":
            self._shared_elements(buf, idx, self.active, False, e.span)
        if inb is not None:
            idx = [torch.as_tensor(i).clamp(0, n - 1) for i, n in zip(idx, self.shapes[buf])]
        if buf in self.lane_bufs:  # each thread reads its own copy
            idx = [self.lanes] + [torch.as_tensor(i) for i in idx]
        if all(isinstance(i, int) for i in idx):
            return t[tuple(idx)].clone()
        val = t[tuple(torch.as_tensor(i) for i in idx)]
        if val.dtype in _UNSIGNED_WIDE:  # torch has no CPU arithmetic for them: held as int64 (``storage``)
            val = val.to(torch.int64)
        if inb is not None:
            val = torch.where(inb, val, torch.zeros((), dtype=val.dtype))
        return val

    def write_elements(self, buf: Buffer, indices, value, mask, span, accumulate) -> None:
        """Store (accumulate False), atomic add (True) or atomic max/min ("max"/"min") ``value`` at ``indices``."""
        idx, inb = self._element_indices(buf, indices, span)
        t = self.mem[buf]
        value = as_tensor(value, buf.dtype)
        if buf.dtype == "tfloat32" and accumulate is False:  # a value entering a tfloat32 buffer is rounded to it
            value = to_float(value, buf.dtype)
        if self.race is not None and buf in self.race.writes:
            self.race.write(buf, idx, value, mask if inb is None else (inb if mask is None else mask & inb), span,
                            atomic=accumulate is not False)
        self.note_block_write(buf, idx, mask if inb is None else (inb if mask is None else mask & inb), span,
                              atomic=accumulate is not False)
        if self.roles is not None and buf.scope == "shared":
            self._shared_elements(buf, idx, mask, True, span)
        if buf in self.lane_bufs:  # each thread writes its own copy
            idx = [self.lanes] + [torch.as_tensor(i) for i in idx]
        if accumulate in ("max", "min"):
            self._atomic_extreme(t, idx, value, mask if inb is None else (inb if mask is None else mask & inb),
                                 accumulate)
            return
        if mask is None and inb is None and value.dim() == 0 and all(isinstance(i, int) for i in idx):
            if accumulate:
                cd = compute_dtype(buf.dtype)
                t[tuple(idx)] = (t[tuple(idx)].to(cd) + value.to(cd)).to(t.dtype)
            else:
                t[tuple(idx)] = value.to(t.dtype)
            return
        parts = [torch.as_tensor(i) for i in idx] + [value]
        keep = mask if inb is None else (inb if mask is None else mask & inb)
        if keep is not None:
            parts.append(torch.as_tensor(keep))
        parts = torch.broadcast_tensors(*parts)
        n_idx = len(idx)
        flat = [p.reshape(-1) for p in parts]
        if keep is not None:
            sel = flat[-1]
            flat = [f[sel] for f in flat[:-1]]
        index, vals = tuple(flat[:n_idx]), flat[n_idx]
        if accumulate:
            cd = compute_dtype(buf.dtype)
            acc = t.to(cd)
            acc.index_put_(index, vals.to(cd), accumulate=True)
            t.copy_(acc.to(t.dtype))
        elif t.dtype == torch.uint32:  # torch lacks index_put for uint32: write the same bits as int32
            bits = vals.to(torch.int64) & 0xFFFFFFFF
            t.view(torch.int32).index_put_(index, torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32))
        else:
            t.index_put_(index, vals.to(t.dtype))

    @staticmethod
    def _atomic_extreme(t: torch.Tensor, idx, value, keep, op: str) -> None:
        """T.atomic_max / T.atomic_min of ``value`` into ``t[idx]`` where ``keep`` (compiler.atomic_ops)."""
        parts = torch.broadcast_tensors(*([torch.as_tensor(i) for i in idx] + [torch.as_tensor(value)] +
                                          ([torch.as_tensor(keep)] if keep is not None else [])))
        flat = [p.reshape(-1) for p in parts]
        if keep is not None:
            flat = [f[flat[-1]] for f in flat[:-1]]
        lin = torch.zeros_like(flat[0], dtype=torch.int64)
        for i, stride in zip(flat[:len(idx)], t.stride()):
            lin += i.to(torch.int64) * stride
        uniq, inv = torch.unique(lin, return_inverse=True)
        view = t.as_strided((t.numel(),), (1,)) if t.is_contiguous() else None
        if view is None:
            raise KernelFault("atomic max/min into a non-contiguous buffer")
        view[uniq] = combine(view[uniq], inv, flat[len(idx)], op)

    # -- expressions -----------------------------------------------------------------------------------------
    def ev(self, e):
        if isinstance(e, (int, float, bool)):
            return e
        t = type(e)
        if t is Var:
            try:
                return self.env[e]
            except KeyError:
                raise KernelFault(f"variable '{e.name}' has no value here") from None
        if t is Const:
            return e.value if not e.dtype.is_float or e.dtype == "float32" else torch.tensor(e.value, dtype=e.dtype.torch)
        if t is Load:
            return self.load(e)
        if t is BinOp:
            return self.binop(e)
        if t is Cast:
            return self.cast(self.ev(e.value), e.value.dtype, e.dtype)
        if t is Cmp:
            a, b = self.ev(e.a), self.ev(e.b)
            return {"<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
                    "==": lambda: a == b, "!=": lambda: a != b}[e.op]()
        if t is Unary:
            a = self.ev(e.a)
            if e.op == "-":
                return -a
            if e.op == "~":
                return ~a
            return ~a if isinstance(a, torch.Tensor) else not a
        if t is Select:
            c, a, b = self.ev(e.cond), self.ev(e.a), self.ev(e.b)
            if not isinstance(c, torch.Tensor):
                return a if c else b
            return torch.where(c, as_tensor(a, e.dtype).to(storage(e.dtype)), as_tensor(b, e.dtype).to(
                storage(e.dtype)))
        if t is Call:
            return self.call(e)
        raise KernelFault(f"cannot evaluate {type(e).__name__}")

    def binop(self, e: BinOp):
        a, b = self.ev(e.a), self.ev(e.b)
        op, dt = e.op, e.dtype
        if dt.is_float:
            return float_binop(op, a, b, dt)
        if op in ("and", "or"):
            if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
                a, b = torch.as_tensor(a, dtype=torch.bool), torch.as_tensor(b, dtype=torch.bool)
                return a & b if op == "and" else a | b
            return (a and b) if op == "and" else (a or b)
        if op == "/":
            if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
                return torch.div(torch.as_tensor(a), torch.as_tensor(b), rounding_mode="trunc")
            return int(a / b)
        if op == "//":
            return torch.div(a, b, rounding_mode="floor") if isinstance(a, torch.Tensor) or isinstance(
                b, torch.Tensor) else a // b
        if op == "%":
            return torch.remainder(torch.as_tensor(a), b) if isinstance(a, torch.Tensor) or isinstance(
                b, torch.Tensor) else a % b
        r = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "&": lambda: a & b,
             "|": lambda: a | b, "^": lambda: a ^ b, "<<": lambda: a << b, ">>": lambda: a >> b}[op]()
        if dt.startswith("uint") and dt.bits < 64 and op in ("+", "-", "*", "<<"):
            r = r & ((1 << dt.bits) - 1)  # held in int64: wrap as the GPU's unsigned arithmetic does
        return r

    @staticmethod
    def cast(v, src, dst):
        if dst.is_float:
            return to_float(as_tensor(v, src), dst)
        if dst.is_bool:
            return (v != 0) if isinstance(v, torch.Tensor) else bool(v)
        if isinstance(v, torch.Tensor):
            if v.is_floating_point():
                v = torch.trunc(v.to(torch.float64))
            v = v.to(torch.int64)
            return int(v) if v.dim() == 0 else v
        return int(v)

    def call(self, e: Call):
        if is_extern(e):
            raise foreign_code(e, None)
        if e.name in random_philox.CALLS:
            return self.rng_draw(e)
        if e.name == warp_shuffle.SHFL:  # T.tvm_warp_shuffle: a value of another thread of the warp
            try:
                return warp_shuffle.gather(self.ev(e.args[0]), self.ev(e.args[1]), int(e.args[2].value), self.lanes)
            except IndexError as err:
                raise KernelFault(str(err)) from None
        args = [self.ev(a) for a in e.args]
        dt = e.dtype
        if e.name == "reinterpret":
            return reinterpret(args[0], e.args[0].dtype, dt)
        if not dt.is_float:
            if e.name in ("min", "max"):
                if any(isinstance(a, torch.Tensor) for a in args):
                    return MATH[e.name](torch.as_tensor(args[0]), torch.as_tensor(args[1]))
                return min(args) if e.name == "min" else max(args)
            if e.name == "abs":
                return abs(args[0])
            return args[0]
        return float_call(e.name, args, dt)
