"""A scripted drafter: answers fixed in advance, for tests and demos (mini-swe-agent's DeterministicModel).

In: a list of turns, each a list of candidate sources (None: a malformed answer), and an optional delay per draft
call. ``ScriptedDrafter.from_file(path)`` reads ``{"turns": [[src, ...], ...], "delay_s": 0.5, "tokens": 100}``
(JSON). Out: ``Draft``s for turn t from ``turns[t - 1]`` (the last turn's answers repeat after the script ends).
Guarantees: deterministic; ``task.n`` caps the answers of a turn; each draft reports ``tokens`` completion tokens.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tileagent.drafters.base import Draft, DraftTask


class ScriptedDrafter:
    name = "scripted"

    def __init__(self, turns: list[list[str | None]], delay_s: float = 0.0, tokens: int = 0):
        if not turns or not all(turns):
            raise ValueError("a scripted drafter needs at least one turn, each with at least one answer")
        self.turns, self.delay_s, self.tokens = turns, delay_s, tokens
        self.calls: list[DraftTask] = []

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedDrafter:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"scripted drafter: cannot read {path}: {e}") from None
        return cls(data["turns"], float(data.get("delay_s", 0.0)), int(data.get("tokens", 0)))

    def draft(self, task: DraftTask) -> list[Draft]:
        self.calls.append(task)
        if self.delay_s:
            time.sleep(self.delay_s)
        answers = self.turns[min(task.turn, len(self.turns)) - 1][: max(1, task.n)]
        return [Draft(source=src, response=f"```python\n{src}```" if src else "(no code)",
                      problem=None if src else "no python code block", label=f"script t{task.turn} #{k}",
                      completion_tokens=self.tokens) for k, src in enumerate(answers)]
