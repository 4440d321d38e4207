"""Evaluation on a Ray cluster (``--ray auto|local|ADDRESS``): one Ray actor per GPU, each holding an ``EvalWorker``.

In: the Ray address, the run's device, ``--gpus all|N``. Out: ``ray_slots(...)``, slots for ``tileagent.pool.Pool``
(the drafter, the loop and the run directory stay on the driver; only evaluation requests travel).
Guarantees:

- Ray is imported only here, and this module only when ``--ray`` is given; without Ray installed it says how to get
  it (``pip install 'tileagent[ray]'``).
- Placement is Ray's: each actor asks for ``num_gpus=1`` (on a cluster without GPUs and a CPU run, ``num_cpus=1``),
  so Ray puts at most one actor on a GPU, and sets the actor's ``CUDA_VISIBLE_DEVICES``; the actor's ``EvalWorker``
  keeps that (its process sees only its GPU). ``--gpus all``: an actor per GPU of the cluster; ``--gpus N``: N actors.
- Retries are Ray's: an actor whose process dies is restarted (``max_restarts``) and the call in flight is run again
  once (``max_task_retries=1``). A candidate that crashes the evaluator's subprocess inside the actor gives a "crash"
  result, which the pool retries once on another actor. An actor lost for good (``ActorDiedError``) leaves the pool.
- Files are shipped, not shared: the reference's source goes once into Ray's object store (``ray.put``, per file and
  content), the candidate's source with its request; the actor writes both under its own temporary folder (same file
  names) and maps its paths back to the driver's in the result, so messages and diagnostics name the run's files.
  The compiled-module cache is the nodes' own (``TILEAGENT_CACHE_DIR``, default ``~/.cache/tileagent``); point it at
  a folder the cluster mounts to share it. ``TILEAGENT_*`` variables of the driver are passed to the actors. The
  archive is read and written on the driver only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from tileagent.evaluator.records import EvalRequest, EvalResult
from tileagent.pool import GpuSelectionError, SlotDead

log = logging.getLogger("tileagent.ray")

ACTOR_START_TIMEOUT_S = 600.0  # Ray may need to start nodes (an autoscaler) before every actor is placed
INSTALL = "pip install 'tileagent[ray]'"


def _ray():
    try:
        import ray
    except ImportError:
        raise GpuSelectionError(f"--ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


_connected_here = False  # whether connect() initialized Ray (then the pool's close disconnects)


def connect(address: str):
    """Ray, connected: ``auto`` (the running cluster: ``RAY_ADDRESS`` or a local ``ray start``), ``local`` (start a
    Ray instance in this process with this machine's CPUs and GPUs) or a cluster ADDRESS. An already initialized Ray
    (a test's local cluster, or an earlier call) is used as it is. Returns (ray, whether tileagent initialized it)."""
    global _connected_here
    ray = _ray()
    if ray.is_initialized():
        return ray, _connected_here
    env = {k: v for k, v in os.environ.items() if k.startswith("TILEAGENT_")}
    kwargs = {"log_to_driver": False, "include_dashboard": False}
    if env:
        kwargs["runtime_env"] = {"env_vars": env}
    try:
        if address == "local":
            ray.init(**kwargs)
        else:
            ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GpuSelectionError(f"--ray {address}: cannot connect to a Ray cluster ({first}); start one with "
                                f"`ray start --head`, or use --ray local") from None
    _connected_here = True
    return ray, True


def disconnect() -> None:
    """Shut Ray down if ``connect`` initialized it."""
    global _connected_here
    if _connected_here:
        ray = _ray()
        if ray.is_initialized():
            ray.shutdown()
        _connected_here = False


def cluster_device(address: str) -> str:
    """``--device auto`` on Ray: 'cuda' when the cluster has GPUs, else 'cpu'."""
    ray, _ = connect(address)
    return "cuda" if ray.cluster_resources().get("GPU", 0) >= 1 else "cpu"


class EvalActor:
    """One GPU of the cluster (Ray places it; see the module docstring): an ``EvalWorker`` on it."""

    def __init__(self, device: str, evaluate_fn: str | None = None):
        import ray

        from tileagent.evaluator.worker import DEFAULT_EVALUATE, EvalWorker

        cuda = device.startswith("cuda")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        env = {"CUDA_VISIBLE_DEVICES": visible} if cuda and visible is not None else None
        self.gpus = [str(g) for g in ray.get_gpu_ids()]
        self.worker = EvalWorker("cuda" if cuda else "cpu", evaluate_fn or DEFAULT_EVALUATE, env=env)
        self.tmp = Path(tempfile.mkdtemp(prefix="tileagent-ray-"))
        self.count = 0

    def where(self) -> dict:
        """Where the actor runs: host, the GPUs Ray gave it, its pid and its worker's pid."""
        return {"host": socket.gethostname(), "gpus": self.gpus, "pid": os.getpid(), "worker_pid": self.worker.pid}

    def evaluate(self, request: dict, kernel_source: str, reference_source: str) -> dict:
        """The result (a dict) of ``request``, with the candidate and the reference written here first."""
        self.count += 1
        folder = self.tmp / str(self.count)
        folder.mkdir(parents=True)
        kernel, reference = folder / Path(request["kernel_path"]).name, folder / "ref" / Path(
            request["reference_path"]).name
        reference.parent.mkdir()
        kernel.write_text(kernel_source)
        reference.write_text(reference_source)
        try:
            req = EvalRequest.model_validate({**request, "kernel_path": str(kernel), "reference_path": str(reference)})
            text = self.worker.evaluate(req).model_dump_json()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        for here, there in ((kernel, request["kernel_path"]), (reference, request["reference_path"]),
                            (folder, str(Path(request["kernel_path"]).parent))):
            text = text.replace(json.dumps(str(here))[1:-1], json.dumps(str(there))[1:-1])
        return json.loads(text)

    def restarts(self) -> int:
        return self.worker.restarts

    def close(self) -> None:
        self.worker.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class _Sources:
    """Reference sources in Ray's object store, one object per (path, content)."""

    def __init__(self, ray):
        self.ray, self.refs, self.lock = ray, {}, threading.Lock()

    def reference(self, path: str):
        text = Path(path).read_text()
        with self.lock:
            key = (path, text)
            if key not in self.refs:
                self.refs[key] = self.ray.put(text)
            return self.refs[key]


class RaySlot:
    """A pool slot that is one ``EvalActor``."""

    def __init__(self, ray, actor, name: str, sources: _Sources):
        self.ray, self.actor, self.name, self.sources = ray, actor, name, sources

    def evaluate(self, request: EvalRequest) -> EvalResult:
        from ray.exceptions import ActorDiedError

        kernel = Path(request.kernel_path).read_text()
        call = self.actor.evaluate.remote(request.model_dump(mode="json"), kernel,
                                          self.sources.reference(request.reference_path))
        try:
            return EvalResult.model_validate(self.ray.get(call))
        except ActorDiedError as e:
            raise SlotDead(f"the Ray actor {self.name} died: {str(e).strip().splitlines()[0]}") from None

    @property
    def restarts(self) -> int:
        with contextlib.suppress(Exception):
            return self.ray.get(self.actor.restarts.remote(), timeout=30)
        return 0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ray.get(self.actor.close.remote(), timeout=60)
        with contextlib.suppress(Exception):
            self.ray.kill(self.actor)


def actor_count(address: str, device: str, gpus: str = "all") -> tuple[int, bool]:
    """How many actors ``--gpus`` asks of the cluster at ``address`` and whether each holds a GPU (else one CPU).
    Connects; raises GpuSelectionError when Ray is missing, unreachable, or the cluster lacks what is asked."""
    ray, _ = connect(address)
    resources = ray.cluster_resources()
    n_gpus, n_cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    per_gpu = device.startswith("cuda") or n_gpus > 0
    have = n_gpus if per_gpu else n_cpus
    if per_gpu and n_gpus < 1:
        raise GpuSelectionError(f"--ray {address}: the cluster has no GPU (its resources: {dict(resources)})")
    text = gpus.strip()
    if text == "all":
        return have, per_gpu
    if text.isdigit() and int(text) >= 1:
        if int(text) > have:
            raise GpuSelectionError(f"--gpus {gpus}: the Ray cluster has {have} {'GPU' if per_gpu else 'CPU'}(s)")
        return int(text), per_gpu
    raise GpuSelectionError(f"--gpus {gpus}: on Ray, --gpus takes all or a count N (Ray places the actors)")


def ray_slots(address: str, device: str, gpus: str = "all", evaluate_fn: str | None = None,
              start_timeout_s: float = ACTOR_START_TIMEOUT_S) -> tuple[list[RaySlot], Callable[[], None]]:
    """An actor per GPU of the cluster at ``address`` (see the module docstring) as pool slots, each named
    ``host:gpuN``, and what to call once they are closed (disconnects from Ray when tileagent connected).
    Raises GpuSelectionError as ``actor_count`` does, or when the actors do not start in time."""
    ray, _ = connect(address)
    count, per_gpu = actor_count(address, device, gpus)
    done = disconnect
    options = {"num_gpus": 1, "num_cpus": 0} if per_gpu else {"num_cpus": 1}
    remote = ray.remote(max_restarts=2, max_task_retries=1, **options)(EvalActor)
    actors = [remote.remote(device, evaluate_fn) for _ in range(count)]
    try:
        places = ray.get([a.where.remote() for a in actors], timeout=start_timeout_s)
    except Exception as e:  # noqa: BLE001 - GetTimeoutError or an actor that failed to start
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        done()
        raise GpuSelectionError(f"--ray {address}: {count} evaluation actor(s) did not start within "
                                f"{start_timeout_s:g} s: {type(e).__name__}: {str(e).strip()[:300]}") from None
    sources = _Sources(ray)
    slots = []
    for k, (actor, place) in enumerate(zip(actors, places)):
        name = f"{place['host']}:gpu{','.join(place['gpus'])}" if place["gpus"] else f"{place['host']}:cpu{k}"
        slots.append(RaySlot(ray, actor, name, sources))
    log.info("Ray: %d evaluation actor(s): %s", len(slots), ", ".join(s.name for s in slots))
    return slots, done


__all__ = ["EvalActor", "RaySlot", "actor_count", "cluster_device", "connect", "disconnect", "ray_slots"]
