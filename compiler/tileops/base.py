"""The interface every tile op implements, and what the passes hand it.

In: one tile-IR statement of the op's class (``TileOp.node``). Out: per stage, what that stage needs from the op.
A tile op is one class in one module of this package (``copy``, ``gemm``, ``fill``, ``reduce``, ``atomic_add``,
``cumsum``); ``compiler.tileops`` maps statement classes to them, and the printer, the checker, layout inference,
barrier insertion, lowering and the CPU interpreter dispatch through that map instead of switching on statement
types. Guarantees of the interface (each method documents its own):

- ``name(s)`` is the op as the user wrote it (``T.reduce_max``), for diagnostics; ``dsl(s)`` one DSL line.
- ``check(s, checker)`` raises a ``CompileError`` (with a stable code) for anything the later stages cannot take.
- ``effects(s)`` names every buffer the op reads and writes (all scopes; index expressions count as reads):
  barrier insertion and software pipelining order statements by it.
- ``layout_level`` says how the op constrains fragment layouts: ``strict`` (it fixes them: gemm), ``common``
  (it propagates a layout from one operand to another: copy, reduce) or ``free`` (any layout will do: fill,
  cumsum). ``infer_strict`` / ``infer_common`` / ``free_tiles`` / ``verify_layout`` are its hooks into
  ``compiler.layout.infer``.
- ``scratch_bytes(s, layouts, threads)`` is the shared scratch its lowering needs; ``lower(s, ctx)`` gives the
  thread-IR statements (``ctx`` is the kernel's lowering context, ``ctx.target`` the target when one is set).
- ``interpret(s, it, mask)`` runs the op on the tile interpreter ``it`` (``compiler.interp``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tileagent.compiler.diagnostics import TargetError
from tileagent.compiler.ir.stmt import Buffer, Region
from tileagent.compiler.ir.visit import loads


@dataclass(frozen=True)
class Effects:
    """The buffers a statement reads and writes (any scope). Buffers only read through index expressions are reads."""

    reads: frozenset = frozenset()
    writes: frozenset = frozenset()

    @staticmethod
    def of(reads=(), writes=(), exprs=()) -> "Effects":
        """Effects from operands (Buffers or Regions; a Region's start expressions are read) and expressions."""
        r, w = set(), set()
        for x in reads:
            _operand(x, r, r)
        for x in writes:
            _operand(x, w, r)
        for e in exprs:
            r.update(ld.buffer for ld in loads(e))
        return Effects(frozenset(r), frozenset(w))


def _operand(x, into: set, index_reads: set) -> None:
    if isinstance(x, Region):
        into.add(x.buffer)
        for e in x.starts:
            index_reads.update(ld.buffer for ld in loads(e))
    elif isinstance(x, Buffer):
        into.add(x)


class TileOp:
    """One tile op kind. Subclasses set ``node`` and override what they need; the defaults are "no constraint"."""

    node: type = None  # the tile-IR statement class this op handles
    layout_level: str = "free"  # strict | common | free

    def name(self, s) -> str:
        raise NotImplementedError

    def dsl(self, s) -> str:
        raise NotImplementedError

    def check(self, s, checker) -> None:
        """Raise a CompileError for what the later stages cannot take (``checker``: ``compiler.check``'s walker,
        with ``region_bounds``, ``copy_shapes`` and ``exprs``)."""

    def effects(self, s) -> Effects:
        raise NotImplementedError

    # -- layout inference (compiler.layout.infer) --------------------------------------------------------------
    def infer_strict(self, s, inference) -> None:
        """Fix the layouts this op dictates (before annotations and propagation)."""

    def infer_common(self, s, inference) -> bool:
        """Propagate known layouts between this op's operands; True when something new got a layout."""
        return False

    def free_tiles(self, s) -> list:
        """(fragment Buffer, other Region or None) pairs that may get the default layout when still unassigned; the
        other side's dtype picks the vector width."""
        return []

    def verify_layout(self, s, inference) -> None:
        """Check, once every layout is known, that the op can run on them (LayoutError otherwise)."""

    # -- lowering ----------------------------------------------------------------------------------------------
    def scratch_bytes(self, s, layouts, threads: int) -> int:
        return 0

    def lower(self, s, ctx) -> list:
        raise TargetError(f"{self.name(s)} is not lowered by the CUDA backend", s.span, code="E602")

    # -- CPU interpreter ---------------------------------------------------------------------------------------
    def interpret(self, s, it, mask) -> None:
        raise NotImplementedError
