"""``tilelang.engine.callback``: TileLang's decorators that post-process the generated CUDA source.

In: a function ``fn(code: str, target) -> str``, with or without the decorator's parentheses
(``@register_cuda_postproc_callback``, ``@register_cuda_postproc_callback()``,
``@register_cuda_postproc_callback(override=False)``). Out: the function, unchanged; from then on every CUDA source
TileAgent generates is ``fn(source, target)`` (``target``: TileAgent's ``compiler.target.Target``, whose ``arch`` is
``"sm_90a"``...) before NVRTC compiles it (``compiler.runtime.hooks.set_cuda_postproc``).
Guarantees (TileLang's): with ``override=False`` an already registered callback stays and registering another is a
ValueError; a decorator argument that is neither a callable nor a bool is a TypeError. HIP callbacks
(``register_hip_postproc_callback``) register nothing TileAgent runs: AMD targets are not supported (E701).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import UnsupportedError
from tileagent.compiler.runtime.hooks import cuda_postproc, set_cuda_postproc


def register_cuda_postproc(func, override: bool = True) -> None:
    """Make ``func(code, target)`` post-process every CUDA source generated from now on."""
    if not callable(func):
        raise TypeError(f"register_cuda_postproc takes a callable, got {type(func).__name__}")
    if cuda_postproc() is not None and not override:
        raise ValueError("a CUDA post-processing callback is already registered (override=False)")
    set_cuda_postproc(func)


def register_cuda_postproc_callback(func=None, override: bool = True):
    """Decorator form of ``register_cuda_postproc`` (with or without parentheses)."""
    if callable(func):
        register_cuda_postproc(func, override)
        return func
    if func is None or isinstance(func, bool):
        keep = func if isinstance(func, bool) else override

        def _register(fn):
            register_cuda_postproc(fn, keep)
            return fn

        return _register
    raise TypeError("Invalid decorator usage")


def register_hip_postproc(func, override: bool = True) -> None:
    raise UnsupportedError("HIP post-processing callbacks are not supported: TileAgent targets NVIDIA GPUs only",
                           hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


def register_hip_postproc_callback(func=None, override: bool = True):
    register_hip_postproc(func, override)


__all__ = ["register_cuda_postproc", "register_cuda_postproc_callback", "register_hip_postproc",
           "register_hip_postproc_callback"]
