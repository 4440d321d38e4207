"""Register loads of a pipelined loop issued ahead of its stage wait.

In: a ``SoftwarePipeline``'s consumers (tile level) and the kernel's body. Out: ``(early, rest)``, a split of the
consumers where ``early`` are T.copy statements from global memory into registers (fragment or local tiles) that the
pipeline's lowering (``compiler.lower.pipeline``) places before the iteration's wait for its stage (the mbarrier
wait of a TMA pipeline, the cp.async wait and barrier of the others), instead of after it.
Why: TileLang's GQA decode copies a mask column into a fragment at the top of each iteration, before its gemm. Placed
after the stage wait, NVVM sinks those ``ld.global.nc`` loads past the wgmma issue, next to their use, and ptxas
splits them into two rounds around the wgmma wait: two memory latencies on every iteration's critical path (3.72
against 4.25 TFLOP/s with the loads ahead, H200, round 2 session 31). Issued before the wait (TileLang's order), the
wait's loop keeps them there and their latency runs under the wait and the gemm.
Guarantees (a copy is moved only when all hold, else the consumers are unchanged):

- it is one of the consumers' leading statements (nothing of the iteration runs before it that it could depend
  on), a ``Copy`` whose source is a global tensor the kernel never writes (``barriers.shared_effects``, which also
  sees pointers given to ``T.call_extern``): reading it earlier, before the barrier, cannot see another value;
- its destination is a fragment or local tile (per-thread registers: what the wait, the barrier and thread 0's
  refill between its old and new place do not touch).
``TILEAGENT_EARLY_LOADS=0`` switches it off.
"""

from __future__ import annotations

import os

from tileagent.compiler.ir.stmt import Copy


def enabled() -> bool:
    """Whether the loads move (``TILEAGENT_EARLY_LOADS=0`` switches it off, for A/B runs)."""
    return os.environ.get("TILEAGENT_EARLY_LOADS", "").strip() != "0"


def split(ctx, consumers: tuple) -> tuple[tuple, tuple]:
    """(early, rest): the leading consumers that may run before the stage wait, as the module docstring says; each
    moved copy gets an instruction note (``kernel.get_ir("thread")``)."""
    from tileagent.compiler.lower.barriers import shared_effects

    if not enabled():
        return (), tuple(consumers)
    n = 0
    while n < len(consumers) and _register_load(consumers[n]):
        n += 1
    if n == 0:
        return (), tuple(consumers)
    written = set()
    for x in ctx.kernel.body:
        written |= shared_effects(x, ("global",))[0]
    n = next((i for i, c in enumerate(consumers[:n]) if c.src.buffer in written), n)
    for c in consumers[:n]:
        ctx.note_instruction(c, "issued before the pipeline's stage wait")
    return tuple(consumers[:n]), tuple(consumers[n:])


def _register_load(s) -> bool:
    return (isinstance(s, Copy) and s.barrier is None and s.src.buffer.scope == "global"
            and s.dst.buffer.scope in ("fragment", "local"))


__all__ = ["enabled", "split"]
