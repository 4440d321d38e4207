"""Errors of the evaluator, one tree (httpx style)::

    EvalError                      anything the evaluator reports instead of a result
    ├── SpecError                  the reference file is unusable (syntax, missing function, bad inputs, flaky ref)
    ├── CandidateError             the candidate is at fault
    │   ├── LoadFailed             its module does not import, has no usable ModelNew, or ModelNew() raised
    │   ├── CompileFailed          its kernel did not compile (carries the compiler's diagnostic dict)
    │   ├── RunFailed              its forward raised (a kernel argument error, a fault, any exception)
    │   ├── Mismatch               wrong numbers (carries config, seed, distribution, index, expected, got)
    │   └── GuardViolation         it tried to game the evaluation (carries the rule it broke)
    └── WorkerError                the isolated worker could not finish
        ├── Timeout                compile or run took longer than allowed
        └── DeviceFault            the process died or the device faulted (illegal address, segfault, OOM)

Every error has ``.kind`` (the class name) and ``.to_dict()`` for records and the agent's feedback.
"""

from __future__ import annotations


class EvalError(Exception):
    def __init__(self, message: str, **details):
        super().__init__(message)
        self.message = message
        self.details = details

    @property
    def kind(self) -> str:
        return type(self).__name__

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, **self.details}


class SpecError(EvalError):
    """The reference file cannot be used; the message says what is wrong and where."""


class CandidateError(EvalError):
    """The candidate kernel is at fault."""


class LoadFailed(CandidateError):
    """The candidate module cannot be used: syntax error, import error, no ``ModelNew``, or its constructor raised."""


class RunFailed(CandidateError):
    """The candidate's forward raised; details: config, exception (class name), and the candidate's line if known."""


class CompileFailed(CandidateError):
    """The candidate's kernel did not compile; ``details['diagnostic']`` is the compiler's ``to_dict()``."""


class Mismatch(CandidateError):
    """Wrong numbers; details: config, seed, distribution, output, index, expected, got, max_abs_err, rel_l2."""


class GuardViolation(CandidateError):
    """The candidate broke an evaluation rule; ``details['rule']`` names it."""


class WorkerError(EvalError):
    """The isolated worker process could not finish the request."""


class Timeout(WorkerError):
    """Compile or run exceeded its time limit."""


class DeviceFault(WorkerError):
    """The worker died (segfault, illegal memory access, out of memory) while running the candidate."""
