"""Stand-ins run inside evaluation workers by the scale-out tests (tests/test_pool.py, tests/test_ray_backend.py).

- ``traced_evaluate``: the candidate's forward against the reference's on ``torch.arange(n)`` per config (as
  ``tests.evaluator_fakes.fake_evaluate``), honouring ``keep_going`` as ``evaluator.worker.evaluate`` does, after
  sleeping ``config['sleep']`` seconds (if given), with a note on each config naming the worker process that ran it
  (``ran in pid N``), so a test can see the spread.
"""

from __future__ import annotations

import importlib.util
import os
import time

import torch

from tileagent.evaluator.errors import Mismatch
from tileagent.evaluator.records import ConfigResult, EvalRequest, EvalResult
from tileagent.evaluator.worker import Progress, classify, failed

PID_NOTE = "ran in pid "


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def traced_evaluate(request: EvalRequest, progress: Progress | None = None) -> EvalResult:
    progress = progress or Progress()
    done: list[ConfigResult] = []
    first = None
    try:
        progress.phase("load")
        reference, candidate = _load(request.reference_path, "_ref"), _load(request.kernel_path, "_cand")
        for index, config in enumerate(request.configs or [{"n": 4}]):
            progress.phase("check", index, config)
            time.sleep(float(config.get("sleep", 0)))
            x = torch.arange(float(config.get("n", 4)))
            err = float((reference.Model()(x) - candidate.ModelNew()(x)).abs().max())
            result = ConfigResult(config=config, correct=err == 0, checks=1, max_abs_err=err,
                                  notes=[f"{PID_NOTE}{os.getpid()}"])
            done.append(result)
            progress.config(result)
            if not result.correct:
                first = first or Mismatch(f"config {config}: max abs error {err}", config=config)
                if not request.keep_going:
                    break
        if first is not None:
            raise first
    except Exception as e:  # noqa: BLE001 - as evaluate does: every failure becomes a status
        return failed(classify(e, "cpu", request.kernel_path), configs=done, device=request.device)
    return EvalResult(status="ok", configs=done, device=request.device)


def without_pids(result: EvalResult) -> dict:
    """``result`` as a dict without the pid notes and the device (what differs between pools)."""
    data = result.model_dump(mode="json")
    data.pop("device")
    for c in data["configs"]:
        c["notes"] = [n for n in c["notes"] if not n.startswith(PID_NOTE)]
    return data


def pids(result: EvalResult) -> list[int]:
    return [int(n[len(PID_NOTE):]) for c in result.configs for n in c.notes if n.startswith(PID_NOTE)]


def gpu_evaluate(request: EvalRequest, progress: Progress | None = None) -> EvalResult:
    """Touches no GPU: each config sleeps ``config['sleep']`` s and notes the worker's pid, the GPU it was given
    (``CUDA_VISIBLE_DEVICES``, as the pool set it), its device and the interval it ran in (``ran T0 T1``)."""
    progress = progress or Progress()
    progress.phase("load")
    done = []
    for index, config in enumerate(request.configs or []):
        progress.phase("check", index, config)
        start = time.time()
        time.sleep(float(config.get("sleep", 0)))
        done.append(ConfigResult(config=config, correct=True, notes=[
            f"{PID_NOTE}{os.getpid()}", f"gpu {os.environ.get('CUDA_VISIBLE_DEVICES')}", f"device {request.device}",
            f"ran {start} {time.time()}"]))
        progress.config(done[-1])
    return EvalResult(status="ok", configs=done, device=request.device)
