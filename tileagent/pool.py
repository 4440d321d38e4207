"""Scale-out evaluation: one evaluator worker per GPU (or per CPU slot), requests fanned out config by config.

In: ``EvalRequest``s, as the agent loop builds them, from any number of threads (several references of one batch run
their loops at once). Out: one ``EvalResult`` per request, merged from its configs' results in config order, as one
``EvalWorker`` would have returned it (``merge``). A ``Pool`` has ``evaluate(request) -> EvalResult``, the interface
the loop uses, so the loop does not know how many workers there are.

Guarantees:

- A worker per device: ``local_slots(["cuda:0", "cuda:2"])`` gives each ``EvalWorker`` one GPU alone
  (``CUDA_VISIBLE_DEVICES`` set to that GPU, mapped through the parent's own ``CUDA_VISIBLE_DEVICES``); a worker only
  ever runs one request at a time, so a timing never shares its GPU with another worker's work. ``resolve_gpus``
  turns ``--gpus all|N|0,2,5`` into the device list and says what is wrong with a bad value. On the CPU, ``--gpus N``
  starts N interpreter workers (``all``: one).
- Fan-out: with more than one worker, a request with several configs is split into one request per config; the
  parts are queued and every idle worker takes the next part it may take. A part whose (reference, config) a worker
  has run before goes preferably to that worker (its eager and torch.compile baselines are cached there). Without
  ``keep_going``, parts after the first failing config are cancelled (those already running are discarded), so the
  merged result is the one a single worker stopping at that config gives.
- A worker that dies (status "crash": killed, segfault, sticky CUDA fault, out of memory) has restarted itself
  (``EvalWorker``); the part it was running is queued again once, for another worker when one is idle. The second
  result stands, whatever it is. A slot that raises (``SlotDead``: e.g. a Ray actor lost for good) leaves the pool;
  its part is retried on the others; when no slot is left, the remaining parts fail with an internal error.
- Accounting: per slot, the seconds it was busy, the parts it finished, its retries and what it runs now
  (``snapshot()``, for the live display; ``usage()``, for the report).

Ray (``tileagent.ray_backend``) provides slots that are Ray actors; this module imports nothing of Ray.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tileagent.evaluator.records import EvalRequest, EvalResult

log = logging.getLogger("tileagent.pool")

# statuses after which a keep_going request goes on with its next config (a CandidateError of that config); any
# other failure ends a single worker's request there (evaluator.worker.evaluate), so the merge stops there too
CONTINUES = {"ok", "mismatch", "compile_error", "guard_violation", "candidate_error"}


class GpuSelectionError(ValueError):
    """A ``--gpus`` value that does not fit the device or the GPUs this host has."""


class SlotDead(Exception):
    """A slot cannot evaluate anything any more (it leaves the pool)."""


def resolve_gpus(gpus: str, device: str, count: int | None = None) -> list[str]:
    """The worker devices for ``--gpus`` on ``device`` (already resolved: 'cpu', 'cuda' or 'cuda:N').

    ``all``: every visible GPU (on the CPU: one worker); ``N``: the first N GPUs (on the CPU: N workers);
    ``0,2,5`` (or ``3,`` for one): those GPUs. ``count`` is the number of visible GPUs (default: torch's).
    """
    text = gpus.strip()
    listed = "," in text
    try:
        numbers = [int(x) for x in text.split(",") if x.strip()] if text != "all" else []
    except ValueError:
        raise GpuSelectionError(f"--gpus expects all, a count N or a list of GPU indices such as 0,2,5; "
                                f"got {gpus!r}") from None
    if text != "all" and not numbers:
        raise GpuSelectionError(f"--gpus expects all, a count N or a list of GPU indices such as 0,2,5; got {gpus!r}")
    if not listed and text != "all" and numbers[0] < 1:
        raise GpuSelectionError(f"--gpus {gpus}: a count must be at least 1 (one GPU by index: '{gpus},' or "
                                f"--device cuda:{gpus})")
    if not device.startswith("cuda"):
        if listed:
            raise GpuSelectionError(f"--gpus {gpus}: the device is {device}, which has no GPU indices; give a count "
                                    f"of CPU workers (e.g. --gpus 2)")
        return ["cpu"] * (1 if text == "all" else numbers[0])
    _, _, pinned = device.partition(":")
    if pinned:
        if text != "all":
            raise GpuSelectionError(f"--gpus {gpus} with --device {device}: pick the GPUs with one of them")
        return [device]
    if count is None:
        import torch

        count = torch.cuda.device_count()
    if count < 1:
        raise GpuSelectionError("no GPU is visible (torch.cuda.device_count() is 0); use --device cpu")
    if text == "all":
        return [f"cuda:{i}" for i in range(count)]
    if not listed:
        if numbers[0] > count:
            raise GpuSelectionError(f"--gpus {gpus}: this host has {count} visible GPU(s)")
        return [f"cuda:{i}" for i in range(numbers[0])]
    bad = [n for n in numbers if not 0 <= n < count]
    if bad:
        raise GpuSelectionError(f"--gpus {gpus}: GPU {bad[0]} does not exist; this host has {count} visible "
                                f"GPU(s) (0 to {count - 1})")
    if len(set(numbers)) != len(numbers):
        raise GpuSelectionError(f"--gpus {gpus}: a GPU is named twice (one worker per GPU)")
    return [f"cuda:{n}" for n in numbers]


def physical_gpu(device: str, visible: str | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry of ``cuda:N``: N, or the N-th entry of the parent's own list."""
    index = int(device.partition(":")[2] or 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    entries = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
    return entries[index] if entries else str(index)


class LocalSlot:
    """One ``EvalWorker`` on one device of this host."""

    def __init__(self, device: str, evaluate_fn: str | None = None, start_timeout_s: float = 120.0):
        from tileagent.evaluator.worker import DEFAULT_EVALUATE, EvalWorker

        env = {"CUDA_VISIBLE_DEVICES": physical_gpu(device)} if device.startswith("cuda") else None
        self.name = device
        self.worker = EvalWorker(device, evaluate_fn or DEFAULT_EVALUATE, start_timeout_s=start_timeout_s, env=env)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.worker.evaluate(request)

    @property
    def restarts(self) -> int:
        return self.worker.restarts

    def close(self) -> None:
        self.worker.close()


def local_slots(devices: list[str], evaluate_fn: str | None = None) -> list[LocalSlot]:
    """A ``LocalSlot`` per device (each named by its device; CPU slots ``cpu``, ``cpu#1``, ...)."""
    slots = []
    for k, device in enumerate(devices):
        slot = LocalSlot(device, evaluate_fn)
        if devices.count(device) > 1:
            slot.name = device if k == 0 else f"{device}#{k}"
        slots.append(slot)
    return slots


def merge(request: EvalRequest, results: list[EvalResult | None]) -> EvalResult:
    """The result one worker gives for ``request`` from the results of its configs (in config order; None: a part
    cancelled after an earlier config failed). Configs are kept up to the first failure that ends a request (any
    failure without ``keep_going``; with it, one outside ``CONTINUES``); the status, message and failure are the
    first failing config's."""
    configs, first, devices = [], None, []
    timing = False
    for r in results:
        if r is None:
            break
        configs += r.configs
        timing = timing or r.timing_available
        if r.device and r.device not in devices:
            devices.append(r.device)
        if r.status != "ok":
            first = first or r
            if not request.keep_going or r.status not in CONTINUES:
                break
    if first is None:
        return EvalResult(status="ok", configs=configs, device=",".join(devices), timing_available=timing)
    return EvalResult(status=first.status, message=first.message, failure=first.failure, configs=configs,
                      device=",".join(devices), timing_available=timing)


def _stops(request: EvalRequest, result: EvalResult) -> bool:
    """Whether a single worker would end ``request`` at the config of ``result``."""
    return result.status != "ok" and (not request.keep_going or result.status not in CONTINUES)


def _decided(job: _Job) -> bool:
    """Whether the results so far fix the merged result: every config up to one that stops the request is in."""
    for r in job.results:
        if r is None:
            return False
        if _stops(job.request, r):
            return True
    return False


def label_of(request: EvalRequest) -> str:
    """What a request is, for the display: ``rmsnorm_silu t1-c0 C=96`` (a tuning variant: ``t1-c0/BLOCK=4``)."""
    path = Path(request.kernel_path)
    parts = path.parts
    if "tune" in parts[-2:-1]:
        what = f"{parts[-3]}/{path.stem}"
    else:
        what = parts[-2] if len(parts) >= 2 else path.stem
    configs = request.configs or []
    where = " ".join(f"{k}={v}" for k, v in configs[0].items()) if len(configs) == 1 else f"{len(configs)} configs"
    return f"{Path(request.reference_path).stem} {what} {where}"


class _Job:
    """One request of the caller: its parts and their results."""

    def __init__(self, request: EvalRequest, parts: list[EvalRequest]):
        self.request = request
        self.results: list[EvalResult | None] = [None] * len(parts)
        self.pending = len(parts)
        self.done = threading.Event()


class _Part:
    def __init__(self, job: _Job, index: int, request: EvalRequest):
        self.job, self.index, self.request = job, index, request
        self.key = (request.reference_path, json.dumps(request.configs, sort_keys=True, default=str))
        self.label = label_of(request)
        self.tries = 0
        self.avoid: int | None = None
        self.cancelled = False


class SlotUsage:
    """One slot's accounting."""

    def __init__(self, name: str):
        self.name = name
        self.busy_s = 0.0
        self.done = 0
        self.retried = 0
        self.current: str | None = None
        self.since: float | None = None
        self.alive = True

    def as_dict(self) -> dict:
        return {"worker": self.name, "busy_s": round(self.busy_s, 3), "requests": self.done,
                "retried": self.retried, "alive": self.alive}


class Pool:
    """Evaluates requests over ``slots`` (anything with ``name``, ``evaluate(request)`` and ``close()``); see the
    module docstring. Thread-safe: ``evaluate`` may be called from several threads at once."""

    def __init__(self, slots: list, *, split: bool | None = None, on_close: Callable[[], None] | None = None):
        if not slots:
            raise ValueError("a Pool needs at least one slot")
        self.slots = list(slots)
        self.on_close = on_close
        self.split = len(self.slots) > 1 if split is None else split
        self.usage = [SlotUsage(s.name) for s in self.slots]
        self.started = time.monotonic()
        self.submitted = 0
        self.finished = 0
        self._cond = threading.Condition()
        self._queue: list[_Part] = []
        self._idle: set[int] = set()
        self._affinity: dict[tuple, int] = {}
        self._closed = False
        self._threads = [threading.Thread(target=self._serve, args=(i,), daemon=True, name=f"tileagent-slot-{i}")
                         for i in range(len(self.slots))]
        for t in self._threads:
            t.start()

    # -- the caller's side ------------------------------------------------------------------------------------------

    def evaluate(self, request: EvalRequest) -> EvalResult:
        """``request``'s result (see the module docstring)."""
        configs = request.configs or []
        if self.split and len(configs) > 1 and not request.overrides:
            parts = [request.model_copy(update={"configs": [c]}) for c in configs]
        else:
            parts = [request]
        job = _Job(request, parts)
        with self._cond:
            if self._closed:
                raise RuntimeError("this Pool is closed")
            if not self._alive_slots():
                return EvalResult(status="internal_error", message="no evaluation worker is left (all died)")
            self._queue += [_Part(job, k, p) for k, p in enumerate(parts)]
            self.submitted += len(parts)
            self._cond.notify_all()
        job.done.wait()
        return merge(request, job.results) if len(parts) > 1 else job.results[0]

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        """The results of ``requests``, in their order, evaluated at once over the slots."""
        results: list[EvalResult | None] = [None] * len(requests)

        def run(k: int) -> None:
            results[k] = self.evaluate(requests[k])

        threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(len(requests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results  # type: ignore[return-value]

    @property
    def parallel(self) -> int:
        """How many requests are worth having in flight at once (the loop's autotuning uses it): the live slots."""
        with self._cond:
            return max(1, len(self._alive_slots()))

    @property
    def on_progress(self):
        return getattr(self, "_on_progress", None)

    @on_progress.setter
    def on_progress(self, fn) -> None:
        """Forward each local worker's per-config progress (``EvalWorker.on_progress``) to ``fn``."""
        self._on_progress = fn
        for s in self.slots:
            if hasattr(s, "worker"):
                s.worker.on_progress = fn

    # -- accounting -------------------------------------------------------------------------------------------------

    def snapshot(self) -> dict:
        """What each slot runs now and has done, and the queue (for the live display)."""
        with self._cond:
            now = time.monotonic()
            return {"wall_s": now - self.started, "submitted": self.submitted, "finished": self.finished,
                    "queued": len(self._queue),
                    "slots": [{"worker": u.name, "current": u.current, "done": u.done, "alive": u.alive,
                               "busy_s": u.busy_s + (now - u.since if u.since is not None else 0.0)}
                              for u in self.usage]}

    def report(self) -> dict:
        """Wall time since the pool started and, per slot, its busy seconds, requests finished and retries."""
        with self._cond:
            wall = time.monotonic() - self.started
            return {"wall_s": round(wall, 3), "workers": [u.as_dict() for u in self.usage]}

    # -- the slots' side --------------------------------------------------------------------------------------------

    def _alive_slots(self) -> list[int]:
        return [i for i, u in enumerate(self.usage) if u.alive]

    def _pick(self, i: int) -> _Part | None:
        """The part slot ``i`` takes next: one whose config it ran before, else one no idle slot is likelier to
        take; a retried part goes back to the slot it crashed on only when no other slot is idle."""
        others_idle = any(j != i and self.usage[j].alive for j in self._idle)
        fallback = None
        for p in self._queue:
            if p.avoid == i and others_idle:
                continue
            owner = self._affinity.get(p.key)
            if owner == i:
                return p
            if fallback is None and (owner is None or owner not in self._idle or not self.usage[owner].alive
                                     or p.avoid == owner):
                fallback = p
        return fallback

    def _serve(self, i: int) -> None:
        slot, usage = self.slots[i], self.usage[i]
        while True:
            with self._cond:
                self._idle.add(i)
                while True:
                    if self._closed:
                        return
                    part = self._pick(i)
                    if part is not None:
                        break
                    self._cond.wait()
                self._idle.discard(i)
                self._queue.remove(part)
                usage.current, usage.since = part.label, time.monotonic()
                self._affinity[part.key] = i
            try:
                result = slot.evaluate(part.request)
                dead = None
            except SlotDead as e:
                result, dead = None, e
            except Exception as e:  # noqa: BLE001 - a slot's own failure must not lose the part
                log.exception("worker %s failed on %s", slot.name, part.label)
                result, dead = None, e
            with self._cond:
                usage.busy_s += time.monotonic() - usage.since
                usage.current, usage.since = None, None
                if dead is not None and isinstance(dead, SlotDead):
                    usage.alive = False
                    log.warning("worker %s left the pool: %s", slot.name, dead)
                    self._cond.notify_all()  # parts it was preferred for go to the others
                retry = result is None or result.status == "crash"
                if retry and part.tries == 0 and self._alive_slots():
                    part.tries, part.avoid = 1, i
                    usage.retried += 1
                    why = result.message.splitlines()[0] if result is not None else f"{type(dead).__name__}: {dead}"
                    log.warning("worker %s: %s crashed (%s); retrying it once", slot.name, part.label, why)
                    self._queue.insert(0, part)
                    self._cond.notify_all()
                else:
                    if result is None:
                        result = EvalResult(status="internal_error", device=slot.name,
                                            message=f"worker {slot.name} failed: {type(dead).__name__}: {dead}")
                    usage.done += 1
                    self._deliver(part, result)
                if not usage.alive:
                    self._fail_all_if_none_left()
                    return

    def _deliver(self, part: _Part, result: EvalResult) -> None:
        """Record ``part``'s result (the lock is held). A request is complete when every part has its result, or
        as soon as the configs up to one that stops it have theirs; its later queued parts are then cancelled, and
        results of its parts still running are dropped when they come."""
        job = part.job
        if part.cancelled or job.done.is_set():
            return
        job.results[part.index] = result
        job.pending -= 1
        self.finished += 1
        if _stops(job.request, result):
            for p in list(self._queue):
                if p.job is job and p.index > part.index:
                    p.cancelled = True
                    self._queue.remove(p)
                    job.pending -= 1
        if job.pending <= 0 or _decided(job):
            job.done.set()

    def _fail_all_if_none_left(self) -> None:
        if self._alive_slots():
            return
        for p in list(self._queue):
            self._queue.remove(p)
            self._deliver(p, EvalResult(status="internal_error", message="no evaluation worker is left (all died)"))

    def close(self) -> None:
        """Stop the slots' threads (after their current part) and the slots."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

        def close(slot) -> None:
            try:
                slot.close()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                log.exception("closing worker %s", slot.name)

        closers = [threading.Thread(target=close, args=(s,), daemon=True) for s in self.slots]
        for t in closers:
            t.start()
        for t in closers:
            t.join()
        if self.on_close is not None:
            self.on_close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_workers(device: str, gpus: str = "all", ray: str | None = None) -> int:
    """How many workers ``open_pool`` would start, without starting any (on Ray: connects and reads the cluster's
    resources). Raises GpuSelectionError as ``open_pool`` would: call it before writing anything."""
    if ray:
        from tileagent.ray_backend import actor_count

        return actor_count(ray, device, gpus)[0]
    return len(resolve_gpus(gpus, device))


def open_pool(device: str, gpus: str = "all", ray: str | None = None, evaluate_fn: str | None = None) -> Pool:
    """The pool for a run: local workers for ``--gpus`` on ``device``, or Ray actors when ``ray`` is given
    (``tileagent.ray_backend``, imported only then). Raises GpuSelectionError for a bad ``--gpus``."""
    if ray:
        from tileagent.ray_backend import ray_slots

        slots, done = ray_slots(ray, device, gpus, evaluate_fn=evaluate_fn)
        return Pool(slots, on_close=done)
    return Pool(local_slots(resolve_gpus(gpus, device), evaluate_fn))


__all__ = ["CONTINUES", "GpuSelectionError", "LocalSlot", "Pool", "SlotDead", "check_workers", "label_of",
           "local_slots", "merge",
           "open_pool", "physical_gpu", "resolve_gpus"]
