"""``break`` and ``continue`` in a prim_func (``compiler.frontend``'s parser takes these statements from here).

In: a ``break``/``continue`` statement and the kinds of the loops being parsed around it, innermost last
(``LoopExitParser.in_loop`` keeps them). Out: a ``LoopExit`` statement of the tile IR when the innermost loop is a
``T.serial`` (or ``range``) loop or a ``while`` loop; else an E101 at the statement saying which loop it sits in and
what to write instead. Whether the conditions that lead to it are block-uniform is checked later
(``compiler.loop_exits``): the parser does not yet know every store to the locals they read.
"""

from __future__ import annotations

import ast
from contextlib import contextmanager

from tileagent.compiler.diagnostics import DSLSyntaxError
from tileagent.compiler.ir.stmt import LoopExit

# innermost loop kind -> why a break/continue cannot leave it, and what to write instead
_REFUSED = {
    "parallel": ("T.Parallel: its iterations are independent and run on different threads",
                 "guard the rest of the iteration with `if`"),
    "pipelined": ("T.Pipelined: the software pipeline issues the loads of later iterations ahead of the current one",
                  "use T.serial for a loop that may stop early, or guard the body with `if`"),
    "unroll": ("T.unroll: the loop is unrolled", "use T.serial for a loop that may stop early"),
    "unrolled": ("a loop unrolled while parsing (a Python loop over compile-time values, or a T.serial loop with a "
                 "static trip count inside T.Parallel)",
                 "use T.serial over a runtime range, or guard the rest of the iteration with `if`"),
    "persistent": ("T.Persistent: its waves are one loop over the tiles of every block",
                   "guard the rest of the tile's work with `if`"),
}
EXITABLE = ("serial", "while")


class LoopExitParser:
    """The statements ``break`` and ``continue`` of the parser (a mixin of ``compiler.frontend._Parser``)."""

    loop_kinds: list

    @contextmanager
    def in_loop(self, kind: str):
        """Parse the body of a loop of ``kind`` ("serial", "while", "parallel", "pipelined", "unroll", "unrolled",
        "persistent") inside this block."""
        self.loop_kinds.append(kind)
        try:
            yield
        finally:
            self.loop_kinds.pop()

    def stmt_Break(self, node: ast.Break):
        self._loop_exit(node, "break")

    def stmt_Continue(self, node: ast.Continue):
        self._loop_exit(node, "continue")

    def _loop_exit(self, node: ast.stmt, kind: str) -> None:
        if not self.loop_kinds:
            raise DSLSyntaxError(f"`{kind}` outside a loop", code="E101")
        loop = self.loop_kinds[-1]
        if loop not in EXITABLE:
            why, hint = _REFUSED[loop]
            raise DSLSyntaxError(f"`{kind}` inside {why}", code="E101", hint=hint)
        self.emit(LoopExit(kind), node)


__all__ = ["EXITABLE", "LoopExitParser"]
