"""``ast.parse`` for code that runs on several threads at once (a batch's workers parse references and candidates).

CPython 3.11 keeps the recursion depth of its C-to-Python AST conversion in interpreter state that all threads share;
two threads converting at once can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905; seen once in a full test run, in a threaded batch). Every parse in TileAgent goes through
``parse``, which holds one process-wide lock; a parse takes milliseconds, so the lock costs nothing measurable.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse(source, filename, mode)``, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename, mode)
