"""CUDA C++ for synchronization beyond ``__syncthreads()``: the named barriers a program writes itself
(``T.sync_threads(barrier_id, arrive_count)``), the dependent-launch grid wait the compiler adds, and the trap of a
failed ``T.device_assert`` (a thread stopping the kernel).

In: thread-IR ``NamedBarrier`` statements (``compiler.language.sync``); ``DeviceKernel.dependent_launch``.
Out: ``bar.sync id, count;`` as inline PTX, with a memory clobber so that the compiler keeps shared-memory accesses
on their side of it; the ``tl_dependent_launch`` helper (``HELPERS``, keyed as ``compiler.targets.cuda`` asks).
Guarantees: the id and count are the compile-time integers the frontend checked (1..15, a multiple of 32).
"""

from __future__ import annotations

from tileagent.compiler.ir.stmt import Assert, NamedBarrier


def named_barrier_asm(s: NamedBarrier) -> str:
    """The PTX instruction of a named barrier (also the opt-in PTX target's line)."""
    return f"bar.sync {s.barrier_id}, {s.arrive_count};"


def emit_named_barrier(em, s: NamedBarrier) -> None:
    em.line(f'asm volatile("{named_barrier_asm(s)}" ::: "memory");')


def emit_assert(em, s: Assert) -> None:
    """``T.device_assert``: the thread traps (the launch fails with an error; no message: -minimal has no printf)."""
    note = " ".join(s.message.split())[:80]
    em.line(f"if (!({em.ex(s.cond)})) __trap();" + (f"  // T.device_assert: {note}" if note else ""))


HANDLERS = {NamedBarrier: emit_named_barrier, Assert: emit_assert}
HELPERS = {
    "dependent_launch": """\
// A dependent launch (DeviceKernel.dependent_launch): wait until the stream's previous kernel is done and its writes
// are visible, then let the next kernel launch once every block of this one has started (sm_90+; a no-op below).
__device__ __forceinline__ void tl_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}""",
}

__all__ = ["HANDLERS", "HELPERS", "named_barrier_asm"]
