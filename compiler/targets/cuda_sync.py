"""CUDA C++ for the barriers a program writes itself: ``T.sync_threads(barrier_id, arrive_count)``.

In: thread-IR ``NamedBarrier`` statements (``compiler.language.sync``). Out: ``bar.sync id, count;`` as inline PTX,
with a memory clobber so that the compiler keeps shared-memory accesses on their side of it.
Guarantees: the id and count are the compile-time integers the frontend checked (1..15, a multiple of 32).
"""

from __future__ import annotations

from tileagent.compiler.ir.stmt import NamedBarrier


def named_barrier_asm(s: NamedBarrier) -> str:
    """The PTX instruction of a named barrier (also the opt-in PTX target's line)."""
    return f"bar.sync {s.barrier_id}, {s.arrive_count};"


def emit_named_barrier(em, s: NamedBarrier) -> None:
    em.line(f'asm volatile("{named_barrier_asm(s)}" ::: "memory");')


HANDLERS = {NamedBarrier: emit_named_barrier}

__all__ = ["HANDLERS", "named_barrier_asm"]
