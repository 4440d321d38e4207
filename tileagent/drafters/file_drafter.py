"""The file drafter: a person or another tool answers the prompts through files in the run directory.

In: a ``DraftTask`` with ``messages`` and ``run_dir``. Out: ``task.n`` ``Draft``s parsed from response files with
``tileagent.answers.parse_answer`` (``source=None`` and the problem for a malformed response).

The exchange protocol, in ``<run_dir>/exchange/`` (candidates numbered from 1, turns from 1):

1. For candidate ``k`` of turn ``t`` the drafter writes ``t{t}-c{k}.prompt.md`` (the chat messages as Markdown:
   one ``## <role>`` section per message, under a header saying where to answer) and ``t{t}-c{k}.prompt.json``
   (``{"task", "turn", "candidate", "n", "response", "messages"}``, the messages exactly as an LLM API would get
   them). Both are written to a temporary name and renamed, so a watcher never reads half a prompt.
2. The responder answers in ``t{t}-c{k}.response.md``: the whole answer, like an LLM's (exactly one ```python
   block). It must appear complete: write ``t{t}-c{k}.response.md.tmp`` and rename it to
   ``t{t}-c{k}.response.md`` (``mv`` in a shell, ``os.replace`` in Python; the rename is atomic on one file
   system). As a safety net for a responder that writes in place (an editor, ``cmd > file``), a response is read
   only once it is non-empty and its size and modification time did not change over one poll.
3. The drafter polls every ``poll_s`` seconds until every candidate's response is there, then parses them. A
   response that already exists when the turn starts (a resumed run) is used at once, without rewriting its prompt.

Guarantees: logs (``logging``, INFO) each path it waits for and hands the same line to ``notify`` when given (the
CLI prints it, so a person sees where to answer at default verbosity); never prints itself. With ``timeout_s`` set, a turn that
waits longer raises ``DrafterUnavailable`` naming the missing files when no response arrived, or, when some did,
logs a warning and returns those (the missing candidates are dropped). The response files are kept; nothing in the
exchange directory is ever deleted.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from tileagent.answers import parse_answer
from tileagent.drafters.base import Draft, DrafterUnavailable, DraftTask

logger = logging.getLogger(__name__)


def exchange_paths(run_dir: str | Path, turn: int, candidate: int) -> tuple[Path, Path]:
    """The prompt (``.prompt.md``) and response (``.response.md``) paths of candidate ``candidate`` of ``turn``."""
    stem = Path(run_dir) / "exchange" / f"t{turn}-c{candidate}"
    return stem.with_name(stem.name + ".prompt.md"), stem.with_name(stem.name + ".response.md")


def render_markdown(task: DraftTask, candidate: int, response: Path) -> str:
    """The prompt as a person reads it: a header with where to answer, then each message under ``## <role>``."""
    head = (f"# Prompt t{task.turn}-c{candidate}: task {task.task_name}, turn {task.turn}, "
            f"candidate {candidate} of {task.n}\n\n"
            f"Answer like an LLM would: exactly one ```python block holding the whole module. Write the answer to "
            f"`{response.name}.tmp` next to this file, then rename it to `{response.name}`.\n")
    parts = [head] + [f"## {m.get('role', 'user')}\n\n{str(m.get('content') or '').rstrip()}\n" for m in task.messages]
    return "\n".join(parts)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class FileDrafter:
    """Exchanges prompts and answers through ``<run_dir>/exchange/`` (see the module docstring).

    Args:
        poll_s: seconds between two looks at the exchange directory.
        timeout_s: the longest wait for one turn's responses; None waits for ever.
        clock: the monotonic clock (tests may inject one).
        sleep: the function that waits between polls.
        notify: called with one line per prompt written: where the prompt is and where to write the answer.
    """

    name = "file"

    def __init__(self, poll_s: float = 1.0, timeout_s: float | None = None, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 notify: Callable[[str], None] | None = None):
        if poll_s <= 0:
            raise ValueError(f"poll_s must be positive, not {poll_s}")
        self.poll_s, self.timeout_s, self.clock, self.sleep = poll_s, timeout_s, clock, sleep
        self.notify = notify

    def __repr__(self) -> str:
        return f"FileDrafter(poll_s={self.poll_s}, timeout_s={self.timeout_s})"

    def draft(self, task: DraftTask) -> list[Draft]:
        """Write the prompts of ``task.n`` candidates, wait for their responses, parse them."""
        if not task.run_dir:
            raise DrafterUnavailable("the file drafter needs a run directory (DraftTask.run_dir) to exchange files in")
        (Path(task.run_dir) / "exchange").mkdir(parents=True, exist_ok=True)
        pending: dict[int, Path] = {}
        for k in range(1, task.n + 1):
            prompt, response = exchange_paths(task.run_dir, task.turn, k)
            pending[k] = response
            if response.exists():
                logger.info("using the existing response %s", response)
                continue
            _write_atomic(prompt, render_markdown(task, k, response))
            meta = {"task": task.task_name, "turn": task.turn, "candidate": k, "n": task.n,
                    "response": str(response), "messages": task.messages}
            _write_atomic(prompt.with_suffix(".json"), json.dumps(meta, indent=1) + "\n")
            line = (f"turn {task.turn}, candidate {k} of {task.n}: the prompt is {prompt}; write the answer to "
                    f"{response}.tmp, then rename it to {response.name}")
            logger.info("waiting for %s: %s", response, line)
            if self.notify is not None:
                self.notify(line)
        texts = self._wait(pending)
        drafts = []
        for k, text in sorted(texts.items()):
            parsed = parse_answer(text)
            if parsed.problem:
                logger.info("%s: malformed answer (%s)", pending[k], parsed.problem)
            drafts.append(Draft(source=parsed.source, response=text, problem=parsed.problem,
                                label=f"file:{pending[k].name}"))
        return drafts

    def _wait(self, pending: dict[int, Path]) -> dict[int, str]:
        """The text of each response once complete (existing ones at once), until ``timeout_s``."""
        texts = {k: path.read_text() for k, path in pending.items() if _size(path)}
        seen: dict[int, tuple[int, int]] = {}
        start = self.clock()
        while len(texts) < len(pending):
            for k, path in pending.items():
                if k in texts:
                    continue
                stamp = _stamp(path)
                if stamp is not None and stamp[0] > 0 and seen.get(k) == stamp:
                    texts[k] = path.read_text()
                    logger.info("read the response %s", path)
                seen[k] = stamp
            if len(texts) == len(pending):
                break
            if self.timeout_s is not None and self.clock() - start >= self.timeout_s:
                missing = [str(p) for k, p in pending.items() if k not in texts]
                if not texts:
                    raise DrafterUnavailable(f"no response after {self.timeout_s:g} s: waited for "
                                             f"{', '.join(missing)}")
                logger.warning("no response after %g s for %s: going on with %d of %d candidates", self.timeout_s,
                               ", ".join(missing), len(texts), len(pending))
                break
            self.sleep(self.poll_s)
        return texts


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def _size(path: Path) -> int:
    stamp = _stamp(path)
    return stamp[0] if stamp else 0


__all__ = ["FileDrafter", "exchange_paths", "render_markdown"]
