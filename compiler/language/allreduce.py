"""TVM's thread all-reduce in per-thread code, as TileLang's GEMV examples write it.

    with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, accum_dtype)]), "reduce_scope",
                T.reinterpret(T.uint64(0), dtype="handle")):
        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), C_accum[0], True, C_reduced[0], tk, dtype="handle"))

In: a ``T.comm_reducer`` (a combiner of two values and its identity), a ``T.attr`` scope that makes it current, and
``T.tvm_thread_allreduce(count, value, cond, out, *reduce_threads)`` inside a T.Kernel with per-thread code
(``T.get_thread_binding``). Out: plain DSL statements: every thread writes ``value`` to a shared scratch slot of its
own, then folds, in thread order, the slots of the threads that differ from it only along ``reduce_threads`` into
``out`` (the barrier between the two is the one TileAgent places between a shared write and its reads). So every
thread of a group ends with the same result, as with TVM's warp-shuffle lowering; float sums may round differently
from TVM's tree order. ``T.alloc_reducer`` / ``T.finalize_reducer``: a shared tile that ``r[i] += v`` adds into
atomically (several T.Parallel iterations into one element). ``T.dp4a(a, b, c)`` is ``c += a[0:4] . b[0:4]`` on int8
elements, as TileLang's DP4A.
Guarantees: one value per call (``count`` 1) and a true ``cond``; anything else, a reduce variable that is not one of
the kernel's thread bindings, or a call outside a ``T.attr(..., "reduce_scope", ...)`` with a reducer: E701/E301.
"""

from __future__ import annotations

import contextvars
import itertools
from dataclasses import dataclass

from tileagent.compiler.diagnostics import DSLSyntaxError, DSLTypeError, UnsupportedError
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Const, Load, Var, as_expr, make_binop, make_cast
from tileagent.compiler.ir.stmt import Alloc, Buffer, For, Store
from tileagent.compiler.language.kernel import AllocSpec

CURRENT_REDUCER: contextvars.ContextVar = contextvars.ContextVar("tileagent_reducer", default=None)
_names = itertools.count()


class CommReducer:
    """``T.comm_reducer(combiner, identity)``: how a thread all-reduce combines two values, and its identity."""

    def __init__(self, combiner, identity):
        if not callable(combiner):
            raise DSLTypeError("T.comm_reducer: the combiner must be a function of two values", code="E309")
        identity = list(identity) if isinstance(identity, (list, tuple)) else [identity]
        if len(identity) != 1:
            raise UnsupportedError("T.comm_reducer over several values at once is not supported")
        self.combiner, self.identity = combiner, identity[0]


def comm_reducer(combiner, identity, span=None) -> CommReducer:
    return CommReducer(combiner, identity)


class AttrSpec:
    """``with T.attr(node, key, value):``: its body is inlined; a ``"reduce_scope"`` attr with a CommReducer makes
    that reducer the one ``T.tvm_thread_allreduce`` in the body uses. Other attrs are hints without effect."""

    inline_body = True

    def __init__(self, node, key, value):
        self.node, self.key, self.value, self._token = node, key, value, None

    def enter(self) -> None:
        if self.key == "reduce_scope" and isinstance(self.node, CommReducer):
            self._token = CURRENT_REDUCER.set(self.node)

    def exit(self) -> None:
        if self._token is not None:
            CURRENT_REDUCER.reset(self._token)


def attr(node, attr_key, value, span=None) -> AttrSpec:
    return AttrSpec(node, str(attr_key), value)


def evaluate(value, span=None):
    """``T.evaluate(x)``: the statement(s) ``x`` stands for (here: what ``T.tvm_thread_allreduce`` returns)."""
    return value


def tvm_thread_allreduce(count, value, cond, out, *reduce_threads, dtype=None, span=None) -> list:
    from tileagent.compiler.language.extras import _thread_bindings

    reducer = CURRENT_REDUCER.get()
    if reducer is None:
        raise DSLSyntaxError("T.tvm_thread_allreduce outside `with T.attr(T.comm_reducer(...), \"reduce_scope\", "
                             "...)`: no reducer says how to combine the values", code="E701")
    if int(getattr(count, "value", count)) != 1 or not (cond is True or getattr(cond, "value", None) is True):
        raise UnsupportedError("T.tvm_thread_allreduce of more than one value, or under a condition, is not supported")
    if not isinstance(out, Load):
        raise DSLTypeError(f"T.tvm_thread_allreduce: the result goes to a buffer element, got {out!r}", code="E309")
    bindings = _thread_bindings("T.tvm_thread_allreduce")
    axes = [bindings.axis_of(r) for r in reduce_threads]
    if not axes or None in axes:
        raise DSLTypeError("T.tvm_thread_allreduce: reduce over the kernel's thread bindings (the variables "
                           "T.get_thread_binding returns)", code="E301")
    (x, y, z), (tx, ty, tz) = bindings.threads, bindings.vars
    linear = lambda vx, vy, vz: vx + x * (vy + y * vz)  # noqa: E731
    acc_dtype = out.buffer.dtype
    n = next(_names)
    scratch = Buffer(f"allreduce_scratch_{n}", (x * y * z,), acc_dtype, "shared")
    stmts = [Alloc(scratch, None), Store(scratch, (linear(tx, ty, tz),), make_cast(as_expr(value), acc_dtype))]
    steps = [Var(f"allreduce_{n}_{a}", DType("int32")) for a in axes]
    index = linear(*[steps[axes.index(d)] if d in axes else v for d, v in enumerate((tx, ty, tz))])
    total = make_cast(reducer.combiner(Load(out.buffer, out.indices, acc_dtype),
                                       Load(scratch, (index,), acc_dtype)), acc_dtype)
    body = (Store(out.buffer, out.indices, total),)
    for var, d in reversed(list(zip(steps, axes))):
        body = (For(var, Const(0, DType("int32")), Const(bindings.threads[d], DType("int32")), Const(1, DType("int32")),
                    "serial", body),)
    return stmts + [Store(out.buffer, out.indices, make_cast(as_expr(reducer.identity, acc_dtype), acc_dtype)),
                    *body]


@dataclass(frozen=True)
class ReducerSpec(AllocSpec):
    reducer: bool = True


def alloc_reducer(shape, dtype, op="sum", replication=None):
    """TileLang's ``T.alloc_reducer(shape, dtype, op="sum", replication=...)``: a tile that T.Parallel iterations add
    into (``r[i] += v``, several iterations into one element), made whole by ``T.finalize_reducer(r)``. TileAgent
    keeps it in shared memory and each ``r[i] += v`` is an atomic add there, so finalize has nothing left to do; the
    sum's order is the atomics' (float results may differ in the last bits between runs). ``op`` other than "sum":
    E701."""
    from tileagent.compiler.language.kernel import _dtype, _shape

    if op != "sum":
        raise UnsupportedError(f"T.alloc_reducer(op={op!r}) is not supported (op='sum' is)")
    return ReducerSpec(_shape(shape, "T.alloc_reducer"), _dtype(dtype, "T.alloc_reducer"), "shared")


def finalize_reducer(reducer) -> None:
    """``T.finalize_reducer(r)``: nothing to combine (the adds were atomic; the barrier before the next reader is the
    one TileAgent places after shared-memory writes)."""
    return None


def reducer_add(ref: Load, value):
    """``r[i] += v`` on a ``T.alloc_reducer`` buffer: an atomic add into its shared memory."""
    from tileagent.compiler.language.tileops import atomic_add

    return atomic_add(ref, value)


def dp4a(a, b, c, span=None) -> Store:
    """TileLang's ``T.dp4a(a, b, c)``: ``c += a[0]*b[0] + ... + a[3]*b[3]`` over the four int8 elements from ``a`` and
    ``b`` on (elements of local buffers), in c's dtype (int32)."""
    for what, e in (("a", a), ("b", b), ("c", c)):
        if not isinstance(e, Load):
            raise DSLTypeError(f"T.dp4a: {what} must be a buffer element (the first of four for a and b)",
                               code="E309")
    total = Load(c.buffer, c.indices, c.buffer.dtype)
    for j in range(4):
        pa, pb = (Load(e.buffer, e.indices[:-1] + (make_binop("+", e.indices[-1], j),), e.buffer.dtype) for e in (a, b))
        total = make_binop("+", total, make_binop("*", make_cast(pa, c.buffer.dtype), make_cast(pb, c.buffer.dtype)))
    return Store(c.buffer, c.indices, total)


__all__ = ["AttrSpec", "CommReducer", "ReducerSpec", "alloc_reducer", "attr", "comm_reducer", "dp4a", "evaluate",
           "finalize_reducer", "reducer_add", "tvm_thread_allreduce"]
