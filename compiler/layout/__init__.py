"""Layouts: ``Layout`` (logical index -> memory offset) and ``Fragment`` (logical index -> thread, register slot).

In: shapes and level descriptions. Out: closed-form maps that work on ints (for tables and checks at compile time)
and on IR expressions (for code generation).
Guarantees: a Fragment maps every index of its shape to one base thread and one slot, plus the replica threads
that hold the same value; distinct indices owned by the same thread get distinct slots. A Layout without padding
is a bijection from indices to offsets ``0 .. size-1``; ``inverse`` undoes it.
"""

from tileagent.compiler.layout.fragment import Fragment, Level, make_blocked
from tileagent.compiler.layout.layout import Layout, Swizzle, swizzled

__all__ = ["Fragment", "Layout", "Level", "Swizzle", "make_blocked", "swizzled"]
