"""Run-time errors of compiled kernels (compile errors live in ``compiler.diagnostics``).

    KernelRuntimeError
    ├── KernelArgumentError   a call's arguments do not fit the kernel's parameters (names the parameter)
    ├── KernelFault           the kernel did something illegal while running (an out-of-bounds on-chip access)
    │   └── RaceFault         two parts of a launch that the GPU runs at once touch one element in no fixed order
    ├── TargetUnavailable     the target cannot run on this machine (no CUDA device, backend missing)
    └── InterpreterTimeLimit  a CPU interpreter run would pass the time it was given (``interp.time_limit``)
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import Span


class KernelRuntimeError(RuntimeError):
    """Base of run-time errors of a compiled kernel."""


class KernelArgumentError(KernelRuntimeError, ValueError):
    """Wrong argument for a parameter: count, kind, rank, shape, dtype, device or layout."""


class KernelFault(KernelRuntimeError):
    """An illegal action while the kernel ran, reported at the DSL line that did it."""

    def __init__(self, message: str, span: Span | None = None):
        super().__init__(f"{span}: {message}" if span else message)
        self.message, self.span = message, span


class RaceFault(KernelFault):
    """A race the CPU interpreter saw (T.Parallel iterations, thread blocks, warp-specialized branches): a fault of
    the kernel's structure, not of the sizes it ran at, so a check at sizes too small to show it proves nothing."""


class TargetUnavailable(KernelRuntimeError):
    """The target cannot be used here."""


class InterpreterTimeLimit(KernelRuntimeError):
    """A run under ``compiler.interp.time_limit`` passed its limit, or the blocks run so far say its kernel would;
    ``needed_s`` is that estimate (None when the limit passed inside a block)."""

    def __init__(self, message: str, needed_s: float | None = None):
        super().__init__(message)
        self.needed_s = needed_s
