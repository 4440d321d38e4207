"""Block-uniform loop exits: a ``break``/``continue`` may leave a loop only when every thread of the block does.

In: a PrimFunc from the frontend (``compiler.check`` calls ``check_loop_exits``). Out: nothing, or an E510 at the
first ``break``/``continue`` the compiler cannot prove block-uniform.
Guarantees, once it returns: the path from the T.Kernel down to every ``LoopExit`` (``compiler.ir.stmt``) runs
under block-uniform control only: every enclosing ``if``/``while`` condition and loop bound is block-uniform and no
T.Parallel encloses it. So all threads that run an iteration leave it together, and a barrier later in the loop
(``T.sync_threads()`` or one the compiler places) is reached by every thread or by none.

Block-uniform values: constants, kernel arguments and dynamic sizes, block indices, variables of loops with uniform
starts and steps, lets of uniform values, math of uniform values, and loads at uniform indices of

- global tensors the kernel does not write (every thread reads the same bytes);
- shared memory: the compiler's barriers (``compiler.lower.barriers``) separate every statement that writes a shared
  buffer from every statement that reads it, so all threads read the value of the same write;
- locals (``T.alloc_var``, ``T.alloc_local``) whose every write is a store of a uniform value at a uniform index
  under uniform control (a greatest fixed point: a local is uniform until a write shows otherwise; the result of an
  atomic with ``return_prev``, and locals a tile op writes, are not).

Thread indices (``T.get_thread_binding``), T.Parallel variables, fragments, warp shuffles and random draws are not.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import ScopeError
from tileagent.compiler.intrinsics import MATH
from tileagent.compiler.ir.expr import BinOp, Call, Cast, Cmp, Load, Select, Unary, Var
from tileagent.compiler.ir.stmt import (Alloc, AtomicAdd, For, If, Kernel, Let, LoopExit, Parallel, PrimFunc, Store,
                                        While)
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.tileops import op_for

_PURE_CALLS = frozenset(MATH) | {"reinterpret"}
_HINT = ("compute the condition from values every thread shares: block indices, loop variables, kernel arguments, "
         "shared memory (e.g. a flag one thread writes before T.sync_threads()), or locals set from those; or guard "
         "the rest of the iteration with `if` instead of leaving the loop")


def exits_early(loop) -> bool:
    """Whether a ``break``/``continue`` of ``loop`` (a For or While) sits in its body, not in a nested loop's."""
    return next(_exits(loop.body), None) is not None


def _exits(stmts):
    for s in stmts:
        if isinstance(s, LoopExit):
            yield s
        elif isinstance(s, If):
            yield from _exits(s.then_body)
            yield from _exits(s.else_body)


def check_loop_exits(func: PrimFunc) -> None:
    """Raise E510 at the first ``break``/``continue`` of ``func`` whose way down from its T.Kernel may differ between
    the threads of a block (the module docstring says what counts as block-uniform)."""
    for k in (s for s in walk(func.body) if isinstance(s, Kernel)):
        if any(isinstance(s, LoopExit) for s in walk(k.body)):
            _Uniformity(k).check()


class _Uniformity:
    """What in kernel ``k`` is block-uniform: ``divergent`` maps each Var and local Buffer that is not to why."""

    def __init__(self, k: Kernel):
        self.k = k
        self.divergent: dict = {v: f"the thread index '{v.name}'" for v in k.thread_vars}
        self.written_globals = set()
        for s in walk(k.body):
            if isinstance(s, (Store, AtomicAdd)) and s.buffer.scope == "global":
                self.written_globals.add(s.buffer)
            elif op_for(s) is not None:
                self.written_globals |= {b for b in op_for(s).effects(s).writes if b.scope == "global"}
        size = -1
        while size != len(self.divergent):  # grows until every write was seen with the final knowledge
            size = len(self.divergent)
            self.exits = []
            self.scan(k.body, None)

    def check(self) -> None:
        for s, control in self.exits:
            if control is not None:
                where, reason = control
                raise ScopeError(f"`{s.kind}` may be taken by some threads of the block only: {where} depends on "
                                 f"{reason}", s.span, code="E510", hint=_HINT)

    # -- statements --------------------------------------------------------------------------------------------
    def mark(self, key, reason: str) -> None:
        self.divergent.setdefault(key, reason)

    def scan(self, stmts, control) -> None:
        """Record what ``stmts`` make divergent; ``control``: None under uniform control, else (where, why) not."""
        for s in stmts:
            line = s.span.line if getattr(s, "span", None) else "?"
            if isinstance(s, LoopExit):
                self.exits.append((s, control))
            elif isinstance(s, Let):
                why = self.why(s.value) if control is None else control[1]
                if why is not None and isinstance(s.value, Var) and control is None:
                    self.mark(s.var, why)  # another name of the same value (tx = T.get_thread_binding())
                elif why is not None:
                    self.mark(s.var, f"'{s.var.name}', which line {line} sets from {why}")
            elif isinstance(s, Alloc) and s.init is not None and s.buffer.scope in ("local", "var"):
                why = self.why(s.init)
                if why is not None:
                    self.mark(s.buffer, f"the local '{s.buffer.name}', initialized at line {line} from {why}")
            elif isinstance(s, Store) and s.buffer.scope in ("local", "var"):
                why = control[1] if control is not None else self.why(tuple(s.indices) + (s.value,))
                if why is not None:
                    self.mark(s.buffer, f"the local '{s.buffer.name}', which line {line} sets from {why}")
            elif isinstance(s, AtomicAdd) and s.prev is not None:
                self.mark(s.prev.buffer, f"the previous value of the atomic at line {line} (one per thread)")
            elif isinstance(s, For):
                why = self.why((s.start, s.step))
                if why is not None:
                    self.mark(s.var, f"the loop variable '{s.var.name}', whose start or step reads {why}")
                why = why or self.why(s.extent)
                self.scan(s.body, control or (None if why is None else (f"the loop at line {line}", why)))
            elif isinstance(s, (If, While)):
                why = self.why(s.cond)
                inner = control or (None if why is None else (f"the condition at line {line}", why))
                for body in (s.then_body, s.else_body) if isinstance(s, If) else (s.body,):
                    self.scan(body, inner)
            elif isinstance(s, Parallel):
                for v in s.vars:
                    self.mark(v, f"the T.Parallel variable '{v.name}'")
                self.scan(s.body, control or (f"the T.Parallel loop at line {line}", "its iteration"))
            elif op_for(s) is not None:
                for b in op_for(s).effects(s).writes:
                    if b.scope in ("local", "var"):
                        self.mark(b, f"the local '{b.name}', which a tile op writes at line {line}")

    # -- expressions -------------------------------------------------------------------------------------------
    def why(self, e) -> str | None:
        """None when ``e`` (an expression or a tuple of them) is block-uniform, else what makes it differ."""
        if isinstance(e, tuple):
            return next((w for w in map(self.why, e) if w is not None), None)
        if isinstance(e, Var):
            return self.divergent.get(e)
        if isinstance(e, Load):
            b = e.buffer
            if b.scope == "fragment":
                return f"the fragment '{b.name}' (each thread holds its own elements)"
            if b.scope == "global" and b in self.written_globals:
                return f"'{b.name}', which the kernel also writes"
            if b in self.divergent:
                return self.divergent[b]
            return self.why(tuple(e.indices))
        if isinstance(e, Call):
            if e.name not in _PURE_CALLS:
                return f"{e.name}(...), which each thread computes for itself"
            return self.why(tuple(e.args))
        if isinstance(e, (BinOp, Cmp)):
            return self.why((e.a, e.b))
        if isinstance(e, Unary):
            return self.why(e.a)
        if isinstance(e, Cast):
            return self.why(e.value)
        if isinstance(e, Select):
            return self.why((e.cond, e.a, e.b))
        return None  # constants, block indices, kernel arguments


__all__ = ["check_loop_exits", "exits_early"]
