"""Public hooks of the runtime: who wants to hear about kernel launches.

In: callbacks registered with ``on_launch``. Out: each is called with the ``JITKernel`` (and, registered
``with_args``, the call's arguments) at the start of every call of a compiled kernel (``JITKernel.__call__``, any
thread, any target) made while its block runs.
Guarantees: registration is scoped (the callback is removed when the block ends, also on an exception); callbacks
run in registration order, on the calling thread, before the kernel's arguments are checked; an exception in a
callback propagates to the caller and the kernel does not run. This is how the evaluator counts launches, instead of
patching ``JITKernel.__call__``.

Also the CUDA post-processing callback (TileLang's ``tilelang.engine.callback.register_cuda_postproc_callback``):
``set_cuda_postproc(fn)`` makes every CUDA source generated afterwards (``codegen_cuda``) ``fn(source, target)``
before NVRTC compiles it (and what ``kernel.get_kernel_source()`` shows); a callback that does not return a str is
an E603 at the kernel. While one is set, kernels are not read from or written to the module cache (its key does not
know the callback). ``set_cuda_postproc(None)`` removes it.
"""

from __future__ import annotations

import contextlib
import threading

_CALLBACKS: list = []
_LOCK = threading.Lock()


@contextlib.contextmanager
def on_launch(callback, with_args: bool = False):
    """Call ``callback(kernel)`` (``with_args``: ``callback(kernel, args)``, the call's arguments as passed) for every
    compiled-kernel call made while the block runs."""
    if not callable(callback):
        raise TypeError(f"on_launch takes a callable, got {type(callback).__name__}")
    entry = (callback, with_args)
    with _LOCK:
        _CALLBACKS.append(entry)
    try:
        yield
    finally:
        with _LOCK:
            _CALLBACKS.remove(entry)


def notify_launch(kernel, args: tuple = ()) -> None:
    """Tell every registered callback that ``kernel`` is being called with ``args`` (``JITKernel.__call__`` does
    this)."""
    for callback, with_args in tuple(_CALLBACKS):
        if with_args:
            callback(kernel, args)
        else:
            callback(kernel)


_CUDA_POSTPROC: list = []  # at most one: TileLang keeps one registered function (override=True replaces it)


def set_cuda_postproc(fn) -> None:
    """Post-process every CUDA source generated from now on with ``fn(source, target)`` (None: stop)."""
    if fn is not None and not callable(fn):
        raise TypeError(f"set_cuda_postproc takes a callable or None, got {type(fn).__name__}")
    with _LOCK:
        _CUDA_POSTPROC[:] = [fn] if fn is not None else []


def cuda_postproc():
    """The registered CUDA post-processing callback, or None."""
    return _CUDA_POSTPROC[0] if _CUDA_POSTPROC else None


__all__ = ["cuda_postproc", "notify_launch", "on_launch", "set_cuda_postproc"]
