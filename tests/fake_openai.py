"""A fake OpenAI-compatible server on loopback, for driving the real ``openai`` client in tests.

In: a script, the replies to give in order (:func:`answer`, :func:`error`, :func:`delay`), and options.
Out: a running server (``POST /v1/chat/completions``, ``GET /v1/models``) whose ``base_url`` an ``openai.OpenAI``
client (or ``OpenAIDrafter``) points at, and the record of every request it received.
Guarantees: the server runs only inside ``with FakeOpenAI(...) as server:``; leaving the block stops it, cuts every
scripted delay short, joins every thread and closes every socket (no ResourceWarning); each request takes the next
reply of the script; when the script is exhausted it takes ``default`` if given, else it answers 400 "script
exhausted" (a status no client retries), so a test that asks too often fails fast and says why.

Example::

    with FakeOpenAI([error(429, retry_after=2), answer("```python\\nx = 1\\n```")]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        ...
        assert server.requests[-1].messages[-1]["content"] == "..."

``n`` (candidates per request): with ``n_mode="ignore"`` (the default, like Ollama and llama.cpp) the server answers
one choice whatever ``n`` asks; ``"support"`` takes ``n`` replies of the script into one response of ``n`` choices
(usage summed, the prompt counted once); ``"reject"`` answers 400 to any ``n > 1``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "fake-model"


@dataclass
class Reply:
    """One scripted reply: an answer (status 200) or an HTTP error, given after ``delay_s``."""

    status: int = 200
    content: str | None = ""
    finish_reason: str = "stop"
    usage: dict | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error_message: str = ""
    delay_s: float = 0.0

    def body(self, model: str) -> dict:
        if self.status != 200:
            kind = {401: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_error"}
            return {"error": {"message": self.error_message or f"fake error {self.status}",
                              "type": kind.get(self.status, "server_error"), "param": None, "code": None}}
        body = {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "finish_reason": self.finish_reason,
                             "message": {"role": "assistant", "content": self.content}}]}
        if self.usage is not None:
            body["usage"] = dict(self.usage)
        return body


def answer(content: str | None, prompt_tokens: int | None = 100, completion_tokens: int | None = 50,
           finish_reason: str = "stop", delay_s: float = 0.0) -> Reply:
    """A 200 answer with ``content``; ``prompt_tokens=None`` leaves ``usage`` out (as some local servers do)."""
    usage = None
    if prompt_tokens is not None:
        completion_tokens = completion_tokens or 0
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
    return Reply(200, content, finish_reason, usage, delay_s=delay_s)


def error(status: int, message: str = "", retry_after: float | str | None = None, delay_s: float = 0.0) -> Reply:
    """An HTTP error with an OpenAI-style body; ``retry_after`` sets the ``Retry-After`` header."""
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return Reply(status, None, headers=headers, error_message=message, delay_s=delay_s)


def delay(seconds: float, reply: Reply | None = None) -> Reply:
    """``reply`` (by default a plain answer) given only after ``seconds``: longer than a client's timeout, it is lost."""
    reply = reply or answer("```python\nlate = True\n```")
    return Reply(reply.status, reply.content, reply.finish_reason, reply.usage, dict(reply.headers),
                 reply.error_message, delay_s=seconds)


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict | None

    @property
    def messages(self) -> list[dict]:
        return (self.body or {}).get("messages", [])


class FakeOpenAI:
    """A scripted OpenAI-compatible server on ``127.0.0.1`` (a free port), used as a context manager.

    Args:
        script: the replies, in order; each chat request takes the next.
        default: the reply once the script is exhausted (None: 400 "script exhausted").
        models: the model names served; a chat request for another model gets 404 ``model_not_found``
            (None: any model is accepted and ``GET /v1/models`` lists ``fake-model``).
        api_key: when set, a request without ``Authorization: Bearer <api_key>`` gets 401.
        n_mode: ``"ignore"``, ``"support"`` or ``"reject"`` (see the module docstring).
    """

    def __init__(self, script: list[Reply] | None = None, *, default: Reply | None = None,
                 models: list[str] | None = None, api_key: str | None = None, n_mode: str = "ignore"):
        if n_mode not in ("ignore", "support", "reject"):
            raise ValueError(f"n_mode must be 'ignore', 'support' or 'reject', not {n_mode!r}")
        self.script = list(script or [])
        self.default, self.models, self.api_key, self.n_mode = default, models, api_key, n_mode
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def __enter__(self) -> FakeOpenAI:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = False  # server_close() joins every handler thread
        self._server.block_on_close = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()

    @property
    def port(self) -> int:
        assert self._server is not None, "the server runs only inside `with FakeOpenAI(...)`"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """What to give ``openai.OpenAI(base_url=...)`` or ``--base-url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- what tests read -------------------------------------------------------------------------------------------
    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The ``POST .../chat/completions`` requests, in order of arrival."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path.endswith("/chat/completions")]

    @property
    def remaining(self) -> int:
        """Replies of the script not yet given."""
        with self._lock:
            return len(self.script)

    # -- serving (handler threads) ---------------------------------------------------------------------------------
    def _take(self, k: int) -> list[Reply]:
        with self._lock:
            out = []
            while len(out) < k:
                if self.script:
                    reply = self.script.pop(0)
                elif self.default is not None:
                    reply = self.default
                else:
                    break
                out.append(reply)
                if reply.status != 200:
                    break
            return out

    def _chat(self, req: RecordedRequest) -> tuple[int, dict, dict[str, str], float]:
        body, model = req.body or {}, (req.body or {}).get("model", "")
        if self.api_key is not None and req.headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, error(401, "Incorrect API key provided").body(model), {}, 0.0
        if self.models is not None and model not in self.models:
            msg = f"The model `{model}` does not exist or you do not have access to it."
            err = error(404, msg).body(model)
            err["error"]["code"] = "model_not_found"
            return 404, err, {}, 0.0
        n = int(body.get("n") or 1)
        if n > 1 and self.n_mode == "reject":
            return 400, error(400, "n > 1 is not supported").body(model), {}, 0.0
        replies = self._take(n if self.n_mode == "support" else 1)
        if not replies:
            msg = f"fake OpenAI server: script exhausted after {len(self.chat_requests) - 1} chat requests"
            return 400, error(400, msg).body(model), {}, 0.0
        first = replies[0]
        if first.status != 200 or len(replies) == 1:
            return first.status, first.body(model), first.headers, first.delay_s
        out = first.body(model)
        out["choices"] = [dict(r.body(model)["choices"][0], index=i) for i, r in enumerate(replies)]
        usages = [r.usage for r in replies if r.usage]
        if usages:
            completion = sum(u["completion_tokens"] for u in usages)
            out["usage"] = {"prompt_tokens": usages[0]["prompt_tokens"], "completion_tokens": completion,
                            "total_tokens": usages[0]["prompt_tokens"] + completion}
        return 200, out, first.headers, max(r.delay_s for r in replies)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI  # set on the subclass FakeOpenAI makes
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive thread at shutdown

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        logger.debug("fake openai: " + format, *args)

    def _record(self, body: dict | None) -> RecordedRequest:
        req = RecordedRequest(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        with self.fake._lock:
            self.fake.requests.append(req)
        return req

    def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (its timeout): nobody to answer
            pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._record(None)
        if self.path.rstrip("/").endswith("/models"):
            names = self.fake.models or [DEFAULT_MODEL]
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in names]
            self._send(200, {"object": "list", "data": data})
        else:
            self._send(404, error(404, f"no route GET {self.path}").body(""))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._record({"raw": raw.decode(errors="replace")})
            self._send(400, error(400, "body is not JSON").body(""))
            return
        req = self._record(body)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, error(404, f"no route POST {self.path}").body(""))
            return
        status, payload, headers, delay_s = self.fake._chat(req)
        if delay_s and self.fake._stop.wait(delay_s):
            return  # the server is stopping: drop the late reply
        self._send(status, payload, headers)


__all__ = ["DEFAULT_MODEL", "FakeOpenAI", "RecordedRequest", "Reply", "answer", "delay", "error"]
