"""What every drafter takes and gives: the boundary between the agent loop and whoever writes kernels.

In: a ``DraftTask`` built by the loop each turn (the reference, the configs, the chat messages rendered from
``prompts/``, and the history of earlier attempts with their feedback). Out: ``Draft``s, one per candidate asked for.
Guarantees: a drafter never raises for a bad answer of its own source (an LLM's answer without a code block, a
truncated one): it returns a ``Draft`` with ``source=None`` and ``problem`` saying what was wrong, which the loop
feeds back with ``feedback.malformed_answer``. It raises ``DrafterUnavailable`` when it cannot draft this task at all
(the built-in drafter outside its op families, an endpoint that keeps failing after its retries).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field


class AttemptSummary(BaseModel):
    """One earlier candidate as the drafter sees it."""

    attempt_id: str = Field(description="'t{turn}-c{index}', unique in the run")
    turn: int
    label: str = Field("", description="the drafter's own label of the candidate (template and schedule, model name)")
    source: str | None = Field(None, description="the candidate module's text (None: the answer was malformed)")
    status: str = Field(description="evaluator status ('ok', 'compile_error', 'mismatch', ...) or 'malformed'")
    feedback: str = Field("", description="the feedback text rendered for this attempt (prompts/feedback.md)")
    correct: bool = False
    speedup_eager: float | None = Field(None, description="worst speedup over eager across configs, when timed")
    speedup_compiled: float | None = Field(None, description="worst speedup over torch.compile, when timed")
    gains: str = Field("", description="for the best kernel: its speedups over the kernels it replaced, per config, "
                       "and its diff against the one it replaced most (timed runs)")


class DraftTask(BaseModel):
    """What the loop asks of a drafter in one turn."""

    task_name: str = Field(description="the reference's file stem, e.g. 'rmsnorm_silu'")
    reference_path: str
    reference_source: str
    configs: list[dict] = Field(description="the configs the candidate must serve")
    turn: int = Field(description="1 for the first turn")
    n: int = Field(1, description="candidates wanted this turn")
    messages: list[dict] = Field(default_factory=list, description="chat messages (role, content) for LLM drafters")
    history: list[AttemptSummary] = Field(default_factory=list, description="earlier attempts, oldest first")
    device: str = Field("cpu", description="where candidates will run: 'cpu' or 'cuda'")
    run_dir: str = Field("", description="the run directory (the file drafter exchanges prompts and answers there)")
    seed: int = 0


class Draft(BaseModel):
    """One candidate as a drafter gives it."""

    source: str | None = Field(description="the candidate module (class ModelNew), or None for a malformed answer")
    response: str = Field("", description="the drafter's whole answer (an LLM's text, a template's description)")
    problem: str | None = Field(None, description="what was wrong with a malformed answer, e.g. 'no python code block'")
    label: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class DrafterUnavailable(Exception):
    """The drafter cannot draft this task (the message says why and what would help)."""


@runtime_checkable
class Drafter(Protocol):
    """Anything with a ``name`` and ``draft(task) -> list[Draft]`` (``len`` at most ``task.n``, at least 1)."""

    name: str

    def draft(self, task: DraftTask) -> list[Draft]: ...
