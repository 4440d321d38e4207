"""cp.async and proxy fences by hand, for warp-specialized kernels written as TileLang writes them:
``T.ptx_cp_async(dst, src, num_elems, predicate=None)``, ``T.ptx_commit_group()``, ``T.ptx_wait_group(n)``,
``T.cp_async_barrier_noinc(barrier)``, ``T.fence_proxy_async()``.

In: per-thread code (``T.get_thread_binding``): a pointer into a shared buffer and one into a global buffer
(``T.access_ptr(buf[...], "w"/"r", ...)``), an element count of 4, 8 or 16 bytes, optionally a predicate; a barrier
of ``T.alloc_barrier``.
Out: ``Evaluate`` statements of the calls named in ``CALLS`` (the pointers as ``address_of`` calls, the count a
constant, the predicate if given); ``T.cp_async_barrier_noinc`` is an ``MBarrierOp`` "arrive_cp_async": each
thread's arrival on the barrier once its earlier copies have landed (``cp.async.mbarrier.arrive.noinc``), so it
counts one arrival a thread.
Guarantees: the CPU interpreter copies the bytes when the call runs (a copy has landed when issued, so a missing wait
is not caught there); the CUDA target issues ``cp.async.ca`` (``.cg`` for 16 bytes), the group and the barrier
instructions (``compiler.targets.cuda_extern``). Both pointers are checked for their memory spaces here.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import ADDRESS_OF, Call, Const, Load
from tileagent.compiler.ir.stmt import Evaluate, MBarrierOp

CP_ASYNC, COMMIT, WAIT, FENCE = "tl.cp_async", "tl.cp_async_commit", "tl.cp_async_wait", "tl.fence_proxy_async"
SET_MAX_NREG = "tl.set_max_nreg"
CALLS = (CP_ASYNC, COMMIT, WAIT, FENCE, SET_MAX_NREG)
_INT = DType("int32")


def _pointer(p, scope: str, what: str) -> Call:
    if not (isinstance(p, Call) and p.name == ADDRESS_OF and isinstance(p.args[0], Load)):
        raise DSLTypeError(f"T.ptx_cp_async: the {what} must be a pointer from T.access_ptr(buf[...], ...), got "
                           f"{type(p).__name__}", code="E309")
    buf = p.args[0].buffer
    if buf.scope != scope:
        raise DSLTypeError(f"T.ptx_cp_async copies global memory into shared memory: its {what} '{buf.name}' is in "
                           f"{buf.scope} memory", code="E309",
                           hint="T.ptx_cp_async(T.access_ptr(shared[...], 'w', n), T.access_ptr(global[...], 'r', "
                                "n), bytes)")
    return p


def ptx_cp_async(dst, src, num_elems, predicate=None):
    """One thread's asynchronous copy of ``num_elems`` elements (4, 8 or 16 bytes) from global ``src`` into shared
    ``dst``; with ``predicate`` false the destination is zero-filled instead (cp.async's source size 0)."""
    from tileagent.compiler.ir.expr import as_expr

    dst, src = _pointer(dst, "shared", "destination"), _pointer(src, "global", "source")
    if isinstance(num_elems, bool) or not isinstance(num_elems, int):
        raise DSLTypeError(f"T.ptx_cp_async: num_elems must be an int known when compiling, got {num_elems!r}",
                           code="E301")
    sizes = {p.args[0].buffer.dtype.bytes * num_elems for p in (dst, src)}
    if len(sizes) != 1 or sizes.pop() not in (4, 8, 16):
        raise DSLTypeError(f"T.ptx_cp_async copies 4, 8 or 16 bytes: {num_elems} elements of "
                           f"{dst.args[0].buffer.dtype} ('{dst.args[0].buffer.name}') and "
                           f"{src.args[0].buffer.dtype} ('{src.args[0].buffer.name}') is not", code="E301")
    args = (dst, src, Const(num_elems, _INT)) + ((as_expr(predicate),) if predicate is not None else ())
    return Evaluate(Call(CP_ASYNC, args, _INT))


def ptx_commit_group():
    """``cp.async.commit_group``: the thread's copies issued so far form a group."""
    return Evaluate(Call(COMMIT, (), _INT))


def ptx_wait_group(n=0):
    """``cp.async.wait_group n``: wait until at most ``n`` of the thread's groups are in flight."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise DSLTypeError(f"T.ptx_wait_group takes a non-negative int, got {n!r}", code="E301")
    return Evaluate(Call(WAIT, (Const(n, _INT),), _INT))


def cp_async_barrier_noinc(barrier):
    """Each thread arrives on ``barrier`` once its cp.async copies issued so far have landed."""
    from tileagent.compiler.language.warp_specialize import _ref

    ref = _ref(barrier, "T.cp_async_barrier_noinc")
    return MBarrierOp("arrive_cp_async", ref.barriers, ref.index, None)


def fence_proxy_async(*args, **kwargs):
    """``fence.proxy.async.shared::cta``: the thread's generic-proxy writes to shared memory become visible to the
    async proxy (TMA, wgmma) of later operations."""
    return Evaluate(Call(FENCE, (), _INT))


def set_max_nreg(reg_count, is_inc):
    """``setmaxnreg.{inc,dec}``: the executing warp group's per-thread register budget becomes ``reg_count`` (a
    multiple of 8 in 24 .. 256; the kernel then declares one block an SM, so that ptxas honours it). Changes no
    value: the CPU interpreter does nothing."""
    if isinstance(reg_count, bool) or not isinstance(reg_count, int) or reg_count % 8 or not 24 <= reg_count <= 256:
        raise DSLTypeError(f"T.set_max_nreg: reg_count must be a multiple of 8 in 24 .. 256, got {reg_count!r}",
                           code="E301")
    return Evaluate(Call(SET_MAX_NREG, (Const(reg_count, _INT), Const(int(bool(is_inc)), _INT)), _INT))


__all__ = ["cp_async_barrier_noinc", "fence_proxy_async", "ptx_commit_group", "ptx_cp_async", "ptx_wait_group",
           "set_max_nreg"]
