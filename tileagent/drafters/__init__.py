"""Drafters: the built-in template drafter, an OpenAI-compatible LLM client, and a file exchange (see base.py)."""

from tileagent.drafters.base import AttemptSummary, Draft, Drafter, DrafterUnavailable, DraftTask

__all__ = ["AttemptSummary", "Draft", "DraftTask", "Drafter", "DrafterUnavailable"]
