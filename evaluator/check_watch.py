"""What a timed-out check of a config had done: the worker's parent's record of a config's checks as they run.

In: the worker's "check" messages for the config being checked (``Progress.check``: the calls of the candidate that
finished and the seconds the last took, sent after each call by ``check_candidate``'s ``on_call``; and, at the start,
``over``: ``interpreter_sizes.over_budget`` of the sizes checked, when they are too large for the interpreter).
Out: ``CheckWatch.timeout(...)``, the ``Timeout`` of a worker phase that outlasted its limit; a check's message gets
``CheckWatch.text()`` (how far it got) and its failure ``CheckWatch.details()`` (``sizes_cause`` tells the feedback
that the sizes, not the kernel's schedule, are the cause).
Why: played LLM, session 27: a weight gradient's (4096, 4096) output was checked at every size, 0.6-1 s a call;
three turns timed out with "did not finish within 420 s" and feedback about tiles, though no tile could help.
Guarantees: never raises on a malformed message (fields of the wrong type are ignored).
"""

from __future__ import annotations

from collections.abc import Callable

from tileagent.evaluator.errors import Timeout


class CheckWatch:
    """The parent's record of the current config's checks; ``reset`` at each new phase."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.seen, self.calls, self.last_s, self.over = False, 0, None, None

    def update(self, message: dict) -> None:
        """Take in a worker "check" message."""
        self.seen = True
        if isinstance(message.get("calls"), int):
            self.calls = message["calls"]
        if isinstance(message.get("seconds"), (int, float)):
            self.last_s = float(message["seconds"])
        if isinstance(message.get("over"), str):
            self.over = message["over"]

    def text(self) -> str:
        """The clause that says how far the config's checks got and, where the sizes are the cause, says so first
        (empty when the worker said nothing of them: an evaluate function of a test)."""
        if not self.seen:
            return ""
        cause = (f"; the sizes checked are the cause, not the kernel: {self.over} (each call runs every block of "
                 f"the launch one after another)") if self.over else ""
        if self.calls:
            done = f"; {self.calls} call(s) of the candidate had finished, the last in {self.last_s:.2g} s"
        else:
            done = "; no call of the candidate had finished (the first includes compiling its kernels)"
        return cause + done

    def details(self) -> dict:
        if not self.seen:
            return {}
        return {"calls_done": self.calls, "call_s": self.last_s, "sizes_cause": self.over is not None}

    def timeout(self, phase: str, config, limit: float, request, running: dict | None, ran: float) -> Timeout:
        """The ``Timeout`` of a worker's ``phase`` ("load", "check", "plan", "timing") of ``config`` that outlasted
        ``limit`` s (``request``: its EvalRequest; ``running``: the reference's step that was running, for ``ran``
        s, or None); a check's says how far it got (``text``) and carries ``details``."""
        what = {"load": "loading the reference and the candidate", "check": f"checking config {config}",
                "plan": f"compiling the kernels of config {config} for the GPU"}.get(phase, f"timing config {config}")
        during = "" if running is None else (f" (the reference's {running.get('what', 'code')} was running, for "
                                             f"{ran:.2g} s: the phase's time went to many steps)")
        if phase != "check":
            return Timeout(f"{what} did not finish within {limit:g} s{during}; the worker was killed and restarted",
                           phase=phase, config=config, limit_s=limit)
        budget = (f" (a config's checks have {request.run_timeout_s:g} s, the first config's "
                  f"{request.compile_timeout_s:g} s more for compiling the kernels)")
        return Timeout(f"{what} did not finish within {limit:g} s{during}{self.text()}; the worker was killed and "
                       f"restarted{budget}", phase=phase, config=config, limit_s=limit, **self.details())


def check_hooks(spec, config: dict, device: str, progress, check_candidate: Callable) -> dict:
    """The keyword arguments that make ``check_candidate`` report its calls through ``progress.check`` (when it takes
    ``on_call``: tests pass their own), after telling ``progress`` whether ``config``'s sizes are over the
    interpreter's budget (CPU only)."""
    import inspect

    if not device.startswith("cpu"):
        return {}
    from tileagent.evaluator.interpreter_sizes import over_budget

    try:
        takes = "on_call" in inspect.signature(check_candidate).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:  # nothing would report the calls: the parent says nothing of them
        return {}
    over = over_budget(spec, config)
    progress.check(calls=0, **({"over": over} if over is not None else {}))  # the parent counts from here
    return {"on_call": lambda calls, seconds: progress.check(calls=calls, seconds=round(seconds, 3))}
