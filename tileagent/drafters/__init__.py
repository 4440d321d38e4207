"""Drafters: the built-in template drafter, an OpenAI-compatible LLM client, and a file exchange (see base.py).

In: a provider name and its options. Out: a ``Drafter`` from ``make_drafter(provider, **options)``.
Guarantees: drafters are imported lazily (the LLM client's dependencies load only when it is used); an unknown
provider raises ``ValueError`` listing the known ones; options a drafter does not take are dropped (the CLI passes
every option it has), except that a missing required one (``model`` for openai) raises ``ValueError``.
Providers: ``builtin`` (offline: ``BuiltinDrafter(seed)``), ``openai`` (``OpenAIDrafter(model, base_url, api_key,
...)``), ``file`` (``FileDrafter(poll_s, timeout_s)``), and ``scripted:<file.json>`` (``ScriptedDrafter``, for tests
and demos: answers read from a file).
"""

from __future__ import annotations

import importlib
import inspect

from tileagent.drafters.base import AttemptSummary, Draft, Drafter, DrafterUnavailable, DraftTask

PROVIDERS = {
    "builtin": "tileagent.drafters.builtin:BuiltinDrafter",
    "openai": "tileagent.drafters.openai_drafter:OpenAIDrafter",
    "file": "tileagent.drafters.file_drafter:FileDrafter",
}


def make_drafter(provider: str, **options) -> Drafter:
    """The drafter named ``provider``, built with the options its constructor takes.

    Raises:
        ValueError: an unknown provider, or ``openai`` without a model.
    """
    if provider.startswith("scripted:"):
        from tileagent.drafters.scripted import ScriptedDrafter

        return ScriptedDrafter.from_file(provider.partition(":")[2])
    if provider not in PROVIDERS:
        raise ValueError(f"unknown drafter provider {provider!r}; known: {', '.join(PROVIDERS)}, scripted:<file>")
    if provider == "openai" and not options.get("model"):
        raise ValueError("--provider openai needs --model (the model name the endpoint serves)")
    module, _, name = PROVIDERS[provider].partition(":")
    cls = getattr(importlib.import_module(module), name)
    params = inspect.signature(cls).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in options.items() if v is not None and (takes_all or k in params)}
    return cls(**kwargs)


__all__ = ["PROVIDERS", "AttemptSummary", "Draft", "DraftTask", "Drafter", "DrafterUnavailable", "make_drafter"]
