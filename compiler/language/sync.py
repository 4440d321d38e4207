"""Block barriers written by hand: TileLang's ``T.sync_threads()`` and ``T.sync_threads(barrier_id, arrive_count)``.

In: the call as a TileLang program writes it. Out: ``None`` for the whole-block form (a statement without effect:
TileAgent places ``__syncthreads()`` itself wherever a statement reads or rewrites shared memory another thread's
earlier statement touched, at points every thread reaches), a ``NamedBarrier`` statement for the named form.
Guarantees (the named form, PTX ``bar.sync id, count``): ``barrier_id`` is a compile-time integer in 1..15 (barrier 0
is the ``__syncthreads()`` TileAgent places; E301), ``arrive_count`` a compile-time positive multiple of 32 (bar.sync
counts whole warps; E301) no larger than the kernel's threads (E301, checked with the kernel). Every target runs it:
the CPU interpreter (per-thread code runs statement by statement for all threads at once, so it orders nothing
there) and the SIMT emulator check that exactly ``arrive_count`` threads reach it, in whole warps, and raise a
KernelFault otherwise (on the GPU the barrier would hang or complete early); in the emulator's race detector the
shared-memory accesses of the threads that reached it no longer race with those threads' later ones (they still do
with the other threads'). The CUDA code is ``asm volatile("bar.sync id, count;" ::: "memory")``. It is what
per-thread code needs inside a branch only some threads take (TileLang's top-k selector: ``if tx < RADIX:`` around a
scan over shared memory), where TileAgent places no barrier of its own: the program's named barriers must order the
shared-memory accesses of the threads inside it.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import NamedBarrier

MAX_BARRIER_ID = 15  # bar.sync has 16 barriers per block; 0 is __syncthreads()


def sync_threads(barrier_id=None, arrive_count=None):
    """``T.sync_threads()``: a block barrier TileAgent already places where it is needed, so a statement without
    effect. ``T.sync_threads(barrier_id, arrive_count)``: the named barrier ``bar.sync barrier_id, arrive_count``
    over the ``arrive_count`` threads that reach it (see the module docstring for the rules)."""
    if barrier_id is None and arrive_count is None:
        return None
    bid, count = static_int(barrier_id), static_int(arrive_count)
    if bid is None or isinstance(barrier_id, bool) or not 1 <= bid <= MAX_BARRIER_ID:
        raise DSLTypeError(f"T.sync_threads({barrier_id!r}, {arrive_count!r}): the barrier id must be a compile-time "
                           f"integer from 1 to {MAX_BARRIER_ID}", code="E301",
                           hint="barrier 0 is the block-wide __syncthreads() TileAgent places itself; write "
                                "T.sync_threads() for it, or pick another id")
    if count is None or isinstance(arrive_count, bool) or count <= 0 or count % 32:
        raise DSLTypeError(f"T.sync_threads({barrier_id!r}, {arrive_count!r}): the arrive count must be a compile-time "
                           f"positive multiple of 32 (bar.sync counts whole warps)", code="E301",
                           hint="give the number of threads that reach this barrier, e.g. T.sync_threads(3, 256) "
                                "under `if tx < 256:`")
    return NamedBarrier(bid, count)

