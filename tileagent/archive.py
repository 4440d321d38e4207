"""The archive of verified kernels: candidates that passed the full check, kept on disk across runs.

In: verified kernels from the loop (``put``). Out: entries by op family (``find``), for prompt examples, and by op
(``find(..., op=...)``) for reuse across configs (``tileagent batch`` and ``generate`` try archived kernels of the
same op first: the same reference code, whatever its configs; ``op_digest``).
Where: ``$TILEAGENT_ARCHIVE``, else ``archive`` in ``$TILEAGENT_CACHE_DIR`` (default ``~/.cache/tileagent``).
Layout: ``<family>/<dtype>/<arch>/<op>-<config>/``
(``<config>/`` for entries from before the op was recorded) holding ``candidate.py`` (the module, tunables assigned)
and ``entry.json`` (an ``ArchiveEntry``).
Guarantees: files are written atomically; a later kernel for the same key replaces an earlier one only when it is
faster (or when neither was timed), decided under a ``filelock`` lock per key so that concurrent runs cannot race;
unreadable entries are skipped with a logged warning, never an error.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
from pathlib import Path

from filelock import FileLock, Timeout
from pydantic import BaseModel, Field

from tileagent.compiler import python_ast
from tileagent.runstore import config_key, slug, write_atomic

log = logging.getLogger("tileagent.archive")


class ArchiveEntry(BaseModel):
    """One verified kernel."""

    family: str = Field(description="op family (tileagent.drafters.builtin.recognize_family), else the task's stem")
    dtype: str = Field(description="dtype of the reference's first floating input, e.g. 'float16'")
    arch: str = Field(description="'sm_90a', 'sm_80', ... or 'cpu' (checked in the interpreter only)")
    config: dict
    task: str = Field(description="the reference's file stem")
    op: str = Field("", description="op_digest of the reference: its code without its configs ('' before it was kept)")
    tunables: dict = Field(default_factory=dict, description="the knob values assigned in the source")
    time_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compiled: float | None = None
    run_dir: str = ""
    attempt_id: str = ""
    source: str = Field("", description="the candidate module (read from candidate.py)")


def default_root() -> Path:
    """``$TILEAGENT_ARCHIVE``, else ``$TILEAGENT_CACHE_DIR/archive`` (played LLM 48: a cache directory set apart for
    a session still shared the home directory's archive), else ``~/.cache/tileagent/archive``."""
    env, cache = os.environ.get("TILEAGENT_ARCHIVE"), os.environ.get("TILEAGENT_CACHE_DIR")
    return Path(env) if env else Path(cache).expanduser() / "archive" if cache else \
        Path.home() / ".cache" / "tileagent" / "archive"


class Archive:
    """The archive at ``root`` (default: ``default_root()``)."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else default_root()

    def _dir(self, entry: ArchiveEntry) -> Path:
        key = f"{entry.op[:12]}-{config_key(entry.config)}" if entry.op else config_key(entry.config)
        return self.root / slug(entry.family) / slug(entry.dtype) / slug(entry.arch) / slug(key)

    def put(self, entry: ArchiveEntry, lock_timeout_s: float = 60.0) -> bool:
        """Store ``entry`` unless a faster kernel is already stored under its key; True when stored. The read, the
        comparison and the replacement run under a file lock on the key (``<key>.lock`` beside its folder), so that
        concurrent runs never replace a faster kernel with a slower one or mix two entries' files."""
        where = self._dir(entry)
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(where.parent / f".{where.name}.lock", timeout=lock_timeout_s):
                old = self._read(where)
                if old is not None and old.time_ms is not None and (entry.time_ms is None
                                                                    or entry.time_ms >= old.time_ms):
                    return False
                write_atomic(where / "candidate.py", entry.source)
                write_atomic(where / "entry.json", entry.model_copy(update={"source": ""}).model_dump_json(indent=2))
        except (OSError, Timeout) as e:
            log.warning("archive: cannot write %s: %s", where, e)
            return False
        return True

    def _read(self, where: Path) -> ArchiveEntry | None:
        try:
            entry = ArchiveEntry.model_validate(json.loads((where / "entry.json").read_text()))
            return entry.model_copy(update={"source": (where / "candidate.py").read_text()})
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("archive: skipping unreadable entry %s: %s", where, e)
            return None

    def find(self, family: str, dtype: str | None = None, arch: str | None = None,
             op: str | None = None) -> list[ArchiveEntry]:
        """Entries of ``family`` (optionally of one dtype, arch and op), fastest first, untimed last."""
        base = self.root / slug(family)
        if not base.is_dir():
            return []
        out = []
        for entry_file in sorted(base.glob("*/*/*/entry.json")):
            entry = self._read(entry_file.parent)
            if entry is None or (dtype and entry.dtype != dtype) or (arch and entry.arch != arch) or \
                    (op is not None and entry.op != op):
                continue
            out.append(entry)
        return sorted(out, key=lambda e: (e.time_ms is None, e.time_ms or 0.0))


CONFIG_NAMES = ("CONFIGS", "SMALL_CONFIG")


def op_digest(reference_source: str) -> str:
    """A digest of a reference's code less its configs (module-level ``CONFIGS`` / ``SMALL_CONFIG`` assignments),
    comments and layout: the same op under a grid that grew keeps its digest; two ops of one family (ELU and
    LeakyReLU are both ``elementwise``) do not share one. A source that does not parse is digested as it is."""
    try:
        tree = python_ast.parse(reference_source)
    except SyntaxError:
        text = reference_source
    else:
        tree.body = [node for node in tree.body if not (
            isinstance(node, (ast.Assign, ast.AnnAssign)) and
            any(isinstance(t, ast.Name) and t.id in CONFIG_NAMES
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])))]
        text = ast.dump(tree)
    return hashlib.sha256(text.encode()).hexdigest()


def reference_dtype(spec, config: dict) -> str:
    """The dtype name of the first floating input of ``spec`` at ``config`` ('float32' when none is floating); the
    inputs are made on the meta device (no values drawn), on the CPU for a get_inputs that needs values."""
    try:
        inputs = spec.shaped_inputs(config, "meta")
    except Exception:  # noqa: BLE001 - e.g. a get_inputs that reads a value (.item()) of what it drew
        inputs = spec.shaped_inputs(config, "cpu")
    for t in inputs:
        if t.is_floating_point():
            return str(t.dtype).removeprefix("torch.")
    return "float32"


def device_arch(device: str) -> str:
    """'cpu', or the CUDA device's arch as the compiler names it (``compiler.runtime.nvrtc.device_arch``)."""
    if not device.startswith("cuda"):
        return "cpu"
    from tileagent.compiler.runtime.nvrtc import device_arch as nvrtc_arch

    return nvrtc_arch(device)


__all__ = ["Archive", "ArchiveEntry", "default_root", "device_arch", "op_digest", "reference_dtype"]
