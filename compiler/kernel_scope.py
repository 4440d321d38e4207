"""Whether the current thread is inside a compiled kernel's run: the one fact the evaluator's run-time guard needs.

In: ``JITKernel.__call__`` wraps its backend run in ``kernel_scope()``. Out: ``inside_kernel()`` (is this thread in a
run?) and ``launch_count()`` (how many runs this thread has entered, ever). Guarantees: the state is thread-local, so
another thread never appears to be inside a kernel; while a kernel runs, Python dispatch modes are suspended: the
torch ops a CPU backend (the interpreter, the emulator) performs are the kernel's own work, and a tool that watches the
caller's torch ops from outside (``evaluator.guards``) sees the launch as one event, not the interpreter's steps.
"""

from __future__ import annotations

import contextlib
import threading

from torch.utils._python_dispatch import _disable_current_modes

_state = threading.local()


@contextlib.contextmanager
def kernel_scope():
    """Mark this thread as running a compiled kernel until the block ends."""
    _state.depth = getattr(_state, "depth", 0) + 1
    _state.launches = getattr(_state, "launches", 0) + 1
    try:
        with _disable_current_modes():
            yield
    finally:
        _state.depth -= 1


def inside_kernel() -> bool:
    """True while this thread runs a compiled kernel."""
    return getattr(_state, "depth", 0) > 0


def launch_count() -> int:
    """Kernel runs this thread has entered so far (compare two readings to count the launches in between)."""
    return getattr(_state, "launches", 0)
