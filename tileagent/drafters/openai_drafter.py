"""The LLM drafter: chat completions from any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp server).

In: a ``DraftTask`` whose ``messages`` the loop rendered from ``prompts/``; the model, base URL and key.
Out: ``task.n`` ``Draft``s (fewer only if the endpoint failed part-way, see below), each with the module extracted by
``tileagent.answers.parse_answer`` or ``source=None`` and the problem, its tokens and cost; running totals on
``drafter.usage``.
Guarantees:

- Candidates: the drafter asks for all ``n`` in one request and, when the server returns fewer choices (Ollama and
  llama.cpp ignore ``n``) or rejects ``n > 1`` with a 400, asks for the rest one request at a time; it remembers
  the answer, so later turns go straight to single requests.
- Retries through ``tenacity`` (the client's own are off, so that the waits below hold and are counted): on 408, 409,
  429, 5xx, connection errors and timeouts (except a refused
  connection to an endpoint on this machine, which raises ``DrafterUnavailable`` at once) it waits
  ``backoff_s * 2**attempt`` (capped at ``max_backoff_s``, times a jitter in [0.5, 1]) or the server's
  ``Retry-After`` / ``retry-after-ms`` when given (honoured up to ``max_retry_after_s``), at most ``max_retries``
  times per request. The sleep function is injectable (tests pass a no-op).
- Errors that retrying cannot fix (400, 401, 403, 404, 422 ...) raise ``DrafterUnavailable`` at once, with the
  server's message and what to check (the model name, the key, the base URL). So does a request that still fails
  after its retries when no candidate of the turn has been drafted yet; once one has, the drafter logs a warning and
  returns the drafts it has (the loop needs at least one, and those tokens are paid for).
- A malformed answer (no code block, several, cut off by the token limit, not Python) never raises: it is a
  ``Draft(source=None, problem=...)``.
- Tokens come from the response's ``usage``; when a server sends none they are estimated as characters / 4 and
  counted in ``usage.estimated_requests``. Cost is ``(prompt * in + completion * out) / 1e6`` with
  ``price_per_mtok=(in, out)`` in USD per million tokens, 0 without a price. With several choices in one response the
  first draft carries the prompt tokens and the completion tokens are shared by length, so the drafts add up to the
  response's usage.
- One ``openai.OpenAI`` client per ``draft()`` call, closed before it returns (no socket outlives a turn).
- Logs through ``logging`` (``tileagent.drafters.openai_drafter``); never prints; never logs the key.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import openai
import tenacity

from tileagent.answers import NO_BLOCK, parse_answer
from tileagent.drafters.base import Draft, DrafterUnavailable, DraftTask

logger = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
_HINTS = {
    400: "the endpoint rejected the request (check the model's context length and the request options)",
    401: "the API key was refused (check --api-key-env and the variable it names, or OPENAI_API_KEY)",
    403: "the key is not allowed to use this model or endpoint",
    404: "the model or the endpoint was not found (check --model against the server's model list and --base-url, "
         "which usually ends in /v1)",
    422: "the endpoint could not process the request (check the model name and the request options)",
}


@dataclass
class Usage:
    """Running totals of one drafter (all turns)."""

    requests: int = 0
    """HTTP requests that returned an answer."""
    retries: int = 0
    """Requests repeated after a retryable failure."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    estimated_requests: int = 0
    """Answers without ``usage`` whose tokens were estimated (characters / 4)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def estimated(self) -> bool:
        """Whether any of the totals is an estimate."""
        return self.estimated_requests > 0


def _estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _retry_after(err: openai.APIStatusError) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, ``Retry-After`` as seconds or an HTTP date)."""
    headers = err.response.headers
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            try:
                date = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                continue
            return max(0.0, date.timestamp() - time.time())
    return None


def _retryable(err: BaseException) -> bool:
    """Whether a failed request is worth repeating: 408, 409, 429, 5xx, connection errors and timeouts."""
    if isinstance(err, openai.APIStatusError):
        return err.status_code in RETRY_STATUS
    return isinstance(err, openai.APIConnectionError)


def _describe(err: Exception) -> str:
    if isinstance(err, openai.APIStatusError):
        body = err.body if isinstance(err.body, dict) else {}
        detail = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
        message = detail.get("message") or err.message
        return f"HTTP {err.status_code}: {message}"
    if isinstance(err, openai.APITimeoutError):
        return "the request timed out"
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__ or err
        return f"connection failed: {cause}"
    return f"{type(err).__name__}: {err}"


class OpenAIDrafter:
    """Drafts with chat completions from an OpenAI-compatible endpoint.

    Args:
        model: the model name the endpoint serves (``gpt-4.1``, ``Qwen/Qwen2.5-Coder-32B-Instruct``, ``llama3.1``).
        base_url: the endpoint, e.g. ``http://localhost:8000/v1``; None: ``OPENAI_BASE_URL`` or OpenAI's.
        api_key: the key; None: ``OPENAI_API_KEY``, else ``"EMPTY"`` (local servers need none).
        timeout_s: seconds for one request (a timeout is retried).
        max_retries: retries per request after the first attempt.
        temperature: sampling temperature; None leaves it out (models that accept only their default).
        price_per_mtok: (input, output) USD per million tokens, for the cost; None: cost 0.
        max_tokens: the completion limit sent to the server; None: the server's default.
        sleep: the function that waits between retries (tests pass a no-op).
        backoff_s: the first retry's base delay; doubles with each retry.
        max_backoff_s: cap of the computed delay.
        max_retry_after_s: cap of a server's ``Retry-After``.
        seed: seeds the jitter (None: random).
    """

    name = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, timeout_s: float = 120,
                 max_retries: int = 4, temperature: float | None = 0.2, price_per_mtok: tuple[float, float] | None = None,
                 *, max_tokens: int | None = None, sleep: Callable[[float], None] = time.sleep,
                 backoff_s: float = 1.0, max_backoff_s: float = 60.0, max_retry_after_s: float = 600.0,
                 seed: int | None = None):
        if not model:
            raise ValueError("OpenAIDrafter needs a model name (--model)")
        self.model, self.base_url = model, base_url
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.timeout_s, self.max_retries, self.temperature = timeout_s, max_retries, temperature
        self.price_per_mtok, self.max_tokens = price_per_mtok, max_tokens
        self.sleep, self.backoff_s, self.max_backoff_s, self.max_retry_after_s = (
            sleep, backoff_s, max_backoff_s, max_retry_after_s)
        self.usage = Usage()
        self.n_supported: bool | None = None
        """Whether the endpoint honours ``n > 1`` (None: not yet known)."""
        self._rng = random.Random(seed)

    def __repr__(self) -> str:
        return f"OpenAIDrafter(model={self.model!r}, base_url={self.base_url!r})"

    # -- the Drafter protocol ----------------------------------------------------------------------------------
    def draft(self, task: DraftTask) -> list[Draft]:
        """``task.n`` drafts for ``task.messages`` (see the module docstring for failures)."""
        if not task.messages:
            raise DrafterUnavailable("the openai drafter needs chat messages in the task (DraftTask.messages)")
        drafts: list[Draft] = []
        with openai.OpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self.timeout_s,
                           max_retries=0) as client:
            while len(drafts) < task.n:
                want = task.n - len(drafts) if self.n_supported is not False else 1
                try:
                    got = self._request(client, task.messages, want)
                except DrafterUnavailable as e:
                    if not drafts:
                        raise
                    logger.warning("%s; returning the %d of %d candidates drafted", e, len(drafts), task.n)
                    break
                if want > 1 and self.n_supported is None:
                    self.n_supported = len(got) >= want
                    if not self.n_supported:
                        logger.info("%s answered %d choice(s) for n=%d: asking one candidate per request",
                                    self._where(), len(got), want)
                drafts.extend(got[: task.n - len(drafts)])
        return drafts

    # -- one request ------------------------------------------------------------------------------------------
    def _where(self) -> str:
        return f"model {self.model!r} at {self.base_url or 'the default OpenAI endpoint'}"

    def _refused_locally(self, error: Exception) -> bool:
        """Whether ``error`` is a refused connection to an endpoint on this machine (no server listens: waiting
        would not help)."""
        from urllib.parse import urlsplit

        host = urlsplit(self.base_url or os.environ.get("OPENAI_BASE_URL") or "").hostname or ""
        if host not in ("localhost", "::1", "0.0.0.0") and not host.startswith("127."):
            return False
        seen, e = set(), error
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            if isinstance(e, ConnectionRefusedError) or "connection refused" in str(e).lower():
                return True
            e = e.__cause__ or e.__context__
        return False

    def _request(self, client: openai.OpenAI, messages: list[dict], n: int) -> list[Draft]:
        """Up to ``n`` drafts from one chat completion, retried as the module docstring says."""
        kwargs: dict = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if n > 1:
            kwargs["n"] = n
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(
                                         lambda e: _retryable(e) and not self._refused_locally(e)),
                                     stop=tenacity.stop_after_attempt(self.max_retries + 1), wait=self._wait,
                                     sleep=self.sleep, before_sleep=self._before_sleep, reraise=True)
        try:
            response = retrying(client.chat.completions.create, **kwargs)
        except openai.APIStatusError as e:
            if e.status_code == 400 and n > 1 and self.n_supported is None:
                logger.info("%s rejected n=%d (%s): asking one candidate per request", self._where(), n, _describe(e))
                self.n_supported = False
                return self._request(client, messages, 1)
            if e.status_code not in RETRY_STATUS:
                hint = _HINTS.get(e.status_code, "retrying would not help")
                raise DrafterUnavailable(f"{self._where()}: {_describe(e)}; {hint}") from None
            raise DrafterUnavailable(f"{self._where()} still failing after {self.max_retries} retries: "
                                     f"{_describe(e)}") from None
        except openai.APIConnectionError as e:  # includes APITimeoutError
            if self._refused_locally(e):
                raise DrafterUnavailable(f"{self._where()}: connection refused; is the server running? (a local "
                                         f"endpoint that refuses connections is not retried)") from None
            raise DrafterUnavailable(f"{self._where()} still failing after {self.max_retries} retries: "
                                     f"{_describe(e)}") from None
        self.usage.requests += 1
        return self._drafts(response, messages)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """Seconds before retry ``state.attempt_number``: the server's Retry-After (capped at
        ``max_retry_after_s``), else ``backoff_s * 2**k`` capped at ``max_backoff_s``, times a jitter in [0.5, 1]."""
        error = state.outcome.exception()
        wait = _retry_after(error) if isinstance(error, openai.APIStatusError) else None
        if wait is not None:
            return min(wait, self.max_retry_after_s)
        k = state.attempt_number - 1
        return min(self.max_backoff_s, self.backoff_s * 2**k) * (0.5 + 0.5 * self._rng.random())

    def _before_sleep(self, state: tenacity.RetryCallState) -> None:
        self.usage.retries += 1
        logger.warning("%s: %s; retry %d of %d in %.1f s", self._where(), _describe(state.outcome.exception()),
                       state.attempt_number, self.max_retries, state.next_action.sleep)

    def _drafts(self, response, messages: list[dict]) -> list[Draft]:
        """The response's choices as drafts, with their share of the tokens and the cost."""
        choices = sorted(response.choices or [], key=lambda c: c.index or 0)
        texts = [(c.message.content or "") if c.message is not None else "" for c in choices]
        usage = response.usage
        if usage is not None and usage.prompt_tokens is not None:
            prompt, completion = usage.prompt_tokens or 0, usage.completion_tokens or 0
        else:
            prompt = _estimate_tokens("".join(str(m.get("content") or "") for m in messages))
            completion = sum(_estimate_tokens(t) for t in texts)
            self.usage.estimated_requests += 1
            logger.info("%s sent no token usage: estimated %d prompt + %d completion tokens (characters / 4)",
                        self._where(), prompt, completion)
        self.usage.prompt_tokens += prompt
        self.usage.completion_tokens += completion
        if not choices:  # a server bug, but the prompt was paid for
            cost = self._cost(prompt, completion)
            self.usage.cost_usd += cost
            return [Draft(source=None, problem=NO_BLOCK, label=self.model, prompt_tokens=prompt,
                          completion_tokens=completion, cost_usd=cost)]
        shares = _split(completion, [len(t) for t in texts])
        drafts = []
        for i, (choice, text, share) in enumerate(zip(choices, texts, shares)):
            parsed = parse_answer(text, choice.finish_reason)
            p = prompt if i == 0 else 0
            cost = self._cost(p, share)
            self.usage.cost_usd += cost
            if parsed.problem:
                logger.info("%s: malformed answer (%s)", self._where(), parsed.problem)
            drafts.append(Draft(source=parsed.source, response=text, problem=parsed.problem, label=self.model,
                                prompt_tokens=p, completion_tokens=share, cost_usd=cost))
        return drafts

    def _cost(self, prompt: int, completion: int) -> float:
        if self.price_per_mtok is None:
            return 0.0
        price_in, price_out = self.price_per_mtok
        return (prompt * price_in + completion * price_out) / 1e6


def _split(total: int, weights: list[int]) -> list[int]:
    """``total`` shared in proportion to ``weights`` (evenly when they are all 0), summing exactly to ``total``."""
    if not weights:
        return []
    if sum(weights) == 0:
        weights = [1] * len(weights)
    shares = [total * w // sum(weights) for w in weights]
    shares[0] += total - sum(shares)
    return shares


__all__ = ["OpenAIDrafter", "RETRY_STATUS", "Usage"]
