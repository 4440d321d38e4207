"""The run directory: every prompt, response, candidate and evaluation of a run, persisted as it happens.

In: events and files from the agent loop (``tileagent.loop``). Out: a directory that a person can read and that
``--resume`` replays. Layout::

    RUN_DIR/
      run.json                      format version, the options the run started with (what --resume reuses)
      events.jsonl                  append-only log, one JSON object per line (see EVENTS)
      attempts/t1-c0/prompt.json    the DraftTask of the turn (messages, history), once per turn's candidates
      attempts/t1-c0/response.md    the drafter's whole answer
      attempts/t1-c0/candidate.py   the candidate module as evaluated
      attempts/t1-c0/eval.json      the EvalResult
      attempts/t1-c0/feedback.md    what the drafter is told about it
      attempts/t1-c0/tune/<variant>.py, <variant>.<phase>.json     the autotuner's variants and their evaluations
      best/<config>.py              the fastest verified kernel per config (tunables assigned)
      REPORT.md, report.json        written at the end (tileagent.report)

Guarantees:

- Files are written atomically (a temporary file in the same folder, fsync, ``os.replace``): a reader sees the old
  content or the new, never a part.
- ``append(event)`` (thread-safe) writes one line and flushes and fsyncs it before returning: a SIGKILL after
  ``append`` returns loses nothing that was appended. A line torn by a kill (the last one, without its newline) is
  ignored by ``events()`` and cut by the next ``append``.
- Every event carries ``event`` (its kind), ``t`` (UNIX time) and the fields listed in EVENTS; run.json is a
  ``RunFile`` and each event an ``Event`` (pydantic models; JSON Schemas: ``tileagent schema run|event``,
  docs/schemas/).
- The log is not trusted: ``events()`` skips lines that are not events (with a warning), and the loop trusts a
  recorded evaluation only for the kernel text whose SHA-256 it names and re-checks replayed best kernels before
  anything is exported or archived (``tileagent.loop``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger("tileagent.runstore")

FORMAT_VERSION = 1
EVENTS = {
    "run_started": "options (the run's settings), configs (the configs evaluated)",
    "run_resumed": "reference (only when --resume was given a REFERENCE other than run.json's: the path used "
                   "from then on, e.g. a run moved from another machine)",
    "drafted": "turn, drafts (list of Draft dicts with attempt_id)",
    "drafter_failed": "turn, message (DrafterUnavailable or the drafter's exception)",
    "evaluated": "attempt_id, source_sha256 (of the candidate's text), result (EvalResult dict; null for a malformed "
                 "answer or a covered module), covered_by (the attempt whose autotuning covered the module, which was "
                 "then not evaluated; null otherwise), feedback (text)",
    "variant_evaluated": "attempt_id, variant, tunables, phase ('screen' or 'full'), configs_key, source_sha256 (of "
                         "the variant's text), result",
    "reverified": "source_sha256, attempt_ids, configs, result: a replayed best kernel checked again before export",
    "tuned": "attempt_id, winners ({config key: {variant, tunables, time_ms}})",
    "reference_failed": "attempt_id, message, failure: the reference (not the candidate) failed while the attempt was "
                        "evaluated; the run stopped there and the attempt is not counted (--resume evaluates it again)",
    "finished": "outcome ('target_met', 'correct_untimed', 'correct_not_faster', 'partial', 'no_correct', "
                "'not_drafted'), reason, turns, tokens",
}


class RunFile(BaseModel):
    """run.json: what a run started with (``--resume`` reads it back)."""

    format_version: int = Field(FORMAT_VERSION, description="the run directory's format version")
    options: dict = Field(description="{command: 'generate'|'batch', loop: LoopOptions as JSON, drafter: the "
                                      "drafter's provider and options (never a key)}")


class Event(BaseModel):
    """One line of events.jsonl: ``event`` (its kind), ``t`` (UNIX time) and the kind's fields (EVENTS lists the
    known kinds and their fields; readers ignore fields they do not know)."""

    model_config = ConfigDict(extra="allow")

    event: str = Field(pattern=r"^[a-z][a-z_]*$", description="the kind: " + "; ".join(
        f"{k}: {v}" for k, v in EVENTS.items()), examples=list(EVENTS))
    t: float = Field(description="UNIX time, seconds")


class RunStoreError(Exception):
    """The run directory cannot be used (the message says which file and why)."""


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace`` (fsync'd before the rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def config_key(config: dict) -> str:
    """A file-name-safe key of a config: ``M=37,C=96`` (keys in the config's order)."""
    return ",".join(f"{k}={v}" for k, v in config.items()) or "default"


def source_digest(source: str | None) -> str:
    """The SHA-256 (hex) of a kernel's text, as recorded with its evaluations; ``"none"`` for no text."""
    return "none" if source is None else hashlib.sha256(source.encode()).hexdigest()


def slug(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9_.,=-]`` replaced by ``_`` (for file names)."""
    return re.sub(r"[^A-Za-z0-9_.,=-]", "_", text)


class RunStore:
    """One run directory. ``RunStore.create(dir, options)`` starts a run; ``RunStore.open(dir)`` resumes one."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.events_path = self.root / "events.jsonl"
        self._append_lock = threading.Lock()  # appends from several threads (parallel autotuning) stay whole lines

    # -- creating and opening -------------------------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, options: dict) -> RunStore:
        """A new run in ``root`` (created; it must not already hold a run)."""
        root = Path(root)
        if (root / "run.json").exists():
            raise RunStoreError(f"{root} already holds a run; continue it with --resume {root}, or pick another --out")
        root.mkdir(parents=True, exist_ok=True)
        store = cls(root)
        data = json.loads(json.dumps({"format_version": FORMAT_VERSION, "options": options}, default=str))
        write_atomic(root / "run.json", RunFile.model_validate(data).model_dump_json(indent=2))
        return store

    @classmethod
    def open(cls, root: Path) -> RunStore:
        """The run in ``root``, to resume it."""
        root = Path(root)
        meta = root / "run.json"
        if not meta.is_file():
            raise RunStoreError(f"{root} is not a run directory (no run.json); start a run with tileagent generate")
        try:
            data = json.loads(meta.read_text())
        except ValueError as e:
            raise RunStoreError(f"{meta}: not valid JSON ({e})") from None
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            version = data.get("format_version") if isinstance(data, dict) else None
            raise RunStoreError(f"{meta}: run format version {version!r}; this tileagent reads version "
                                f"{FORMAT_VERSION}")
        try:
            RunFile.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            raise RunStoreError(f"{meta}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        return cls(root)

    @property
    def options(self) -> dict:
        """The options the run started with."""
        return json.loads((self.root / "run.json").read_text())["options"]

    # -- the event log ----------------------------------------------------------------------------------------------

    def append(self, event: str, **fields) -> dict:
        """Append one event (flushed and fsync'd before returning); returns it."""
        record = {"event": event, "t": round(time.time(), 3), **fields}
        Event.model_validate({"event": event, "t": record["t"]})  # the kind's spelling; fields are free-form JSON
        line = json.dumps(record, default=str)
        with self._append_lock:
            self._drop_torn_tail()
            with open(self.events_path, "a") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
        return record

    def _drop_torn_tail(self) -> None:
        """Cut a last line left without its newline by a kill, so the next event starts on a line of its own."""
        if not self.events_path.exists():
            return
        with open(self.events_path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            keep = data.rfind(b"\n") + 1
            log.warning("%s: dropping a torn last line (%d bytes) left by an interrupted write", self.events_path,
                        size - keep)
            f.truncate(keep)

    def events(self) -> list[dict]:
        """Every complete event, oldest first. A last line without its newline was torn by a kill and is ignored
        (``append`` cuts it); any other line that is not a JSON object with an ``event`` string is skipped with a
        warning naming the file and line (a damaged or hand-edited log never stops a resume)."""
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_bytes().split(b"\n")
        if lines[-1]:
            log.warning("%s:%d: ignoring a torn last line", self.events_path, len(lines))
        out = []
        for number, raw in enumerate(lines[:-1], 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("event"), str):
                log.warning("%s:%d: skipping a line that is not an event (a JSON object with 'event'): %r",
                            self.events_path, number, raw[:80])
                continue
            out.append(record)
        return out

    # -- files ------------------------------------------------------------------------------------------------------

    def write(self, relative: str | Path, text: str) -> Path:
        """Write ``text`` to ``RUN_DIR/relative`` atomically; returns the path."""
        path = self.root / relative
        write_atomic(path, text)
        return path

    def write_json(self, relative: str | Path, data) -> Path:
        return self.write(relative, json.dumps(data, indent=2, default=str) + "\n")


__all__ = ["EVENTS", "FORMAT_VERSION", "Event", "RunFile", "RunStore", "RunStoreError", "config_key", "slug",
           "source_digest", "write_atomic"]
