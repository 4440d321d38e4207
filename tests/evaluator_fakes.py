"""Stand-ins that tests run inside the evaluation worker.

- ``fake_evaluate``: imports the reference and the candidate by path and compares ``ModelNew`` with ``Model`` on one
  small input per config (no guards, no seeds): the isolation layer alone (phases, partial configs, crashes, hangs).
  Like the real evaluator it marks the reference's own code (``evaluator.spec.running_reference``), so a reference
  that kills or hangs the worker is reported as the reference's.
"""

from __future__ import annotations

import importlib.util

import torch

from tileagent.evaluator.errors import Mismatch, SpecError
from tileagent.evaluator.records import ConfigResult, EvalRequest, EvalResult
from tileagent.evaluator.spec import running_reference
from tileagent.evaluator.worker import Progress, classify, expand_configs, failed


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_evaluate(request: EvalRequest, progress: Progress | None = None) -> EvalResult:
    progress = progress or Progress()
    done: list[ConfigResult] = []
    try:
        progress.phase("load")
        with running_reference(request.reference_path, "importing it"):
            reference = _load(request.reference_path, "_ref")
        candidate = _load(request.kernel_path, "_cand")
        if not hasattr(reference, "Model"):
            raise SpecError(f"{request.reference_path} defines no class Model")
        for index, config in enumerate(expand_configs([{"n": 4}], request.configs, request.overrides)):
            progress.phase("check", index, config)
            x = torch.arange(float(config.get("n", 4)))
            for _ in range(config.get("reps", 1)):  # several short reference steps in one phase
                with running_reference(request.reference_path, "Model.forward", config):
                    want = reference.Model()(x)
            got = candidate.ModelNew()(x)
            err = float((want - got).abs().max())
            result = ConfigResult(config=config, correct=err == 0, checks=1, max_abs_err=err)
            done.append(result)
            progress.config(result)
            if not result.correct:
                raise Mismatch(f"config {config}: max abs error {err}", config=config)
    except Exception as e:  # noqa: BLE001 - as evaluate does: every failure becomes a status
        return failed(classify(e, reference_path=request.reference_path), configs=done, device=request.device)
    return EvalResult(status="ok", configs=done, device=request.device)

