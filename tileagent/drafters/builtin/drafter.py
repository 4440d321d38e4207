"""``BuiltinDrafter``: the offline drafter. It recognizes the reference's op family from its traced graph and
instantiates the family's DSL template with a schedule variant.

In: a ``DraftTask`` (tileagent.drafters.base). Out: ``task.n`` ``Draft``s (fewer when fewer variants are left), each a
complete candidate module in the evaluator's format; ``Draft.label`` is ``builtin/<template>:<variant>``,
``Draft.response`` says what was recognized and which schedule was chosen.

Turns: turn 1 proposes the first variants in the template's order (the most likely schedules first); later turns skip
every variant already in ``task.history`` (by label: a variant that failed to compile or was wrong is never repeated,
and one that passed needs no second run) and propose the next ones. When none are left, or the reference is outside
the built-in families, ``draft`` raises ``DrafterUnavailable`` with a plain message; so it does when recognizing or
rendering fails inside the drafter (a bug of ours: the message names the error, the log has its traceback), so the
run ends as "no drafter could draft it" rather than with a traceback.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

from tileagent.drafters.base import Draft, DrafterUnavailable, DraftTask
from tileagent.drafters.builtin.recognize import FAMILIES, FamilyMatch, explain
from tileagent.drafters.builtin.templates import attention, elementwise, fusion, gemm, reduction, rows

TEMPLATES: dict[str, ModuleType] = {"rmsnorm": rows, "layernorm": rows, "softmax": rows, "elementwise": elementwise,
                                    "row_reduction": reduction, "gemm_epilogue": gemm, "attention": attention,
                                    "fusion": fusion}
LLM_HINT = ("an LLM endpoint would be needed for it: tileagent generate REFERENCE --provider openai --model MODEL "
            "--base-url URL, or answer the prompts yourself (or with another tool) through files: tileagent "
            "generate REFERENCE --provider file")

log = logging.getLogger("tileagent.drafters.builtin")


def outside_message(task_name: str, reason: str) -> str:
    """The DrafterUnavailable message for a reference outside the built-in families."""
    return (f"{task_name}: the op is outside the built-in drafter's families ({', '.join(FAMILIES)}): {reason}. "
            f"{LLM_HINT[0].upper()}{LLM_HINT[1:]}.")


def variants(match: FamilyMatch) -> list[tuple[str, dict]]:
    """The family template's schedule variants, most likely first: (label, knobs)."""
    return [(f"builtin/{match.family}:{name}", knobs) for name, knobs in TEMPLATES[match.family].VARIANTS]


def render(match: FamilyMatch, knobs: dict) -> str:
    """The candidate module text for ``match`` with the variant's knobs."""
    return TEMPLATES[match.family].render(match, knobs)


class BuiltinDrafter:
    """Templates per op family with a schedule search; no network, no model."""

    name = "builtin"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._matches: dict[tuple, tuple[FamilyMatch | None, str]] = {}

    def recognize(self, reference_path) -> tuple[FamilyMatch | None, str]:
        """``recognize.explain`` cached per file and modification time."""
        path = os.fspath(reference_path)
        try:
            key = (os.path.abspath(path), os.stat(path).st_mtime_ns)
        except OSError:
            key = (path, None)
        if key not in self._matches:
            self._matches[key] = explain(path)
        return self._matches[key]

    def draft(self, task: DraftTask) -> list[Draft]:
        """Up to ``task.n`` candidates for ``task`` (see the module docstring for the turn policy).

        Raises:
            DrafterUnavailable: the reference is outside the built-in families, every variant has been tried, or the
                drafter itself failed on it.
        """
        try:
            return self._draft(task)
        except DrafterUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - our bug: the run ends as undraftable, with the traceback logged
            log.exception("the built-in drafter failed on %s", task.reference_path)
            raise DrafterUnavailable(
                f"{task.task_name}: the built-in drafter failed on this reference with an internal error "
                f"({type(e).__name__}: {e}; the log has the traceback): a bug in TileAgent's drafter, not in the "
                f"reference. {LLM_HINT[0].upper()}{LLM_HINT[1:]}.") from e

    def _draft(self, task: DraftTask) -> list[Draft]:
        match, reason = self.recognize(task.reference_path)
        if match is None:
            raise DrafterUnavailable(outside_message(task.task_name, reason))
        tried = {h.label: h.status for h in task.history}
        options = variants(match)
        left = [(label, knobs) for label, knobs in options if label not in tried]
        if not left:
            failed = sorted({s for s in tried.values() if s != "ok"})
            raise DrafterUnavailable(
                f"{task.task_name}: all {len(options)} schedule variants of the built-in {match.family} template have "
                f"been tried{' (outcomes: ' + ', '.join(failed) + ')' if failed else ''}; the built-in drafter has "
                f"nothing new to propose. To go further, {LLM_HINT}.")
        drafts = []
        for label, knobs in left[:max(1, task.n)]:
            source = render(match, knobs)
            knob_text = ", ".join(f"{k}={v}" for k, v in knobs.items())
            response = (f"Recognized the {match.family} family: {match.summary} ({match.dtype} in, {match.out_dtype} "
                        f"out). Template {TEMPLATES[match.family].__name__.rsplit('.', 1)[-1]} with schedule "
                        f"{label.split(':', 1)[1]} ({knob_text}).")
            drafts.append(Draft(source=source, response=response, label=label))
        return drafts
