"""Candidates: load a module that defines ``class ModelNew``, and build it next to the reference.

In: the path of the candidate's Python file (and a ``Spec`` and config to build models).
Out: ``Candidate`` (its source, module and ModelNew class); ``build_models`` gives (Model, ModelNew) for a config.
Guarantees: the static guard (``evaluator.guards.check_source``) runs before any of the candidate's code; every
failure is a ``CandidateError``: ``GuardViolation`` (static rules), ``CompileFailed`` (a ``CompileError`` of our
compiler, with ``details['diagnostic']`` its ``to_dict()``), ``LoadFailed`` (anything else while loading or
constructing); Model and ModelNew are constructed under the same seed, then the reference's weights are copied into
ModelNew wherever a name and shape match.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from tileagent.compiler.diagnostics import CompileError
from tileagent.evaluator.errors import CompileFailed, LoadFailed
from tileagent.evaluator.guards import check_source
from tileagent.evaluator.spec import cast_floating, exec_fresh_module


@dataclass
class Candidate:
    """A loaded candidate module."""

    path: Path
    source: str
    module: ModuleType
    model_cls: type


def compile_failed(err: CompileError, where: str) -> CompileFailed:
    """A CompileError of our compiler as the evaluator reports it."""
    return CompileFailed(f"{where}: the kernel did not compile: {err}", diagnostic=err.to_dict())


def candidate_line(error: BaseException, path: Path) -> int | None:
    """The last line of the candidate's file in ``error``'s traceback, if any."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return line


def read_candidate(path, static_checks: bool = True) -> str:
    """The candidate's source, parsed and (with ``static_checks``) put through the static rules; nothing of it runs.

    Raises:
        LoadFailed: unreadable file, syntax error (with its line).
        GuardViolation: a static rule is broken.
    """
    path = Path(path)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LoadFailed(f"{path}: cannot read the candidate ({getattr(e, 'strerror', None) or e})") from None
    try:
        if static_checks:
            check_source(source, str(path))
        else:
            compile(source, str(path), "exec")
    except SyntaxError as e:
        raise LoadFailed(f"{path.name}:{e.lineno}: syntax error: {e.msg}", line=e.lineno) from None
    return source


def load_candidate(path, static_checks: bool = True) -> Candidate:
    """Read, statically check and import the candidate at ``path``.

    Raises:
        LoadFailed: unreadable file, syntax error (with its line), an exception on import, no ModelNew class.
        GuardViolation: a static rule is broken (``static_checks``).
        CompileFailed: a kernel was compiled at import time and failed.
    """
    path = Path(path)
    source = read_candidate(path, static_checks)
    try:
        module = exec_fresh_module(path, "_tileagent_candidate_")
    except CompileError as e:
        raise compile_failed(e, path.name) from e
    except Exception as e:
        line = candidate_line(e, path)
        at = f":{line}" if line else ""
        raise LoadFailed(f"{path.name}{at}: importing the candidate raised {type(e).__name__}: {e}", line=line) from e
    cls = getattr(module, "ModelNew", None)
    if cls is None:
        raise LoadFailed(f"{path.name} defines no class ModelNew (the candidate format: class ModelNew(nn.Module) "
                         f"with Model's constructor and forward signature)")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise LoadFailed(f"{path.name}: ModelNew is a {type(cls).__name__}, not a torch.nn.Module subclass")
    return Candidate(path, source, module, cls)


def construct(candidate: Candidate, init: list, config: dict, device="cpu", seed: int = 0, dtype=None) -> nn.Module:
    """ModelNew(*init) built under ``seed`` (global RNG state restored), moved to ``device`` and, when ``dtype`` is
    given, its floating weights cast to it.

    Raises:
        CompileFailed / LoadFailed: ModelNew(*init) raised.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            new = candidate.model_cls(*init)
        except CompileError as e:
            raise compile_failed(e, candidate.path.name) from e
        except Exception as e:
            line = candidate_line(e, candidate.path)
            at = f" (line {line})" if line else ""
            raise LoadFailed(f"ModelNew(*get_init_inputs()) raised {type(e).__name__}: {e}{at}; ModelNew takes "
                             f"Model's constructor arguments {init!r}", line=line, config=config) from e
    new = new.to(device)
    if dtype is not None:
        new = cast_floating(new, dtype)
    return new


def build_models(spec, candidate: Candidate, config: dict, device="cpu", seed: int = 0):
    """(Model, ModelNew) for ``config`` on ``device``, in this process, constructed under the same seed;
    Model's state_dict entries are copied into ModelNew where the name and shape match. ModelNew is cast to DTYPES'
    dtype like Model when the spec gives one dtype name. (The evaluator itself builds ModelNew in the candidate's own
    process, ``evaluator.sandbox``, the same way.)

    Raises:
        SpecError: the reference cannot be built.
        CompileFailed / LoadFailed: ModelNew(*init_inputs) raised.
    """
    model = spec.make_model(config, device, seed)
    init = spec.init_inputs(config)
    new = construct(candidate, init, config, device, seed, spec.dtypes if isinstance(spec.dtypes, torch.dtype)
                    else None)
    own = new.state_dict()
    with torch.no_grad():
        for key, value in model.state_dict().items():
            if key in own and own[key].shape == value.shape:
                own[key].copy_(value)
    return model, new.eval()


__all__ = ["Candidate", "build_models", "construct", "read_candidate", "candidate_line", "compile_failed", "load_candidate"]
