"""Isolation: candidates run in a worker subprocess (one per device) that may crash, hang or fault without harm.

In: ``EvalRequest``s. Out: one ``EvalResult`` per request, always.
Guarantees:

- ``evaluate(request)`` runs a request in the calling process (the worker calls it; so can tests). Every failure
  becomes a status through one function, ``status_of(error)``; a device left unusable (a sticky CUDA fault such as an
  illegal address, or CUDA out of memory) is reported as status "crash".
- ``EvalWorker(device)`` owns a subprocess (``python -m tileagent.evaluator.worker``) fed JSON lines over a pipe: requests in;
  phase reports, finished configs and the result out. The candidate's own prints go to the worker's stderr, never
  into the pipe. The parent enforces the time limits: ``compile_timeout_s`` for loading the reference and the
  candidate, ``run_timeout_s`` for checking one config (plus ``compile_timeout_s`` for the first config, whose call
  builds the kernels) and ``run_timeout_s + compile_timeout_s`` for timing one config (torch.compile of the baseline).
- A hang (status "timeout") or a dead worker (segfault, killed for memory: status "crash", with the signal and the
  tail of the worker's stderr, where faulthandler writes the Python stack) kills the worker's process group; the
  next request goes to a fresh worker (after the first restart a spare is kept started, so restarts are instant),
  and the configs finished before the failure are kept in the result. After a "crash" result the worker restarts
  too (its CUDA context may be poisoned: an illegal address, or on the H200 an out-of-range shared-memory access,
  reported as an illegal instruction). A worker that dies before it acknowledges a request is replaced and the
  request sent once more. A worker whose parent died exits by itself.
- The reference's failures are the reference's: the worker reports when the reference's own code starts and stops
  running ("reference" messages, from ``evaluator.spec.running_reference``), so a worker that dies or runs out of
  time meanwhile gives status "spec_error" with a ``SpecError`` naming the reference's file, what of it ran, the
  config and the line (faulthandler's stack: written on a fatal signal, and on SIGUSR1, which the parent sends before
  it kills a hung worker), never "crash" or "timeout"; an exception raised from a line of the reference is a
  ``SpecError`` at that line (``classify``).
- Without a GPU the worker runs candidates on the CPU target: correctness only, ``timing_available=False``; their
  kernels are also put through the CUDA lowering there, so layout and lowering diagnostics surface without a GPU.

Limits: the real ``evaluate`` runs the candidate in a process of its own (``evaluator.sandbox``), which cannot reach
this pipe; an ``evaluate_fn`` that runs the candidate in the worker (the tests' fakes) leaves the pipe within its
reach, and then only the static guards (``evaluator.guards``) stand between a hostile candidate and the protocol.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import itertools
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tileagent.evaluator.errors import (
    CandidateError,
    CompileFailed,
    DeviceFault,
    EvalError,
    GuardViolation,
    Mismatch,
    SpecError,
    Timeout,
    WorkerError,
)
from tileagent.evaluator.check_watch import CheckWatch, check_hooks
from tileagent.evaluator.interpreter_sizes import INTERPRETER_INPUT_ELEMENTS, interpreter_config
from tileagent.evaluator.records import ConfigResult, EvalRequest, EvalResult, Status

log = logging.getLogger("tileagent.evaluator")

DEFAULT_EVALUATE = "tileagent.evaluator.worker:evaluate"
REPO = Path(__file__).resolve().parents[1]

_STATUS: tuple[tuple[type, Status], ...] = (
    (SpecError, "spec_error"),
    (CompileFailed, "compile_error"),
    (Mismatch, "mismatch"),
    (GuardViolation, "guard_violation"),
    (CandidateError, "candidate_error"),
    (Timeout, "timeout"),
    (WorkerError, "crash"),
)


def status_of(error: BaseException) -> Status:
    """The status of a request that ended with ``error`` (the one place where errors become statuses)."""
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return "internal_error"


def failed(error: EvalError, **fields) -> EvalResult:
    """An EvalResult for ``error``: its status, its message, and its ``to_dict()`` as the failure fed back."""
    return EvalResult(status=status_of(error), message=error.message, failure=error.to_dict(), **fields)


# -- in-process evaluation ----------------------------------------------------------------------------------------


class Progress:
    """What ``evaluate`` reports while it works (the worker forwards it to the parent; the default ignores it)."""

    def phase(self, name: str, index: int | None = None, config: dict | None = None) -> None:
        """Entering phase ``name`` ("load", "check", "timing", "full" (``evaluator.full_size``) or "plan"; "check",
        "timing" and "full" for config number ``index``)."""

    def config(self, result: ConfigResult) -> None:
        """A config finished (kept even if a later one crashes the worker)."""

    def check(self, **fields) -> None:
        """How the current config's checks go (``evaluator.check_watch``: calls done, a call's seconds, sizes)."""


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'; other names unchanged."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def expand_configs(grid: list[dict], configs: list[dict] | None = None, overrides: dict | None = None) -> list[dict]:
    """The configs to run: ``configs`` if given, else ``grid``; then each key of ``overrides`` set in every config
    (a list value gives one config per value), duplicates dropped in order."""
    base = [dict(c) for c in (configs if configs else grid)] or [{}]
    if not overrides:
        return base
    keys = list(overrides)
    choices = [v if isinstance(v, (list, tuple)) else [v] for v in overrides.values()]
    out = []
    for cfg in base:
        for values in itertools.product(*choices):
            merged = {**cfg, **dict(zip(keys, values))}
            if merged not in out:
                out.append(merged)
    return out


def evaluate(request: EvalRequest, progress: Progress | None = None, *, load_spec: Callable | None = None,
             check_candidate: Callable | None = None) -> EvalResult:
    """Check (and on CUDA time) ``request``'s candidate against its reference, config by config, in this process.

    Stops at the first failing config (with ``request.keep_going``: checks every config, see EvalRequest). Baselines
    are timed once per reference config and worker process (``evaluator.timing.time_candidate``). Never raises for
    the candidate's or the spec's faults: they become the result's status, message and failure (``status_of``).
    ``load_spec`` and ``check_candidate`` default to ``evaluator.spec.load_spec`` and
    ``evaluator.correctness.check_candidate``.
    """
    progress = progress or Progress()
    device = resolve_device(request.device)
    timed = request.timing and device.startswith("cuda")
    result = EvalResult(status="ok", device=device, timing_available=timed)
    stack = contextlib.ExitStack()
    try:
        progress.phase("load")
        if load_spec is None:
            from tileagent.evaluator.spec import load_spec
        if check_candidate is None:
            from tileagent.evaluator.correctness import check_candidate
        spec = load_spec(request.reference_path)
        configs = expand_configs(list(spec.configs), request.configs, request.overrides)
        sandbox = None
        if check_candidate is _default_check():
            from tileagent.evaluator.candidate import read_candidate
            from tileagent.evaluator.sandbox import Sandbox

            read_candidate(request.kernel_path)  # the static rules, before any of the candidate's code runs
            sandbox = stack.enter_context(Sandbox(request.kernel_path, device, lowering_check=device == "cpu"))
        first: EvalError | None = None
        done: dict[str, ConfigResult] = {}  # run config -> its result, for configs the interpreter checks alike
        for index, config in enumerate(configs):
            run, note = interpreter_config(spec, config, configs) if device == "cpu" else (config, None)
            key = repr(sorted(run.items()))
            try:
                checked = done.get(key) or _check_config(request, spec, run, index, device, timed, progress,
                                                         check_candidate, sandbox)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: BLE001 - with keep_going a candidate's fault ends this config only
                if not request.keep_going:
                    raise  # classified once, below
                error = classify(e, device, request.kernel_path, request.reference_path)
                if not isinstance(error, CandidateError):
                    raise
                first = first or error
                checked = ConfigResult(config=run, correct=False, notes=[f"{status_of(error)}: {error.message}"])
            done[key] = checked
            if run != config:
                checked = checked.model_copy(update={"config": config, "evaluated_at": run,
                                                     "notes": [note, *checked.notes]})
            result.configs.append(checked)
            progress.config(checked)
            if not checked.correct and first is None:
                first = Mismatch(f"config {run}: outputs differ from the reference", config=run)
            if first is not None and not request.keep_going:
                raise first
        if first is not None:
            raise first
        if sandbox is not None and device == "cpu":
            from tileagent.evaluator.full_size import run_full_sizes

            run_full_sizes(request, spec, result, sandbox, progress)
        if sandbox is not None:
            result.plans = _plans(request, spec, configs, device, sandbox, progress)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a status; KeyboardInterrupt propagates
        if isinstance(e, KeyboardInterrupt):
            raise
        error = classify(e, device, request.kernel_path, request.reference_path)
        return failed(error, configs=result.configs, device=device, timing_available=timed)
    finally:
        stack.close()
    return result


def _default_check() -> Callable:
    from tileagent.evaluator.correctness import check_candidate

    return check_candidate


def _gpu_lowering_checked(enabled: bool):
    """On the CPU, kernels also go through the CUDA lowering (``compile(..., lowering_check=True)``), so a candidate
    that the interpreter runs but a GPU could not compile fails here with its layout or lowering diagnostic."""
    from tileagent.compiler.jit import compile_defaults

    return compile_defaults(lowering_check=True) if enabled else contextlib.nullcontext()


def _plans(request: EvalRequest, spec, configs: list[dict], device: str, sandbox, progress: Progress) -> list[dict]:
    """Every plan config's kernels compiled for the GPU and sized in the candidate's process (``Sandbox.plan``);
    raises CompileFailed, naming the config, when one does not compile at its size."""
    import torch

    plans = []
    dtype = spec.dtypes if isinstance(spec.dtypes, torch.dtype) else None
    for config in request.plan_configs or configs:
        progress.phase("plan", None, config)
        try:
            inputs = [t.to(spec._input_dtype(k, t)) for k, t in enumerate(spec.sample_inputs(config, 0, "meta"))]
        except Exception as e:  # noqa: BLE001 - get_inputs needs real values: no plan for this config
            plans.append({"config": config, "unavailable": f"the reference's inputs cannot be made on the meta "
                                                           f"device ({type(e).__name__}: {str(e).strip()[:160]})"})
            continue
        try:
            plan = sandbox.plan(config, spec.init_inputs(config), inputs, 0, dtype)
        except CandidateError as e:  # CompileFailed, RunFailed: at a size the checks did not run
            raise type(e)(f"at the config the GPU runs, {config}: {e.message}",
                          **{**e.details, "config": config, "planned": True}) from e
        plans.append({"config": config, **{k: v for k, v in plan.items() if k in ("launches", "unavailable", "bytes")}})
    return plans


def _check_config(request: EvalRequest, spec, config: dict, index: int, device: str, timed: bool,
                  progress: Progress, check_candidate: Callable, sandbox=None) -> ConfigResult:
    """One config of ``evaluate``: checked, then timed when correct (both in the same candidate process,
    ``sandbox``); raises the candidate's first failure."""
    progress.phase("check", index, config)
    extra = {"distributions": request.distributions} if request.distributions else {}
    if sandbox is not None:
        extra["sandbox"] = sandbox
    extra.update(check_hooks(spec, config, device, progress, check_candidate))
    extra["probe_until"] = (start := time.perf_counter()) + 0.8 * budget_s(request, "check", index)  # its limit
    with _gpu_lowering_checked(device == "cpu"):
        (checked,) = check_candidate(spec, request.kernel_path, device=device, configs=[config],
                                     seeds=request.seeds, max_tail_elements=INTERPRETER_INPUT_ELEMENTS
                                     if device == "cpu" else None, **extra)
    seconds = {"check": round(time.perf_counter() - start, 3)}
    if timed and checked.correct:
        from tileagent.evaluator import timing

        progress.phase("timing", index, config)
        start = time.perf_counter()
        checked = timing.time_candidate(spec, request.kernel_path, config, checked, device=device,
                                        trials=request.timing_trials, sandbox=sandbox, seed=checked.seed)
        seconds["timing"] = round(time.perf_counter() - start, 3)
    return checked.model_copy(update={"seconds": seconds})


def _full_size_cut(done: list[ConfigResult], index, config, limit: float, device: str, timed: bool) -> EvalResult:
    """The result of an evaluation whose full-size run (``evaluator.full_size``: the checks had all passed) outlasted
    its phase (the reference at a config's full sizes can be slow on the CPU): "ok", with a note on the config."""
    from tileagent.evaluator.full_size import sizes_text

    note = (f"{sizes_text(config or {})}: the run at larger sizes did not finish within {limit:g} s (the kernel or the "
            f"reference there); not run")
    configs = list(done)
    if isinstance(index, int) and index < len(configs):
        configs[index] = configs[index].model_copy(update={"notes": [*configs[index].notes, note]})
    return EvalResult(status="ok", device=device, timing_available=timed, configs=configs)


def classify(error: BaseException, device: str = "cpu", candidate_path: str | None = None,
             reference_path: str | None = None) -> EvalError:
    """``error`` as an EvalError: EvalErrors as they are, unless the device is left unusable (then DeviceFault);
    out of memory -> DeviceFault; a CompileError that escaped -> CompileFailed; a kernel's run-time error, or any
    exception raised from a line of ``candidate_path`` -> CandidateError; any other exception raised from a line of
    ``reference_path`` -> SpecError naming that file:line (the reference's fault, never the candidate's); anything
    else -> an internal EvalError."""
    fault = _device_fault(error, device)
    if fault is not None:
        return fault
    if isinstance(error, EvalError):
        return error
    from tileagent.compiler.diagnostics import CompileError
    from tileagent.compiler.errors import KernelRuntimeError

    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, CompileError):
        return CompileFailed(str(error), diagnostic=error.to_dict())
    if isinstance(error, KernelRuntimeError):
        return CandidateError(f"the candidate's kernel failed: {text}", exception=type(error).__name__)
    own = [f for f in frames if candidate_path and os.path.abspath(f.filename) == os.path.abspath(candidate_path)]
    if own:
        return CandidateError(f"the candidate raised {text} (line {own[-1].lineno}: {own[-1].line})",
                              exception=type(error).__name__, line=own[-1].lineno)
    if reference_path:
        from tileagent.evaluator.spec import reference_line

        line = reference_line(error, reference_path)
        if line is not None:
            name = Path(reference_path).name
            return SpecError(f"the reference {name} raised {text} at {name}:{line}", reference=str(reference_path),
                             line=line, exception=type(error).__name__)
    at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return EvalError(f"internal error: {text}{at}", exception=type(error).__name__)


def _chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _device_fault(error: BaseException, device: str) -> DeviceFault | None:
    """A DeviceFault when ``error`` (or its cause) is an out-of-memory, or the CUDA device no longer works."""
    for e in _chain(error):
        text = str(e)
        lower = text.lower()
        if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or "out of memory" in lower or \
                "can't allocate memory" in lower:
            first = text.splitlines()[0] if text else type(e).__name__
            return DeviceFault(f"out of memory{_raised_at(error)}: {first}", fault="oom")
    if device.startswith("cuda"):
        broken = device_broken(device)
        if broken:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            return DeviceFault(f"the device faulted: {broken} (raised as {type(error).__name__}: {first[:200]})",
                               fault="cuda")
    return None


def _raised_at(error: BaseException) -> str:
    """" in F at FILE:LINE" for the innermost frame of ``error``'s traceback outside torch (what ran out: the
    reference's forward, one of the evaluator's checks, the candidate's code), or "" without a traceback."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f"{os.sep}torch{os.sep}" not in f.filename] \
        if error.__traceback__ else []
    return f" in {frames[-1].name} at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def device_broken(device: str) -> str | None:
    """None when ``device`` still runs work; else the CUDA error that a sticky fault leaves behind."""
    if not device.startswith("cuda"):
        return None
    import torch

    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
    except Exception as e:  # noqa: BLE001 - any failure here means the context is gone
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


# -- the worker process -------------------------------------------------------------------------------------------


def _resolve(path: str) -> Callable:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class _PipeProgress(Progress):
    def __init__(self, send: Callable[[dict], None], request_id: int):
        self.send, self.id = send, request_id

    def phase(self, name: str, index: int | None = None, config: dict | None = None) -> None:
        self.send({"type": "phase", "id": self.id, "phase": name, "index": index, "config": config})

    def config(self, result: ConfigResult) -> None:
        self.send({"type": "config", "id": self.id, "result": result.model_dump(mode="json")})

    def check(self, **fields) -> None:
        self.send({"type": "check", "id": self.id, **fields})


def serve(evaluate_fn: str = DEFAULT_EVALUATE, device: str = "cpu") -> None:
    """The worker's main loop: JSON lines on stdin -> JSON lines on (the original) stdout. Returns on "stop", on
    end of input, or after a "crash" result (the parent starts a fresh worker)."""
    proto_in = os.fdopen(os.dup(0), "r")
    proto_out = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # prints of the candidate land in stderr, not in the protocol
    faulthandler.enable(file=sys.stderr)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)  # the parent asks before a kill
    lock = threading.Lock()
    parent = os.getppid()

    def orphaned() -> None:  # a hung candidate must not outlive the evaluator that started it
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=orphaned, daemon=True, name="tileagent-orphan-watch").start()

    def send(message: dict) -> None:
        with lock:
            proto_out.write(json.dumps(message, default=str) + "\n")
            proto_out.flush()

    fn = _resolve(evaluate_fn)
    if evaluate_fn == DEFAULT_EVALUATE:  # import the evaluator now, so that the time limits measure the candidate
        with contextlib.suppress(ImportError):
            importlib.import_module("tileagent.evaluator.correctness")
            importlib.import_module("tileagent.evaluator.timing")
            importlib.import_module("tileagent.evaluator.sandbox").start_server()  # candidates' processes fork from it
    send({"type": "ready", "pid": os.getpid(), "device": device})
    for line in proto_in:
        message = json.loads(line)
        if message.get("type") == "stop":
            return
        request_id = message["id"]
        send({"type": "ack", "id": request_id})

        def reference(info: dict | None, request_id=request_id) -> None:
            send({"type": "reference", "id": request_id, "running": info})

        try:
            request = EvalRequest.model_validate(message["request"]).model_copy(update={"device": device})
            from tileagent.evaluator.spec import watch_reference

            with watch_reference(reference):
                result = fn(request, _PipeProgress(send, request_id))
            payload = result.model_dump(mode="json")
        except BaseException as e:  # noqa: BLE001 - the parent gets a result for every request
            error = classify(e, device, reference_path=message.get("request", {}).get("reference_path"))
            result = failed(error, device=device)
            payload = result.model_dump(mode="json")
        send({"type": "result", "id": request_id, "result": payload})
        if result.status == "crash":
            return


REFERENCE_BLAME = 0.5  # a timeout is the reference's fault when its current step ran this share of the budget


def budget_s(request: EvalRequest, phase: str, index: int | None) -> float:
    """Seconds allowed for ``phase`` of ``request`` (see the module docstring)."""
    if phase == "check":
        return request.run_timeout_s + (request.compile_timeout_s if index == 0 else 0.0)
    if phase in ("timing", "full"):
        return request.run_timeout_s + request.compile_timeout_s
    return request.compile_timeout_s


class _Process:
    """One worker subprocess: its pipes, a file holding its stderr, and the bytes read but not yet parsed."""

    def __init__(self, evaluate_fn: str, device: str, env: dict):
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "tileagent.evaluator.worker", evaluate_fn, device],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                                     cwd=str(REPO), start_new_session=True)
        self.pid, self.buf, self.ready = self.proc.pid, b"", False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # it died: reading finds out and says why

    def read(self, deadline: float) -> dict | None:
        """The next message, None at end of output (the worker died); raises TimeoutError at ``deadline``."""
        fd = self.proc.stdout.fileno()
        while True:
            line, sep, rest = self.buf.partition(b"\n")
            if sep:
                self.buf = rest
                try:
                    return json.loads(line)
                except ValueError:
                    log.warning("worker %s wrote a line that is not JSON: %r", self.pid, line[:200])
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self.buf += chunk

    def stderr_since(self, mark: int, limit: int = 1500) -> str:
        """The worker's stderr after byte ``mark`` (at most its last ``limit`` bytes)."""
        end = self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(mark, end - limit))
        return self.stderr.read().decode(errors="replace").strip()

    def death(self) -> str:
        code = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = self.proc.wait(timeout=30)
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f"the worker died from signal {signal.Signals(-code).name}"
        return f"the worker exited with code {code}"

    def stop(self, polite: bool = False) -> None:
        """End the process (after a "stop" message when ``polite``), its process group, and its files."""
        if polite and self.alive():
            self.send({"type": "stop"})
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # it leads its own session: its children go too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        for f in (self.proc.stdin, self.proc.stdout, self.stderr):
            with contextlib.suppress(OSError):
                f.close()


class EvalWorker:
    """A worker subprocess for one device; ``evaluate(request)`` returns its result, restarting the worker as needed.

    After the first restart a spare worker is kept started, so that later restarts cost no start-up time.

    Args:
        device: "auto" (cuda:0 when torch sees a GPU, else cpu), "cpu", "cuda" or "cuda:N". A CUDA worker sees only
            its own GPU (``CUDA_VISIBLE_DEVICES``), as "cuda".
        evaluate_fn: "module:function" run in the worker for each request (default: ``evaluate``); tests pass fakes.
        start_timeout_s: limit for a fresh worker to import torch and the evaluator and report ready.
        env: extra environment variables for the worker.
    """

    def __init__(self, device: str = "auto", evaluate_fn: str = DEFAULT_EVALUATE, start_timeout_s: float = 120.0,
                 env: dict | None = None):
        if device == "auto":
            import torch

            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        self.device, self.evaluate_fn, self.start_timeout_s = device, evaluate_fn, start_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), *sys.path, self.env.get("PYTHONPATH", ""))
                                                 if p)
        if device.startswith("cuda") and "CUDA_VISIBLE_DEVICES" not in (env or {}):
            self.env["CUDA_VISIBLE_DEVICES"] = device.partition(":")[2] or "0"
        self.restarts = 0
        self.on_progress: Callable[[str, dict], None] | None = None
        """Called (in the calling thread) as the worker reports: ("phase", {phase, index, config}) on entering
        load/check/timing, ("config", {index, result: ConfigResult}) when a config is done. Display only: an
        exception it raises is logged and ignored."""
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._spare: _Process | None = None
        self._worker: _Process | None = self._spawn()

    @property
    def pid(self) -> int | None:
        """The process id of the current worker."""
        return self._worker.pid if self._worker is not None else None

    def _spawn(self) -> _Process:
        return _Process(self.evaluate_fn, "cuda" if self.device.startswith("cuda") else "cpu", self.env)

    def _restart(self) -> None:
        if self._worker is not None:
            self._worker.stop()
        self._worker = self._spare if self._spare is not None and self._spare.alive() else self._spawn()
        self._spare = self._spawn()
        self.restarts += 1

    def close(self) -> None:
        """Stop the workers (politely, then by force)."""
        for w in (self._worker, self._spare):
            if w is not None:
                w.stop(polite=True)
        self._worker = self._spare = None

    def __enter__(self) -> EvalWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _wait_ready(self) -> str | None:
        """None once the worker is ready; else why it is not."""
        w = self._worker
        if w.ready:
            return None
        try:
            message = w.read(time.monotonic() + self.start_timeout_s)
        except TimeoutError:
            return f"the worker did not start within {self.start_timeout_s:g} s"
        if message is None:
            return f"{w.death()} while starting"
        w.ready = message.get("type") == "ready"
        return None if w.ready else f"unexpected first message from the worker: {message}"

    def _notify(self, kind: str, fields: dict) -> None:
        if self.on_progress is not None:
            try:
                self.on_progress(kind, fields)
            except Exception as e:  # noqa: BLE001 - a display must not break an evaluation
                log.warning("progress callback failed: %s: %s", type(e).__name__, e)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        """The result of ``request`` (never raises for the candidate's faults; a dead or hung worker is replaced)."""
        with self._lock:
            if self._worker is None:
                raise RuntimeError("this EvalWorker is closed")
            return self._evaluate(request)

    def _evaluate(self, request: EvalRequest, retry: bool = True) -> EvalResult:
        if not self._worker.alive():
            self._restart()
        why = self._wait_ready()
        if why is not None:
            tail = self._worker.stderr_since(0, 800)
            self._restart()
            return failed(EvalError(f"{why}: {tail}" if tail else why), device=self.device)
        w, request_id = self._worker, next(self._ids)
        mark = w.stderr.seek(0, os.SEEK_END)
        w.send({"type": "request", "id": request_id, "request": request.model_dump(mode="json")})
        timed = request.timing and self.device.startswith("cuda")
        phase, index, config, acknowledged = "load", None, None, False
        running = None  # what of the reference's own code the worker runs now (its "reference" messages)
        running_since = time.monotonic()  # when that began
        done, watch = [], CheckWatch()  # the configs done; how the current one's checks go
        deadline = time.monotonic() + budget_s(request, phase, index)
        while True:
            try:
                message = w.read(deadline)
            except TimeoutError:
                limit = budget_s(request, phase, index)
                if phase == "full":  # best effort after every check passed: a run that outlasts it was not run
                    self._restart()
                    return _full_size_cut(done, index, config, limit, self.device, timed)
                ran = time.monotonic() - running_since
                if running is not None and ran >= REFERENCE_BLAME * limit:  # the reference's own step hangs: its
                    error = _reference_hung(running, limit, w, mark)     # stack says where, then the worker goes
                    self._restart()
                    return failed(error, configs=done, device=self.device, timing_available=timed)
                self._restart()
                error = watch.timeout(phase, config, limit, request, running, ran)
                return failed(error, configs=done, device=self.device, timing_available=timed)
            if message is None and not acknowledged and retry:  # it died before it saw the request: not the
                self._restart()                                     # candidate's doing; once more on a fresh one
                return self._evaluate(request, retry=False)
            if message is None and running is not None:  # the reference's own code ended the worker
                error = _reference_died(running, w.death(), w.stderr_since(mark, 1 << 16))
                self._restart()
                return failed(error, configs=done, device=self.device, timing_available=timed)
            if message is None:
                why, tail = w.death(), w.stderr_since(mark)
                self._restart()
                where = "while loading" if phase == "load" else \
                    f"while {'checking' if phase == 'check' else 'timing'} config {config}"
                error = DeviceFault(f"{why} {where}" + (f"; its last output:\n{tail}" if tail else ""),
                                    phase=phase, config=config, fault="died")
                return failed(error, configs=done, device=self.device, timing_available=timed)
            if message.get("id") != request_id:
                continue
            kind = message.get("type")
            acknowledged = True
            if kind == "reference":
                running = message.get("running") if isinstance(message.get("running"), dict) else None
                running_since = time.monotonic()
            elif kind == "check":
                watch.update(message)
            elif kind == "phase":
                phase, index, config = message["phase"], message.get("index"), message.get("config")
                watch.reset()
                deadline = time.monotonic() + budget_s(request, phase, index)
                self._notify("phase", {"phase": phase, "index": index, "config": config})
            elif kind == "config":
                done.append(ConfigResult.model_validate(message["result"]))
                self._notify("config", {"index": len(done) - 1, "result": done[-1]})
            elif kind == "result":
                result = EvalResult.model_validate(message["result"])
                if result.status == "crash":
                    self._restart()  # the worker exits after a crash result; its successor takes over
                return result.model_copy(update={"device": self.device})


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _reference_frame(stack: str, reference: str) -> int | None:
    """The innermost line of ``reference`` in the last Python stack that faulthandler wrote into ``stack`` (its
    frames run from the most recent call)."""
    start = max(stack.rfind("most recent call first"), 0)
    target = os.path.abspath(reference)
    for m in _FRAME.finditer(stack, start):
        if os.path.abspath(m["file"]) == target:
            return int(m["line"])
    return None


def _running_text(running: dict, line: int | None) -> str:
    name = Path(str(running.get("reference", "the reference"))).name
    config = running.get("config")
    at = f" at {name}:{line}" if line else ""
    return f"{running.get('what', 'its code')}{f' (config {config})' if config else ''}{at}"


def _reference_died(running: dict, why: str, stderr: str) -> SpecError:
    """The SpecError for a worker that died while the reference's own code ran (``running``: its "reference"
    message): the reference's file, what of it ran, its line (from faulthandler's stack when there is one)."""
    reference = str(running.get("reference", ""))
    name = Path(reference).name or "the reference"
    line = _reference_frame(stderr, reference) if reference else None
    unknown = "" if line else " (no Python stack: the process ended itself, e.g. os._exit, so no line is known)"
    tail = stderr[-1500:].strip()
    return SpecError(f"the reference {name} ended the evaluation worker in {_running_text(running, line)}{unknown}: "
                     f"{why.removeprefix('the worker ')}; the reference is at fault, not the candidate"
                     + (f"; the worker's last output:\n{tail}" if tail else ""),
                     reference=reference, line=line, what=running.get("what"), config=running.get("config"),
                     fault="died")


def _reference_hung(running: dict, limit: float, w: _Process, mark: int) -> SpecError:
    """The SpecError for a worker that ran out of time while the reference's own code ran; asks the worker for its
    Python stack first (faulthandler on SIGUSR1) to name the reference's line."""
    reference = str(running.get("reference", ""))
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(w.pid, signal.SIGUSR1)
    line, until = None, time.monotonic() + 2.0
    while line is None and time.monotonic() < until and reference:
        time.sleep(0.05)
        line = _reference_frame(w.stderr_since(mark, 1 << 16), reference)
    name = Path(reference).name or "the reference"
    return SpecError(f"the reference {name} did not finish {_running_text(running, line)} within {limit:g} s (it "
                     f"hangs, sleeps or is too slow); the worker was killed and restarted; the reference is at fault, "
                     f"not the candidate", reference=reference, line=line, what=running.get("what"),
                     config=running.get("config"), limit_s=limit)


class WorkerPool:
    """One EvalWorker per device; ``evaluate_many`` spreads requests over them and keeps their order."""

    def __init__(self, devices: list[str], evaluate_fn: str = DEFAULT_EVALUATE):
        self.workers = [EvalWorker(d, evaluate_fn) for d in devices]

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        results: list[EvalResult | None] = [None] * len(requests)
        pending = iter(enumerate(requests))
        lock = threading.Lock()

        def drain(worker: EvalWorker) -> None:
            while True:
                with lock:
                    item = next(pending, None)
                if item is None:
                    return
                results[item[0]] = worker.evaluate(item[1])

        threads = [threading.Thread(target=drain, args=(w,), daemon=True) for w in self.workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for w in self.workers:
            w.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    serve(*sys.argv[1:3])
