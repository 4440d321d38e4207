"""Shared state of lowering one T.Kernel: the thread-IR buffer of every tile buffer, index maps, guards.

In: the tile IR Kernel, the LayoutMap, the Target and the KernelPlan the passes built (``compiler.passes``). Out: helpers the lowering rules call:
``mem(buf)`` (the 1-d thread-IR buffer), ``element(buf, idx)`` (a Load of one element, guarded when it may leave a
global tensor), ``store(buf, idx, value)``, ``rewrite(expr, subst)`` (tile IR expression -> thread IR), value
ranges of index expressions (to drop guards that can never fail) and per-thread evaluation of index expressions.
Guarantees: global accesses it builds are in bounds (guarded or proven); fragment accesses are register slots that
are compile-time constants whenever every thread computes the same slot.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from tileagent.compiler.diagnostics import TargetError
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import (ADDRESS_OF, BinOp, Call, Cast, Cmp, Const, Expr, Load, Select, Unary, Var,
                                        as_expr, make_binop, make_cast, make_cmp, make_logical, make_select)
from tileagent.compiler.ir.simplify import below_bound, same_expr, static_int
from tileagent.compiler.ir.stmt import Buffer, Store
from tileagent.compiler.layout import Fragment, Layout
from tileagent.compiler.tir import THREAD

I64 = DType("int64")
INT32_MAX = 2**31 - 1


class LowerContext:
    """Lowering state of one kernel. What the planning passes decided comes from ``plan`` (a ``KernelPlan``) and is
    only read here: shared buffers and layouts, the scratch area, packed and hoisted operands. What the lowering
    itself builds as it goes (register arrays, value ranges of loop variables, fresh names, scratch views, the
    registers of hoisted operands) is shared by every view of the context. The modes a rule lowers under (a pipeline stage's buffer offsets, cp.async
    producers, a T.Parallel body's register tables) are set only through ``derive``, which returns a new view."""

    def __init__(self, kernel, layouts, flat_globals: dict, threads: int, target=None, plan=None):
        self.kernel, self.layouts, self.threads = kernel, layouts, threads
        self.target, self.plan = target, plan
        self.flat_globals = dict(flat_globals)  # global Buffer -> 1-d Buffer: the params, then T.make_tensor's
        self.made_tensors: frozenset = frozenset()  # the kernel's T.make_tensor buffers (lower._lower_kernel)
        self.local: dict[Buffer, Buffer] = {}  # fragment/local/var -> register array
        self.ranges: dict = {THREAD: (0, threads - 1)}
        self.lets: dict = {}  # Var of a kernel-level named temporary -> its lowered value (alignment analysis)
        self._counter = [0]
        self._slot_tables: dict = {}
        self._scratch: dict = {}
        self.hoisted_a: dict = {}  # Gemm -> register array holding its loop-invariant A operand (lower.gemm)
        shared = plan.shared if plan is not None else None
        # tile shared buffer -> 1-d shared buffer over its slice of the arena (all its stages)
        self.shared: dict[Buffer, Buffer] = {} if shared is None else {
            b: Buffer(b.name, (shared.elements[b],), b.dtype, "shared", b.span) for b in shared.layouts}
        self.shared_layouts: dict[Buffer, Layout] = {} if shared is None else dict(shared.layouts)
        needs_scratch = plan is not None and plan.scratch_bytes > 0
        self.scratch_offset: int | None = shared.scratch_offset if needs_scratch else None
        self.scratch_bytes = shared.total_bytes - shared.scratch_offset if needs_scratch else 0
        self.packed: frozenset = plan.packed if plan is not None else frozenset()  # (gemm.packable_a_operands)
        self.hoisted: frozenset = plan.hoisted if plan is not None else frozenset()  # (pipeline.hoisted_a_operands)
        # modes (see ``derive``)
        self.numeric = None  # inside a T.Parallel slot: ({loop var: value per thread}, running-thread mask)
        self.slot_overrides = None  # in a compact T.Parallel: {(fragment, id of its index exprs): register expr}
        self.stage_base: dict = {}  # in a software pipeline: staged shared tile -> element offset of the stage in use
        self.async_copies = False  # lowering a pipeline's producers: global -> shared copies may use cp.async
        self.wgmma_schedule: dict = {}  # in a software pipeline: Gemm on wgmma -> WgmmaSchedule (lower.pipeline)
        self.instructions: dict = {}  # (line, tile op) -> the instructions it was lowered to (compiler.instructions)
        self.tma = None  # lower.tma.TmaState when the kernel may use TMA (shared by every view)
        self.ws = None  # lower.warp_specialize.WsPlan when the kernel's pipeline may be warp-specialized
        self.hand_specialized = False  # warp specialization by hand (thread_ranges.hand_specialized): real mbarriers
        self.thread_range = (0, threads)  # the threads this view lowers for (a warp group's arm: lower.warp_groups)
        self.thread_lets = None  # thread_ranges' Let map of the kernel, computed at its first thread if
        self.thread_regions = None  # thread_ranges.regions of the kernel, at its first T.wait_wgmma in an arm
        self.warp_group_barriers: dict = {}  # warp-group range -> its named barrier id (shared by every view)

    MODES = ("numeric", "slot_overrides", "stage_base", "async_copies", "wgmma_schedule")

    def derive(self, **modes) -> "LowerContext":
        """A view of this context with other modes (``MODES``); everything else is shared with this one."""
        unknown = set(modes) - set(self.MODES)
        if unknown:
            raise TypeError(f"not lowering modes: {sorted(unknown)}")
        view = copy.copy(self)
        for name, value in modes.items():
            setattr(view, name, value)
        return view

    def shared_offsets(self) -> dict:
        """Byte offset in the arena of every 1-d shared buffer the lowering used: the planned tiles and the views of
        the scratch area (``scratch``)."""
        offsets = {self.shared[b]: o for b, o in self.plan.shared.offsets.items()}
        for buf in self._scratch.values():
            offsets[buf] = self.scratch_offset
        return offsets

    def note_instruction(self, stmt, what: str) -> None:
        """Record that tile statement ``stmt`` was lowered with ``what`` (shown by ``kernel.get_ir("thread")``).
        Statements of one source line and op share an entry (a pipeline's prologue repeats its copies)."""
        from tileagent.compiler.tileops import describe

        seen = self.instructions.setdefault((stmt.span.line if stmt.span else 0, describe(stmt)), [])
        if what not in seen:
            seen.append(what)

    def fresh(self, prefix: str) -> str:
        self._counter[0] += 1
        return f"{prefix}{self._counter[0]}"

    def scratch_registers(self, prefix: str, size: int, dtype) -> Buffer:
        return Buffer(self.fresh(prefix), (size,), DType(dtype), "local")

    def scratch(self, dtype) -> Buffer:
        """The shared-memory scratch area (one element per thread), viewed as ``dtype``."""
        if self.scratch_offset is None:
            raise TargetError("internal: no shared scratch was planned for this kernel", code="I000")
        key = DType(dtype)
        if key not in self._scratch:
            size = (self.scratch_bytes // key.bytes) if self.scratch_bytes else self.threads
            self._scratch[key] = Buffer(f"scratch_{key}", (size,), key, "shared")
        return self._scratch[key]

    def var(self, prefix: str, dtype="int32") -> Var:
        return Var(self.fresh(prefix), DType(dtype))

    # -- buffers ---------------------------------------------------------------------------------------------
    def frag(self, buf: Buffer) -> Fragment:
        return self.layouts.fragments[buf]

    def mem(self, buf: Buffer) -> Buffer:
        if buf.scope == "global":
            return self.flat_globals[buf]
        if buf.scope == "shared":
            return self.shared[buf]
        return self.local[buf]

    def register_array(self, buf: Buffer) -> Buffer:
        if buf in self.packed:
            reg = Buffer(buf.name, (self.frag(buf).num_slots // 2,), DType("uint32"), "local", buf.span)
            self.local[buf] = reg
            return reg
        if buf.scope == "fragment":
            size = self.frag(buf).num_slots
        else:
            size = math.prod(buf.shape)
        reg = Buffer(buf.name, (size,), buf.dtype, "local", buf.span)
        self.local[buf] = reg
        return reg

    def offset(self, buf: Buffer, idx):
        """Flat element offset of ``buf[idx]`` in its thread-IR buffer (not for fragments)."""
        if buf.scope == "shared":
            off = self.shared_layouts[buf].offset(idx)
            base = self.stage_base.get(buf)
            return off if base is None else make_binop("+", base, off)
        off, stride = 0, 1
        for i, n in reversed(list(zip(idx, buf.shape))):
            off = make_binop("+", off, make_binop("*", i, stride))
            stride = make_binop("*", stride, n)
        return off

    def slot(self, buf: Buffer, idx, span=None):
        """The register slot of fragment element ``idx`` for this thread: a constant when it is the same for all
        threads, else an expression."""
        s = self.frag(buf).slot(idx)
        values = self.per_thread(s)
        if values is not None and (values == values[0]).all():
            return int(values[0])
        if static_int(s) is not None:
            return static_int(s)
        return s

    def spread(self, buf: Buffer, dim: int) -> bool:
        """Whether fragment ``buf`` spreads ``dim`` over threads (else every owner holds that whole dim in registers,
        so a runtime index along it is a register index the layout inference proved held)."""
        return any(lv.is_thread and lv.size > 1 for lv in self.frag(buf).dims[dim])

    def numeric_slot(self, buf: Buffer, indices) -> int | None:
        """Inside a T.Parallel slot: the register of ``buf[indices]`` (indices are loop variables or constants),
        computed from tables, when all running threads agree on it."""
        values, valid = self.numeric
        idx = []
        for i in indices:
            if isinstance(i, Var) and i in values:
                idx.append(values[i])
            elif static_int(i) is not None:
                idx.append(np.full(self.threads, static_int(i)))
            else:
                return None
        if buf not in self._slot_tables:
            self._slot_tables[buf] = self.frag(buf).tables()[1]
        table = self._slot_tables[buf]
        if not valid.any():
            return 0
        clipped = tuple(np.clip(i[valid], 0, n - 1) for i, n in zip(idx, buf.shape))
        slots = table[clipped]
        return int(slots[0]) if (slots == slots[0]).all() else None

    # -- guards ----------------------------------------------------------------------------------------------
    def in_bounds(self, buf: Buffer, idx):
        """The condition that ``idx`` lies inside global ``buf`` (True when it provably does). Where the dim may
        reach past 2**31 - 1 (a static extent that does, or a product of symbolic sizes: a flattened table of V x D)
        and the index's range does not prove it smaller, the comparisons are 64-bit (the index computed in 64 bits,
        as its address is): in 32 bits a row number times D wraps, and valid rows read as 0."""
        cond = True
        for i, n in zip(idx, buf.shape):
            r = self.range_of(i)
            n_static = static_int(n)
            lo_ok = r is not None and r[0] >= 0
            hi_ok = r is not None and n_static is not None and r[1] < n_static
            wide = (n_static > INT32_MAX if n_static is not None else not isinstance(n, Var)) and \
                as_expr(i).dtype.bits < 64 and (r is None or r[1] > INT32_MAX)
            x, bound = (make_cast(as_expr(i), I64), make_cast(as_expr(n), I64)) if wide else (i, n)
            if not lo_ok:
                cond = and_(cond, make_cmp(">=", x, 0))
            if not hi_ok:
                cond = and_(cond, make_cmp("<", x if n_static is None or wide else
                                           below_bound(i, n_static, self.range_of), bound))
        return cond

    def element(self, buf: Buffer, idx, span=None) -> Expr:
        """A Load of ``buf[idx]``; global reads outside the tensor give 0."""
        if buf.scope in ("fragment",):
            return Load(self.mem(buf), (as_expr(self.slot(buf, idx)),), buf.dtype, span)
        if buf.scope in ("local", "var"):
            return Load(self.mem(buf), (as_expr(self.offset(buf, idx)),), buf.dtype, span)
        off = as_expr(self.offset(buf, idx))
        if buf.scope != "global":
            return Load(self.mem(buf), (off,), buf.dtype, span)
        cond = self.in_bounds(buf, idx)
        if cond is True:
            return Load(self.mem(buf), (off,), buf.dtype, span)
        safe = make_select(cond, off, 0)
        return make_select(cond, Load(self.mem(buf), (safe,), buf.dtype, span), make_cast(0, buf.dtype))

    def store(self, buf: Buffer, idx, value, span=None, original=None):
        """(guard, Store) for ``buf[idx] = value``; guard is True or the in-bounds condition of a global write."""
        value = make_cast(value, buf.dtype)
        if buf.scope == "fragment":
            slot = self.slot_overrides.get((buf, tuple(map(id, original)))) if self.slot_overrides and \
                original is not None else None
            if slot is None and self.numeric is not None and original is not None:
                slot = self.numeric_slot(buf, original)
            slot = self.slot(buf, idx) if slot is None else slot
            return True, Store(self.mem(buf), (as_expr(slot),), value, span)
        off = as_expr(self.offset(buf, idx))
        guard = self.in_bounds(buf, idx) if buf.scope == "global" else True
        return guard, Store(self.mem(buf), (off,), value, span)

    # -- expressions -----------------------------------------------------------------------------------------
    def rewrite(self, e, subst: dict):
        """Tile IR expression -> thread IR: substitute loop variables, turn buffer loads into 1-d accesses."""
        if not isinstance(e, Expr):
            return e
        if isinstance(e, Var):
            return subst.get(e, e)
        if isinstance(e, Const):
            return e
        if isinstance(e, Load):
            override = self.slot_overrides.get((e.buffer, tuple(map(id, e.indices)))) if self.slot_overrides else None
            if override is not None:
                return Load(self.mem(e.buffer), (as_expr(override),), e.buffer.dtype, e.span)
            if e.buffer.scope == "fragment" and self.numeric is not None:
                slot = self.numeric_slot(e.buffer, e.indices)
                if slot is not None:
                    return Load(self.mem(e.buffer), (as_expr(slot),), e.buffer.dtype, e.span)
            idx = tuple(self.rewrite(i, subst) for i in e.indices)
            if e.buffer.scope == "fragment" and any(self.per_thread(i) is None and self.spread(e.buffer, d)
                                                    for d, i in enumerate(idx)):
                raise TargetError(f"fragment '{e.buffer.name}' is read with an index that depends on runtime values",
                                  e.span, code="E602", hint="read fragments inside T.Parallel with its variables")
            return self.element(e.buffer, idx, e.span)
        if isinstance(e, BinOp):
            a, b = self.rewrite(e.a, subst), self.rewrite(e.b, subst)
            if e.op in ("and", "or"):
                return make_logical(e.op, a, b)
            return _typed_binop(e, a, b)
        if isinstance(e, Cmp):
            return Cmp(e.op, self.rewrite(e.a, subst), self.rewrite(e.b, subst))
        if isinstance(e, Unary):
            return Unary(e.op, self.rewrite(e.a, subst), e.dtype)
        if isinstance(e, Cast):
            return make_cast(self.rewrite(e.value, subst), e.dtype)
        if isinstance(e, Select):
            return Select(self.rewrite(e.cond, subst), self.rewrite(e.a, subst), self.rewrite(e.b, subst), e.dtype)
        if isinstance(e, Call):
            if e.name == ADDRESS_OF and isinstance(e.args[0], Load):  # a pointer: the element's address, unguarded
                ld = e.args[0]
                idx = tuple(self.rewrite(i, subst) for i in ld.indices)
                return Call(e.name, (Load(self.mem(ld.buffer), (as_expr(self.offset(ld.buffer, idx)),),
                                          ld.buffer.dtype, ld.span),), e.dtype)
            return Call(e.name, tuple(self.rewrite(a, subst) for a in e.args), e.dtype)
        raise TargetError(f"cannot lower expression {type(e).__name__}", code="E602")

    # -- static analysis -------------------------------------------------------------------------------------
    def range_of(self, e):
        """(min, max) of an integer expression over all threads and loop iterations, or None if unknown."""
        return int_range(e, self.ranges)

    def per_thread(self, e) -> np.ndarray | None:
        """The value of an integer expression for every thread, when it depends on nothing else."""
        return eval_per_thread(e, self.threads)

    def per_thread_bool(self, e) -> np.ndarray | None:
        """The value of a condition for every thread, when it depends on nothing but THREAD (None otherwise)."""
        return eval_per_thread_bool(e, self.threads)


def _typed_binop(e: BinOp, a, b):
    out = make_binop(e.op, a, b)
    return make_cast(out, e.dtype) if isinstance(out, Expr) else as_expr(out, e.dtype)


def and_(a, b):
    """a and b, where either may be the constant True; a conjunct already in the other side is not repeated (the
    conditions are side-effect free: ``x && (y && x)`` is ``y && x``)."""
    if a is True:
        return b
    if b is True:
        return a
    if _has_conjunct(b, a):
        return b
    if _has_conjunct(a, b):
        return a
    return make_logical("and", a, b)


def _has_conjunct(cond, part) -> bool:
    """Whether ``part`` is ``cond`` or one of its ``and`` operands (nested ``and`` included)."""
    if same_expr(cond, part):
        return True
    while isinstance(cond, Cast) and str(cond.dtype) == "bool":
        cond = cond.value
    return isinstance(cond, BinOp) and cond.op == "and" and (_has_conjunct(cond.a, part) or
                                                               _has_conjunct(cond.b, part))


def eval_per_thread_bool(e, threads: int) -> np.ndarray | None:
    """Evaluate a condition of THREAD and constants for THREAD = 0..threads-1 (None if other vars occur)."""
    if isinstance(e, Cmp):
        a, b = eval_per_thread(e.a, threads), eval_per_thread(e.b, threads)
        if a is None or b is None:
            return None
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[e.op]
    if isinstance(e, BinOp) and e.op in ("and", "or"):
        a, b = eval_per_thread_bool(e.a, threads), eval_per_thread_bool(e.b, threads)
        if e.op == "and" and ((a is not None and not a.any()) or (b is not None and not b.any())):
            return np.zeros(threads, dtype=bool)
        if a is None or b is None:
            return None
        return a & b if e.op == "and" else a | b
    if isinstance(e, Const) and e.dtype.is_bool:
        return np.full(threads, bool(e.value))
    return None


def eval_per_thread(e, threads: int):
    """Evaluate an int expression of THREAD and constants for THREAD = 0..threads-1 (None if other vars occur)."""
    if isinstance(e, bool):
        return None
    if isinstance(e, int):
        return np.full(threads, e, dtype=np.int64)
    if isinstance(e, Const):
        return np.full(threads, int(e.value), dtype=np.int64) if not e.dtype.is_float else None
    if e is THREAD:
        return np.arange(threads, dtype=np.int64)
    if isinstance(e, Cast) and not e.dtype.is_float:
        return eval_per_thread(e.value, threads)
    if isinstance(e, BinOp) and e.op in _INT_OPS:
        a, b = eval_per_thread(e.a, threads), eval_per_thread(e.b, threads)
        if a is None or b is None or (e.op in ("//", "%", "/") and (b == 0).any()):
            return None
        return _INT_OPS[e.op](a, b)
    return None


_INT_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod,
            "/": lambda a, b: np.trunc(a / b).astype(np.int64)}


def int_range(e, ranges: dict):
    """Interval of an integer expression given intervals of its variables; None when unknown."""
    if isinstance(e, bool):
        return None
    if isinstance(e, int):
        return (e, e)
    if isinstance(e, Const):
        return None if e.dtype.is_float else (int(e.value), int(e.value))
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, Cast) and not e.dtype.is_float:
        return int_range(e.value, ranges)
    if isinstance(e, BinOp):
        a, b = int_range(e.a, ranges), int_range(e.b, ranges)
        if a is None or b is None:
            if e.op == "%" and b is not None and b[0] > 0:
                return (0, b[1] - 1) if a is None or a[0] >= 0 else None
            return None
        if e.op == "+":
            return (a[0] + b[0], a[1] + b[1])
        if e.op == "-":
            return (a[0] - b[1], a[1] - b[0])
        if e.op == "*":
            products = [x * y for x in a for y in b]
            return (min(products), max(products))
        if e.op == "//" and b[0] > 0 and b[0] == b[1]:
            return (a[0] // b[0], a[1] // b[0])
        if e.op == "%" and b[0] > 0 and b[0] == b[1]:
            return (a[0], a[1]) if a[0] >= 0 and a[1] < b[0] else (0, b[0] - 1) if a[0] >= 0 else None
        return None
    if isinstance(e, Call) and e.name in ("min", "max"):
        a, b = int_range(e.args[0], ranges), int_range(e.args[1], ranges)
        if a is None or b is None:
            return None
        f = min if e.name == "min" else max
        return (f(a[0], b[0]), f(a[1], b[1]))
    if isinstance(e, Select):
        a, b = int_range(e.a, ranges), int_range(e.b, ranges)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    return None
