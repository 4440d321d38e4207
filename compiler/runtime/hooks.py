"""Public hooks of the runtime: who wants to hear about kernel launches.

In: callbacks registered with ``on_launch``. Out: each is called with the ``JITKernel`` at the start of every call
of a compiled kernel (``JITKernel.__call__``, any thread, any target) made while its block runs.
Guarantees: registration is scoped (the callback is removed when the block ends, also on an exception); callbacks
run in registration order, on the calling thread, before the kernel's arguments are checked; an exception in a
callback propagates to the caller and the kernel does not run. This is how the evaluator counts launches, instead of
patching ``JITKernel.__call__``.
"""

from __future__ import annotations

import contextlib
import threading

_CALLBACKS: list = []
_LOCK = threading.Lock()


@contextlib.contextmanager
def on_launch(callback):
    """Call ``callback(kernel)`` for every compiled-kernel call made while the block runs."""
    if not callable(callback):
        raise TypeError(f"on_launch takes a callable, got {type(callback).__name__}")
    with _LOCK:
        _CALLBACKS.append(callback)
    try:
        yield
    finally:
        with _LOCK:
            _CALLBACKS.remove(callback)


def notify_launch(kernel) -> None:
    """Tell every registered callback that ``kernel`` is being called (``JITKernel.__call__`` does this)."""
    for callback in tuple(_CALLBACKS):
        callback(kernel)


__all__ = ["notify_launch", "on_launch"]
