"""Whether the current thread is inside a compiled kernel's run: the one fact the evaluator's run-time guard needs.

In: ``JITKernel.__call__`` wraps its backend run in ``kernel_scope()``. Out: ``inside_kernel()`` (is this thread in a
run?) and ``launch_count()`` (how many runs this thread has entered, ever). Guarantees: the state is thread-local, so
another thread never appears to be inside a kernel; while a kernel of a CPU backend runs, Python dispatch modes are
suspended: the torch ops the interpreter or the emulator performs are the kernel's own work, and a tool that watches
the caller's torch ops from outside (``evaluator.guards``) sees the launch as one event, not the interpreter's steps
(a CUDA launch performs no torch op outside ``CudaBackend.run``'s own suspension); the automatic garbage collection
is off inside, and so are this thread's profile and trace hooks, so none of the caller's code runs there.
"""

from __future__ import annotations

import gc
import sys
import threading

from torch.utils._python_dispatch import _disable_current_modes

_state = threading.local()


class kernel_scope:  # noqa: N801 - used as a function: ``with kernel_scope():``
    """Mark this thread as running a compiled kernel until the block ends. ``suspend_modes`` (default True): also
    suspend Python dispatch modes for the block (13 us a call on the CPU machine: the CUDA backend, whose launch
    performs no torch op, leaves them, ``CudaBackend.run`` suspends them itself around the few torch ops of TMA)."""

    __slots__ = ("_suspend", "_modes")

    def __init__(self, suspend_modes: bool = True):
        self._suspend, self._modes = suspend_modes, None

    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1
        _state.launches = getattr(_state, "launches", 0) + 1
        if _state.depth == 1:  # no automatic collection and no profile or trace hook inside: a finalizer or a hook
            # would run the caller's code unwatched (red team, round 2 session 45); the evaluator collects after
            _state.collecting, _state.hooks = gc.isenabled(), (sys.getprofile(), sys.gettrace())
            gc.disable()
            sys.setprofile(None)
            sys.settrace(None)
        if self._suspend:
            try:
                self._modes = _disable_current_modes()
                self._modes.__enter__()
            except BaseException:
                _leave()
                raise
        return self

    def __exit__(self, *exc):
        try:
            if self._modes is not None:
                return self._modes.__exit__(*exc)
            return False
        finally:
            _leave()


def _leave() -> None:
    _state.depth -= 1
    if _state.depth == 0:
        if _state.collecting:
            gc.enable()
        sys.setprofile(_state.hooks[0])
        sys.settrace(_state.hooks[1])


def inside_kernel() -> bool:
    """True while this thread runs a compiled kernel."""
    return getattr(_state, "depth", 0) > 0


def launch_count() -> int:
    """Kernel runs this thread has entered so far (compare two readings to count the launches in between)."""
    return getattr(_state, "launches", 0)
