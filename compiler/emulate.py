"""SIMT emulator of the thread IR: every thread of a block runs in lock-step on the CPU.

In: a ``DeviceKernel`` (or a ``DeviceModule``, kernels launched in order) from ``compiler.tir`` and ``values``, which
maps each kernel parameter to its value: a global Buffer to a CPU torch tensor of its dtype (viewed flat, written in
place), a scalar Var to a Python number.
Out: the global tensors updated in place; ``EmulationError`` (a ``KernelFault``) at the statement's span when the
kernel breaks a rule of the thread IR.
Guarantees:

- Blocks run one after another, blockIdx.x fastest. Inside a block every scalar is a torch tensor of shape
  ``[num_threads]`` (or a Python number / 0-d tensor when uniform); ``If`` on a thread-dependent condition pushes an
  execution mask, and statements under a mask only act for its active threads (a body with no active thread is
  skipped). ``Select`` and ``and``/``or`` evaluate their branches under the narrowed mask (C semantics).
- Numerics mirror ``compiler.interp``: float ops round to the expression's dtype after every op, computing in
  float32 (float64 for float64); int ``/`` truncates, ``//`` and ``%`` floor. Unlike the interpreter, integer
  results wrap to their dtype's width (two's complement), as the GPU does. AtomicAdd rounds once per statement.
- Memory: local buffers are ``[num_threads, size]`` tensors; shared buffers are typed views into ONE per-block byte
  arena at ``shared_offsets`` (so buffers that share bytes clobber each other, as on the GPU); both start as all-ones
  bytes (NaN for floats); each ``Declare`` (re)sets its active threads' rows to ``init`` or NaN (int: a poison
  value). Any out-of-bounds access by an active thread raises with buffer, size, index, thread and block.
- Store: duplicate addresses among active threads -> the last thread in thread order wins. AtomicAdd: all add up.
- ``shfl_xor`` follows CUDA's ``__shfl_xor_sync`` (a source lane in a later group of ``width`` lanes reads its own
  value) and needs every lane of each warp that runs it; ``Barrier`` needs every thread of the block; ``For`` needs
  one trip count for all active threads; ``VecCopy`` checks both ranges and the alignment stated in ``compiler.tir``
  (and, for a global buffer, that the tensor's data pointer is aligned to the vector size).
- ``Mma``, ``LdMatrix`` and the asynchronous copies are emulated by ``compiler.emulate_tensor`` (warp-wide, and
  cp.async writes landing only at the AsyncWait that retires their group).
- Race detector (``check_races=True``), per byte of the shared arena and barrier epoch: a byte written by thread A
  and then read or written by thread B, or read by A and then written by B, with no Barrier in between, raises
  "shared-memory race on buf[i]". Writes that leave the bytes unchanged are ignored (no thread can observe their
  order); atomic adds do not race with each other but do with plain reads and writes. Reads that precede a stage
  release which a warp-specialized producer's wait has seen (``compiler.emulate_ws``) no longer race with the loads it
  issues after the wait; they still do with the block's other writes.
"""

from __future__ import annotations

import itertools
import logging

import torch

from tileagent.compiler.errors import KernelArgumentError
from tileagent.compiler import warp_shuffle
from tileagent.compiler.ir.expr import BinOp, Call, Cast, Cmp, Const, Load, Select, Unary, Var, is_extern
from tileagent.compiler.atomic_ops import combine, elementwise, fetch
from tileagent.compiler.ir.stmt import (Assert, AtomicAdd, Buffer, Evaluate, For, If, ImportSource, Let, LoopExit,
                                        NamedBarrier, RngInit, Store, While)
from tileagent.compiler import emulate_hand_ws, emulate_sync, random_philox
from tileagent.compiler.emulate_tensor import WARP_SIZE, EmulationError, finish_async
from tileagent.compiler.emulate_wgmma import check_not_busy, check_registers, finish_wgmma, note_generic_write
from tileagent.compiler.emulate_tma import finish_tma
from tileagent.compiler.instructions import emulators
from tileagent.compiler.interp import ExitLoop, foreign_code
from tileagent.compiler.language.cp_async import CALLS as HAND_CALLS
from tileagent.compiler.intrinsics import (MATH, as_tensor, compute_dtype, float_binop, float_call, reinterpret,
                                           storage, to_float)
from tileagent.compiler.host_memory import tensor_at
from tileagent.compiler.tir import (BLOCK_IDX, Barrier, Declare, DeviceKernel, DeviceModule, GRID_DIM, GlobalAt, LANE,
                                    SpecialVar, THREAD, VecAtomicAdd, VecCopy, WARP)

__all__ = ["EmulationError", "run_kernel", "run_module"]

log = logging.getLogger(__name__)

_INT_POISON = -(2**30) + 7
_ATOMIC = -2  # writer id of bytes last updated by an atomic add
def run_module(module: DeviceModule, values: dict, *, check_races: bool = True) -> None:
    """Run every kernel of ``module`` in order. ``values`` may also key tensors by the PrimFunc's own tensor
    parameters (``module.flat_globals``); they are bound to the flat buffers the kernels use."""
    bound = dict(values)
    for param, flat in module.flat_globals.items():
        if param in values and flat not in values:
            bound[flat] = values[param]
    for kernel in module.kernels:
        run_kernel(kernel, bound, check_races=check_races)


def run_kernel(kernel: DeviceKernel, values: dict, *, check_races: bool = True) -> None:
    """Run one kernel launch: every block of its grid, each with all its threads in lock-step."""
    scalars, globals_ = _bind_params(kernel, values)
    probe = _Block(kernel, scalars, globals_, (0, 0, 0), (1, 1, 1), check_races)
    grid = [probe.uniform(probe.ev(g), "grid size") for g in kernel.grid]
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    if any(g % c for g, c in zip(grid, kernel.cluster)):  # as the GPU launcher refuses it
        raise KernelArgumentError(f"kernel {kernel.name}: grid {grid} is not a multiple of its cluster_dims "
                                  f"{tuple(kernel.cluster)}")
    log.debug("emulating %s: grid %s, block %s, %d shared bytes", kernel.name, grid, kernel.block,
              kernel.shared_bytes)
    hand_ws = emulate_hand_ws.prepare(kernel)
    for bz, by, bx in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
        _Block(kernel, scalars, globals_, (bx, by, bz), grid, check_races, hand_ws).run()


def _bind_params(kernel: DeviceKernel, values: dict) -> tuple[dict, dict]:
    scalars: dict = {}
    for p in kernel.params:
        if isinstance(p, Var):
            if p not in values:
                raise KernelArgumentError(f"kernel {kernel.name}: no value for scalar parameter '{p.name}'")
            v = values[p]
            scalars[p] = v.item() if isinstance(v, torch.Tensor) else v
    globals_: dict = {}
    probe = _Block(kernel, scalars, {}, (0, 0, 0), (1, 1, 1), False)
    for p in kernel.params:
        if not isinstance(p, Buffer):
            continue
        t = values.get(p)
        where = f"kernel {kernel.name}: global buffer '{p.name}'"
        if not isinstance(t, torch.Tensor):
            raise KernelArgumentError(f"{where} needs a torch tensor, got {type(t).__name__}")
        if t.device.type != "cpu" or t.dtype != p.dtype.torch:
            raise KernelArgumentError(f"{where} is {p.dtype} on the CPU, got {t.dtype} on {t.device}")
        try:
            flat = t.view(-1)
        except RuntimeError:
            raise KernelArgumentError(f"{where} needs a tensor that can be viewed flat (contiguous)") from None
        size = int(probe.uniform(probe.ev(p.shape[0]), "buffer size"))
        if size != flat.numel():
            raise KernelArgumentError(f"{where} has {size} elements, got a tensor of {flat.numel()}")
        globals_[p] = flat
    return scalars, globals_


def _wrap(v, dt):
    """Integer ``v`` reduced to ``dt``'s width, two's complement (Python ints and int64 tensors)."""
    if not dt.is_int or dt.bits >= 64:
        return v
    full = (1 << dt.bits) - 1
    if dt.startswith("uint"):
        return v & full
    half = 1 << (dt.bits - 1)
    return ((v + half) & full) - half


class _Block:
    """One thread block of one launch: its memory, scalar environment and execution-mask stack."""

    def __init__(self, kernel: DeviceKernel, scalars: dict, globals_: dict, block_idx, grid, check_races: bool,
                 hand_ws=None):
        self.kernel, self.nt = kernel, kernel.num_threads
        self.hand_ws = hand_ws  # emulate_hand_ws.prepare's ifs whose arms wait, when warp-specialized by hand
        self.block_idx, self.check_races = block_idx, check_races
        tid = torch.arange(self.nt, dtype=torch.int64)
        self.tid = tid
        self.env: dict = dict(scalars)
        self.env.update({THREAD: tid, LANE: tid % WARP_SIZE, WARP: tid // WARP_SIZE})
        self.env.update(zip(BLOCK_IDX, block_idx))
        self.env.update(zip(GRID_DIM, grid))
        self.mem: dict = dict(globals_)
        self.masks: list = [None]  # None: every thread active; else a bool tensor [nt] with at least one True
        self.loop_mask = None  # the mask when the innermost loop's current iteration began
        self.span = kernel.span
        self.epoch = 0
        self.shared: list = []

    # -- setup -------------------------------------------------------------------------------------------------
    def _setup_shared(self) -> None:
        k = self.kernel
        self.arena = torch.full((k.shared_bytes,), 0xFF, dtype=torch.uint8)
        self.offset: dict = {}
        for buf, off in k.shared_offsets.items():
            nbytes = int(buf.shape[0]) * buf.dtype.bytes
            if off % 16 or off < 0 or off + nbytes > k.shared_bytes:
                raise EmulationError(f"shared buffer '{buf.name}' ({nbytes} bytes at byte offset {off}) must start "
                                     f"16-byte aligned and lie inside the {k.shared_bytes}-byte shared arena",
                                     buf.span or k.span)
            self.mem[buf] = self.arena[off:off + nbytes].view(buf.dtype.torch)
            self.offset[buf] = off
            self.shared.append(buf)
        if self.check_races:
            n = k.shared_bytes
            self.writer = torch.full((n,), -1, dtype=torch.int64)
            self.writer_buf = torch.zeros(n, dtype=torch.int64)
            self.w_epoch = torch.full((n,), -1, dtype=torch.int64)
            self.rmin = torch.full((n,), -1, dtype=torch.int64)
            self.rmax = torch.full((n,), -1, dtype=torch.int64)
            self.r_epoch = torch.full((n,), -1, dtype=torch.int64)
            self.r_released = torch.zeros(n, dtype=torch.bool)  # this epoch's reads precede a stage release
            emulate_sync.setup(self, n)  # accesses a named barrier ordered (T.sync_threads(id, count))

    def run(self) -> None:
        self._setup_shared()
        self.async_open: list = []  # AsyncCopies issued since the last AsyncCommit
        self.async_groups: list = []  # committed groups whose writes have not landed yet, oldest first
        self.rng = random_philox.States(self.nt)  # T.rng_init / T.rng_rand: one generator per thread
        self.body(self.kernel.body)
        finish_async(self)
        finish_wgmma(self)
        finish_tma(self)

    # -- masks and uniformity ----------------------------------------------------------------------------------
    @property
    def mask(self):
        return self.masks[-1]

    def narrowed(self, cond):
        """The current mask and ``cond`` (a bool tensor [nt]); None when all threads stay active, False when none."""
        m = cond if self.mask is None else self.mask & cond
        if not bool(m.any()):
            return False
        return None if bool(m.all()) else m

    def active(self) -> torch.Tensor:
        """Ids of the active threads, ascending."""
        return self.tid if self.mask is None else self.tid[self.mask]

    def lanes(self, v, dtype=None) -> torch.Tensor:
        """``v`` as a tensor of shape [nt]."""
        t = torch.as_tensor(v, dtype=dtype) if not isinstance(v, torch.Tensor) else v
        if dtype is not None and t.dtype != dtype:
            t = t.to(dtype)
        return t.expand(self.nt) if t.dim() == 0 else t

    def uniform(self, v, what: str):
        """A value all active threads agree on, as a Python number; raises when they disagree."""
        if not isinstance(v, torch.Tensor):
            return v
        if v.dim() == 0:
            return v.item()
        vals, ids = (v, self.tid) if self.mask is None else (v[self.mask], self.active())
        bad = (vals != vals[0]).nonzero()
        if len(bad):
            j = int(bad[0])
            raise EmulationError(f"{what} differs between threads: {vals[0].item()} in thread {int(ids[0])}, "
                                 f"{vals[j].item()} in thread {int(ids[j])}", self.span)
        return vals[0].item()

    # -- statements --------------------------------------------------------------------------------------------
    def body(self, stmts) -> None:
        for s in stmts:
            handler = self._HANDLERS.get(type(s))
            if handler is None:
                raise EmulationError(f"{type(s).__name__} is not a statement of the thread IR", s.span)
            outer, self.span = self.span, s.span or self.span
            handler(self, s)
            self.span = outer

    def run_masked(self, stmts, mask) -> None:
        if mask is False or not stmts:
            return
        self.masks.append(mask)
        try:
            self.body(stmts)
        finally:
            self.masks.pop()

    def let(self, s: Let) -> None:
        v = self.ev(s.value)
        old = self.env.get(s.var)
        if self.mask is not None and old is not None:
            dt = storage(s.var.dtype)
            v = torch.where(self.mask, self.lanes(v, dt), self.lanes(old, dt))
        self.env[s.var] = v

    def if_(self, s: If) -> None:
        c = self.ev(s.cond)
        if not isinstance(c, torch.Tensor) or c.dim() == 0:
            self.run_masked(s.then_body if bool(c) else s.else_body, self.mask)
            return
        c = c.to(torch.bool)
        if emulate_hand_ws.active(self) and emulate_hand_ws.concurrent_if(self, s, c):
            return
        self.run_masked(s.then_body, self.narrowed(c))
        self.run_masked(s.else_body, self.narrowed(~c))

    def while_(self, s: While) -> None:
        while bool(self.uniform(self.ev(s.cond), "condition of a while loop")):
            if not self.iteration(s.body):
                return

    def for_(self, s: For) -> None:
        extent = int(self.uniform(self.ev(s.extent), f"trip count of loop '{s.var.name}'"))
        start, step = self.ev(s.start), self.ev(s.step)
        for k in range(extent):
            self.env[s.var] = _wrap(start + k * step, s.var.dtype)
            if not self.iteration(s.body):
                return

    def iteration(self, stmts) -> bool:
        """Run one iteration of a loop body; False when a ``break`` left the loop (``continue`` ends the iteration)."""
        outer, self.loop_mask = self.loop_mask, self.mask
        span = self.span
        try:
            self.body(stmts)
        except ExitLoop as e:
            self.span = span
            return e.kind == "continue"
        finally:
            self.loop_mask = outer
        return True

    def loop_exit(self, s: LoopExit) -> None:
        """``break``/``continue``: every thread that runs the loop's iteration must take it (C lets the others go
        on, but then a barrier later in the loop would hang; ``compiler.loop_exits`` proves that statically)."""
        if self.mask is not self.loop_mask and (self.loop_mask is None or bool((self.mask != self.loop_mask).any())):
            ids = self.active()
            raise EmulationError(f"`{s.kind}` taken by some threads of the loop only (threads {int(ids[0])}.."
                                 f"{int(ids[-1])} of {self.nt}): its condition differs between threads", s.span)
        raise ExitLoop(s.kind)

    def declare(self, s: Declare) -> None:
        b = s.buffer
        if b.scope != "local":
            raise EmulationError(f"Declare of '{b.name}' in scope {b.scope}; only local buffers are declared", s.span)
        fill = float("nan") if b.dtype.is_float else (_INT_POISON if b.dtype.bits >= 32 else 0)
        held = torch.int64 if b.dtype == "uint32" else b.dtype.torch  # torch's uint32 lacks indexing
        if b not in self.mem:
            self.mem[b] = torch.full((self.nt, int(b.shape[0])), fill, dtype=held)
        rows = self.active()
        if s.init is not None:
            fill = self.lanes(as_tensor(self.ev(s.init), b.dtype).to(held))[rows, None]
        self.mem[b][rows] = fill

    def device_assert(self, s: Assert) -> None:
        if bool((~self.lanes(self.ev(s.cond), torch.bool)[self.active()]).any()):
            raise EmulationError(f"T.device_assert failed: {s.message or 'the condition is false'}", s.span)

    def global_at(self, s: GlobalAt) -> None:
        """``T.make_tensor``: the flat tensor at the active threads' (equal) host address."""
        b = s.buffer
        self.mem[b] = tensor_at(self.lanes(self.ev(s.address))[self.active()], int(self.ev(b.shape[0])), b.dtype,
                                b.name, s.span)

    def store(self, s: Store) -> None:
        self.write(s.buffer, self.ev(s.indices[0]), 1, self.ev(s.value), "store to", accumulate=False)

    def atomic_add(self, s: AtomicAdd) -> None:
        if s.prev is not None:  # return_prev=True: the active threads' updates in thread order (atomic_ops.fetch)
            return self.fetch(s)
        self.write(s.buffer, self.ev(s.indices[0]), 1, self.ev(s.value), f"atomic {s.op} to",
                   accumulate=True if s.op == "add" else s.op)

    def fetch(self, s: AtomicAdd) -> None:
        buf = s.buffer
        mem, idx = self.elements(buf, self.ev(s.indices[0]), 1, f"atomic {s.op} to")
        ids = self.active()
        vals = self.lanes(as_tensor(self.ev(s.value), buf.dtype))[ids].to(mem.dtype)
        idx = idx[ids]
        if buf.scope == "shared" and self.check_races:
            self.race_write(buf, idx, ids, vals[:, None], True)
        uniq, inv = torch.unique(idx[:, 0], return_inverse=True)
        old, mem[uniq] = fetch(mem[uniq], inv, vals, s.op)
        prev = torch.zeros(self.nt, dtype=mem.dtype)
        prev[ids] = old
        self.write(s.prev.buffer, self.ev(s.prev.indices[0]), 1, prev, "store to", accumulate=False)

    def vec_copy(self, s: VecCopy) -> None:
        src_index, dst_index = self.ev(s.src_index), self.ev(s.dst_index)
        self.check_vector(s.src, src_index, s.width, "from")
        self.check_vector(s.dst, dst_index, s.width, "to")
        vals = self.read(s.src, src_index, s.width, "vector copy from")
        self.write(s.dst, dst_index, s.width, vals, "vector copy to", accumulate=False)

    def vec_atomic_add(self, s: VecAtomicAdd) -> None:
        src_index, dst_index = self.ev(s.src_index), self.ev(s.dst_index)
        self.check_vector(s.dst, dst_index, s.width, "to")
        vals = self.read(s.src, src_index, s.width, "vector atomic add from")
        self.write(s.dst, dst_index, s.width, vals.to(s.dst.dtype.torch), "vector atomic add to", accumulate=True)

    def barrier(self, s: Barrier) -> None:
        group = getattr(self, "sync_group", None)  # the consumer threads of a WarpSpecialize (compiler.emulate_ws)
        if self.mask is not None and not (group is not None and torch.equal(self.mask, group)):
            n = int(self.mask.sum())
            raise EmulationError(f"thread-divergent Barrier: reached by {n} of {self.nt} threads (first missing: "
                                 f"thread {int((~self.mask).nonzero()[0])}); __syncthreads needs every thread",
                                 s.span)
        self.epoch += 1

    def full_warps(self, what: str) -> torch.Tensor:
        """Ids of the warps that execute a warp-wide ``what``: those with an active lane; raises if one of them has
        an inactive or missing lane."""
        present, active = self.warp_lanes(what)
        short = ((active > 0) & (present < WARP_SIZE)).nonzero()
        if len(short):
            w = int(short[0])
            raise EmulationError(f"{what} in warp {w}, which has only {int(present[w])} of {WARP_SIZE} lanes in a "
                                 f"block of {self.nt} threads; every lane of the warp must execute it", self.span)
        return (active > 0).nonzero()[:, 0]

    def warp_lanes(self, what: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(lanes present, lanes active) per warp of the block; raises if a warp executing the warp-wide ``what``
        has only some of its lanes active."""
        warp = self.tid // WARP_SIZE
        present = torch.bincount(warp)
        active = present if self.mask is None else torch.zeros_like(present).index_add_(0, warp,
                                                                                         self.mask.to(torch.int64))
        partial = ((active > 0) & (active < present)).nonzero()
        if len(partial):
            w = int(partial[0])
            raise EmulationError(f"{what} under divergence: {int(active[w])} of {int(present[w])} lanes of warp {w} "
                                 f"are active; every lane of the warp must execute it", self.span)
        return present, active

    _HANDLERS = {Let: let, If: if_, For: for_, While: while_, Declare: declare, GlobalAt: global_at, Store: store,
                 AtomicAdd: atomic_add, Assert: device_assert,
                 VecCopy: vec_copy, VecAtomicAdd: vec_atomic_add, Barrier: barrier, **emulators(),
                 NamedBarrier: emulate_sync.named_barrier,
                 RngInit: lambda self, s: self.rng.init(*(self.ev(x) for x in (s.seed, s.subsequence, s.offset)),
                                                        self.mask),
                 Evaluate: lambda self, s: emulate_hand_ws.evaluate(self, s.value) if s.value.name in HAND_CALLS
                 else self.call(s.value), ImportSource: lambda self, s: None,
                 LoopExit: loop_exit}

    # -- memory ------------------------------------------------------------------------------------------------
    def buffer_memory(self, buf: Buffer) -> torch.Tensor:
        try:
            return self.mem[buf]
        except KeyError:
            where = {"global": "is not a parameter of the kernel", "shared": "has no offset in shared_offsets",
                     "local": "is used before its Declare"}.get(buf.scope, f"has scope {buf.scope}")
            raise EmulationError(f"buffer '{buf.name}' {where}", self.span) from None

    def elements(self, buf: Buffer, base, width: int, verb: str):
        """Memory of ``buf`` and the element indices [nt, width] of an access; raises if an active one is out of
        bounds."""
        mem = self.buffer_memory(buf)
        size = mem.shape[-1]
        idx = self.lanes(base, torch.int64)[:, None] + torch.arange(width)
        bad = ((idx < 0) | (idx >= size)).any(1)
        if self.mask is not None:
            bad &= self.mask
        if bool(bad.any()):
            threads = bad.nonzero()[:, 0]
            t = int(threads[0])
            row = idx[t]
            i = int(row[(row < 0) | (row >= size)][0])
            rng = f"index {i}" if width == 1 else f"index {i} (elements {int(row[0])}..{int(row[-1])})"
            more = f" (and {len(threads) - 1} more threads)" if len(threads) > 1 else ""
            raise EmulationError(f"out-of-bounds {verb} {buf.scope} buffer '{buf.name}' (size {size}): {rng} in "
                                 f"thread {t} of block {self.block_idx}{more}", self.span)
        return mem, idx

    def check_vector(self, buf: Buffer, base, width: int, side: str) -> None:
        nbytes = width * buf.dtype.bytes
        if nbytes not in (4, 8, 16):
            return
        idx = self.lanes(base, torch.int64)
        bad = idx % width != 0
        if self.mask is not None:
            bad &= self.mask
        if bool(bad.any()):
            t = int(bad.nonzero()[0])
            raise EmulationError(f"misaligned vector copy {side} {buf.scope} buffer '{buf.name}': index {int(idx[t])} "
                                 f"in thread {t} is not a multiple of the width {width} ({nbytes}-byte access)",
                                 self.span)
        mem = self.buffer_memory(buf)
        if buf.scope == "global" and mem.data_ptr() % nbytes:
            raise EmulationError(f"misaligned vector copy {side} global buffer '{buf.name}': its data pointer is "
                                 f"not {nbytes}-byte aligned", self.span)

    def read(self, buf: Buffer, base, width: int, verb: str) -> torch.Tensor:
        """Values [nt, width] of buf[base + v]; inactive threads read a clamped in-bounds element."""
        mem, idx = self.elements(buf, base, width, verb)
        safe = idx.clamp(0, mem.shape[-1] - 1)
        if buf.scope == "local":
            if buf in getattr(self, "wgmma_pending", ()):  # a T.wgmma_gemm accumulator not retired yet
                check_registers(self, buf, idx, "read")
            return mem[self.tid[:, None], safe]
        if buf.scope == "shared" and self.check_races:
            ids = self.active()
            self.race_read(buf, idx[ids], ids)
        return mem[safe]

    def write(self, buf: Buffer, base, width: int, value, verb: str, accumulate) -> None:
        """Store (accumulate False), atomic add (True) or atomic max/min ("max"/"min", compiler.atomic_ops)."""
        mem, idx = self.elements(buf, base, width, verb)
        if buf in getattr(self, "wgmma_pending", ()):  # a T.wgmma_gemm accumulator not retired yet
            check_registers(self, buf, idx, "wrote")
        ids = self.active()
        value = as_tensor(value, buf.dtype)
        if buf.dtype == "tfloat32" and accumulate is False:  # a value entering a tfloat32 buffer is rounded to it
            value = to_float(value, buf.dtype)
        if value.dim() == 1:
            value = value[:, None]
        vals = value.expand(self.nt, width)[ids]
        idx = idx[ids]
        if buf.scope == "local":
            rows = ids[:, None].expand_as(idx)
            if accumulate in ("max", "min"):
                mem[rows, idx] = elementwise(mem[rows, idx], vals.to(mem.dtype), accumulate)
            elif accumulate:
                cd = compute_dtype(buf.dtype)
                mem[rows, idx] = (mem[rows, idx].to(cd) + vals.to(cd)).to(mem.dtype)
            else:
                mem[rows, idx] = vals.to(mem.dtype)
            return
        if buf.scope == "shared" and self.check_races:
            self.race_write(buf, idx, ids, vals.to(mem.dtype), bool(accumulate))
        flat_idx, flat_vals = idx.reshape(-1), vals.reshape(-1)
        if accumulate in ("max", "min"):
            uniq, inv = torch.unique(flat_idx, return_inverse=True)
            mem[uniq] = combine(mem[uniq], inv, flat_vals, accumulate)
            return
        if accumulate:
            uniq, inv = torch.unique(flat_idx, return_inverse=True)
            cd = compute_dtype(buf.dtype) if buf.dtype.is_float else torch.int64
            acc = mem[uniq].to(cd)
            acc.index_add_(0, inv, flat_vals.to(cd))
            mem[uniq] = acc.to(mem.dtype)
            return
        uniq, inv = torch.unique(flat_idx, return_inverse=True)
        if len(uniq) < len(flat_idx):  # duplicates: the last writer in thread order wins
            last = torch.full((len(uniq),), -1, dtype=torch.int64)
            last.scatter_reduce_(0, inv, torch.arange(len(flat_idx)), "amax")
            flat_idx, flat_vals = flat_idx[last], flat_vals[last]
        if mem.dtype == torch.uint32:  # torch lacks index_put for uint32: write the same bits as int32
            bits = flat_vals.to(torch.int64) & 0xFFFFFFFF
            mem, flat_vals = mem.view(torch.int32), torch.where(bits >= 2**31, bits - 2**32, bits)
        mem[flat_idx] = flat_vals.to(mem.dtype)

    # -- race detector -----------------------------------------------------------------------------------------
    def _bytes(self, buf: Buffer, idx: torch.Tensor, ids: torch.Tensor):
        """Arena byte positions [n, w, bytes] of elements idx [n, w] accessed by threads ids [n], and the thread of
        each byte."""
        nb = buf.dtype.bytes
        b = self.offset[buf] + idx[..., None] * nb + torch.arange(nb)
        return b, ids[:, None, None].expand_as(b)

    def _race(self, buf: Buffer, byte: int, first: str, second: str) -> EmulationError:
        i = (byte - self.offset[buf]) // buf.dtype.bytes
        return EmulationError(f"shared-memory race on {buf.name}[{i}]: {first}, then {second} without a barrier "
                              f"between them (block {self.block_idx}; add a Barrier)", self.span)

    def _who_wrote(self, buf: Buffer, byte: int) -> str:
        w = int(self.writer[byte])
        other = self.shared[int(self.writer_buf[byte])]
        through = f" through '{other.name}'" if other is not buf else ""
        return ("updated by an atomic add" if w == _ATOMIC else f"written by thread {w}") + through

    def race_read(self, buf: Buffer, idx: torch.Tensor, ids: torch.Tensor) -> None:
        b, t = self._bytes(buf, idx, ids)
        b, t = b.reshape(-1), t.reshape(-1)
        wr = self.writer[b]
        bad = (self.w_epoch[b] == self.epoch) & (wr != t) & ~emulate_sync.released(self, self.w_group[b], t)
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            raise self._race(buf, int(b[j]), self._who_wrote(buf, int(b[j])), f"read by thread {int(t[j])}")
        stale = b[(self.r_epoch[b] != self.epoch) | (self.r_group[b] >= 0)]
        self.rmin[stale], self.rmax[stale], self.r_group[stale] = self.nt, -1, -1
        self.r_epoch[b] = self.epoch
        self.r_released[b] = False
        self.rmin.scatter_reduce_(0, b, t, "amin")
        self.rmax.scatter_reduce_(0, b, t, "amax")

    def race_issue(self, buf: Buffer, idx: torch.Tensor, ids: torch.Tensor) -> None:
        """A write that may land any time from now on (a cp.async being issued): another thread's read of these
        bytes since the last barrier is a race (write-after-read). The write itself is checked when it lands."""
        b, t = self._bytes(buf, idx, ids)
        b, t = b.reshape(-1), t.reshape(-1)
        rmin, rmax = self.rmin[b], self.rmax[b]
        bad = (self.r_epoch[b] == self.epoch) & ~self.r_released[b] & ((rmin != t) | (rmax != t))
        bad &= ~emulate_sync.released(self, self.r_group[b], t)
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            reader = int(rmin[j]) if int(rmin[j]) != int(t[j]) else int(rmax[j])
            raise self._race(buf, int(b[j]), f"read by thread {reader}", f"overwritten by the cp.async thread "
                             f"{int(t[j])} issues")

    def race_write(self, buf: Buffer, idx: torch.Tensor, ids: torch.Tensor, vals: torch.Tensor, atomic: bool) -> None:
        b, t = self._bytes(buf, idx, ids)
        check_not_busy(self, buf, b.reshape(-1))  # bytes a pending wgmma still reads
        note_generic_write(self, b.reshape(-1), t.reshape(-1))  # unfenced for the async proxy (wgmma)
        if not atomic:  # only bytes whose value changes can be observed in a different order
            new = vals.contiguous().view(torch.uint8).reshape(b.shape)
            changed = new != self.arena[b]
            b, t, new = b[changed], t[changed], new[changed]
            order = torch.argsort(b, stable=True)
            bs, ts, ns = b[order], t[order], new[order]
            clash = ((bs[1:] == bs[:-1]) & (ns[1:] != ns[:-1])).nonzero()
            if len(clash):
                j = int(clash[0])
                raise self._race(buf, int(bs[j]), f"written by thread {int(ts[j])}",
                                 f"written by thread {int(ts[j + 1])} in the same statement")
        b, t = b.reshape(-1), t.reshape(-1)
        wr = self.writer[b]
        bad = (self.w_epoch[b] == self.epoch) & (wr != t) & ((wr != _ATOMIC) | (not atomic))
        bad &= ~emulate_sync.released(self, self.w_group[b], t)
        verb = "updated by an atomic add in thread" if atomic else "written by thread"
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            raise self._race(buf, int(b[j]), self._who_wrote(buf, int(b[j])), f"{verb} {int(t[j])}")
        rmin, rmax = self.rmin[b], self.rmax[b]
        bad = (self.r_epoch[b] == self.epoch) & ((rmin != t) | (rmax != t))
        bad &= ~emulate_sync.released(self, self.r_group[b], t)
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            reader = int(rmin[j]) if int(rmin[j]) != int(t[j]) else int(rmax[j])
            raise self._race(buf, int(b[j]), f"read by thread {reader}", f"{verb} {int(t[j])}")
        self.w_epoch[b] = self.epoch
        self.w_group[b] = -1
        self.writer_buf[b] = self.shared.index(buf)
        if atomic:
            self.writer[b] = _ATOMIC
        else:
            self.writer[b] = -1
            self.writer.scatter_reduce_(0, b, t, "amax")

    # -- expressions -------------------------------------------------------------------------------------------
    def ev(self, e):
        if isinstance(e, (int, float, bool)):
            return e
        t = type(e)
        if t is Var or t is SpecialVar:
            try:
                return self.env[e]
            except KeyError:
                raise EmulationError(f"variable '{e.name}' has no value here", self.span) from None
        if t is Const:
            return e.value if not e.dtype.is_float or e.dtype == "float32" else torch.tensor(e.value,
                                                                                            dtype=e.dtype.torch)
        if t is Load:
            return self.load(e)
        if t is BinOp:
            return self.binop(e)
        if t is Cast:
            return _cast(self.ev(e.value), e.value.dtype, e.dtype)
        if t is Cmp:
            a, b = self.ev(e.a), self.ev(e.b)
            return {"<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
                    "==": lambda: a == b, "!=": lambda: a != b}[e.op]()
        if t is Unary:
            a = self.ev(e.a)
            if e.op == "-":
                return _wrap(-a, e.dtype)
            if e.op == "~":
                return _wrap(~a, e.dtype)
            return ~a if isinstance(a, torch.Tensor) else not a
        if t is Select:
            return self.select(e)
        if t is Call:
            return self.shfl_xor(e) if e.name == "shfl_xor" else self.shfl(e) if e.name == warp_shuffle.SHFL \
                else self.call(e)
        raise EmulationError(f"cannot evaluate {type(e).__name__}", self.span)

    def under(self, cond, expr):
        """Evaluate ``expr`` for the threads where ``cond`` (a bool tensor) holds; None if there are none."""
        m = self.narrowed(cond)
        if m is False:
            return None
        self.masks.append(m)
        try:
            return self.ev(expr)
        finally:
            self.masks.pop()

    def select(self, e: Select):
        c = self.ev(e.cond)
        if not isinstance(c, torch.Tensor) or c.dim() == 0:
            return self.ev(e.a) if bool(c) else self.ev(e.b)
        c = c.to(torch.bool)
        dt = storage(e.dtype)
        a, b = self.under(c, e.a), self.under(~c, e.b)
        if a is None or b is None:
            return as_tensor(b if a is None else a, e.dtype).to(dt)
        return torch.where(c, as_tensor(a, e.dtype).to(dt), as_tensor(b, e.dtype).to(dt))

    def load(self, e: Load):
        vals = self.read(e.buffer, self.ev(e.indices[0]), 1, "load from")[:, 0]
        return vals.to(torch.int64) if e.buffer.dtype.is_int else vals

    def binop(self, e: BinOp):
        op, dt = e.op, e.dtype
        a = self.ev(e.a)
        if op in ("and", "or"):
            if isinstance(a, torch.Tensor) and a.dim():
                a = a.to(torch.bool)
                b = self.under(a if op == "and" else ~a, e.b)
                if b is None:
                    return a
                b = self.lanes(b, torch.bool)
                return a & b if op == "and" else a | b
            if bool(a) == (op == "or"):
                return a
            return self.ev(e.b)
        b = self.ev(e.b)
        if dt.is_float:
            return float_binop(op, a, b, dt)
        if op in ("/", "//", "%"):
            return _wrap(self.int_div(op, a, b), dt)
        r = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "&": lambda: a & b,
             "|": lambda: a | b, "^": lambda: a ^ b, "<<": lambda: a << b, ">>": lambda: a >> b}[op]()
        return _wrap(r, dt)

    def int_div(self, op: str, a, b):
        if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
            if b == 0:
                raise EmulationError("integer division by zero", self.span)
            if op == "/":
                q = abs(a) // abs(b)
                return q if (a >= 0) == (b > 0) else -q
            return a // b if op == "//" else a % b
        b = torch.as_tensor(b)
        zero = b == 0
        if b.dim() and self.mask is not None:
            zero = zero & self.mask
        if bool(zero.any()):
            where = f" in thread {int(zero.nonzero()[0])}" if zero.dim() else ""
            raise EmulationError(f"integer division by zero{where}", self.span)
        b = torch.where(b == 0, torch.ones_like(b), b)  # inactive threads
        a = torch.as_tensor(a)
        if op == "%":
            return torch.remainder(a, b)
        return torch.div(a, b, rounding_mode="trunc" if op == "/" else "floor")

    def call(self, e: Call):
        if is_extern(e):
            raise foreign_code(e, self.span)
        if e.name in random_philox.CALLS:  # each active thread draws its next number
            if not bool(self.rng.ready[self.active()].all()):
                raise EmulationError("T.rng_rand before this thread ran T.rng_init", self.span)
            counts = torch.zeros(self.nt, dtype=torch.int64)
            counts[self.active()] = 1
            values, thread = self.rng.draw(counts)
            out = torch.zeros(self.nt, dtype=torch.int64)
            out[thread] = values
            return out if e.name == "rng_rand" else random_philox.uniform(out)
        if e.name == "reinterpret":
            return reinterpret(self.ev(e.args[0]), e.args[0].dtype, e.dtype)
        if e.name not in MATH:
            raise EmulationError(f"unknown intrinsic '{e.name}'", self.span)
        args = [self.ev(a) for a in e.args]
        dt = e.dtype
        if not dt.is_float:
            if e.name in ("min", "max"):
                if any(isinstance(a, torch.Tensor) for a in args):
                    return MATH[e.name](torch.as_tensor(args[0]), torch.as_tensor(args[1]))
                return min(args) if e.name == "min" else max(args)
            if e.name == "abs":
                return _wrap(abs(args[0]), dt)
            return args[0]
        return float_call(e.name, args, dt)

    def shfl(self, e: Call):
        """CUDA __shfl_sync(0xffffffff, v, lane, width) (T.tvm_warp_shuffle) over every warp of the block at once."""
        self.warp_lanes("a warp shuffle")
        try:
            return warp_shuffle.gather(self.lanes(self.ev(e.args[0])), self.ev(e.args[1]), int(e.args[2].value),
                                       self.tid)
        except IndexError as err:
            raise EmulationError(str(err), self.span) from None

    def shfl_xor(self, e: Call):
        """CUDA __shfl_xor_sync(0xffffffff, v, mask, width) over every warp of the block at once."""
        value = self.lanes(self.ev(e.args[0]))
        lane_mask = int(self.uniform(self.ev(e.args[1]), "shfl_xor lane mask"))
        width = int(self.uniform(self.ev(e.args[2]), "shfl_xor width"))
        if width not in (1, 2, 4, 8, 16, 32) or not 0 <= lane_mask < WARP_SIZE:
            raise EmulationError(f"shfl_xor with lane mask {lane_mask} and width {width}: the width must be a power "
                                 f"of 2 up to {WARP_SIZE} and the mask below {WARP_SIZE}", self.span)
        self.warp_lanes("shfl_xor")
        warp = self.tid // WARP_SIZE
        lane = self.tid % WARP_SIZE
        src = lane ^ lane_mask
        src = torch.where(src >= (lane // width + 1) * width, lane, src) + warp * WARP_SIZE
        missing = src >= self.nt
        if self.mask is not None:
            missing &= self.mask
        if bool(missing.any()):
            t = int(missing.nonzero()[0])
            raise EmulationError(f"shfl_xor in thread {t} reads lane {int(src[t]) % WARP_SIZE} of warp {int(warp[t])}, "
                                 f"which does not exist in a block of {self.nt} threads", self.span)
        return value[src.clamp(max=self.nt - 1)]


def _cast(v, src, dst):
    if dst.is_float:
        return to_float(as_tensor(v, src), dst)
    if dst.is_bool:
        return (v != 0) if isinstance(v, torch.Tensor) else bool(v)
    if isinstance(v, torch.Tensor):
        if v.is_floating_point():
            v = torch.trunc(v.to(torch.float64))
        v = _wrap(v.to(torch.int64), dst)
        return int(v) if v.dim() == 0 else v
    return _wrap(int(v), dst)
