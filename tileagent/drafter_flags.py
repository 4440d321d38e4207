"""The drafter flags of ``tileagent generate`` and ``tileagent batch``: which provider, with what, checked first.

In: the flags (--provider, --model, --base-url, --api-key-env, --price, --seed) and the environment
(TILEAGENT_MODEL, OPENAI_API_KEY, OPENAI_BASE_URL). Out: the options dict a run records, and the drafter.
Guarantees: the built-in drafter unless an endpoint is configured (docs/agent.md); a flag that needs another one, an
unset key variable, a malformed URL or a local endpoint that refuses connections exits 2 (``cli._bad``) before any
work is done.
"""

from __future__ import annotations

import os

_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]")


def drafter_options(provider: str | None, model: str | None, base_url: str | None, api_key_env: str | None,
                     seed: int, price: str | None = None) -> dict:
    """The provider and its options from the flags: builtin unless an endpoint is configured (docs/agent.md).
    ``--base-url`` or ``--api-key-env`` without a model is an error (exit 2), not a silent fall-back."""
    from tileagent import cli

    price_per_mtok = parse_price(price) if price is not None else None
    model = model or os.environ.get("TILEAGENT_MODEL")
    if provider is None:
        if (base_url or api_key_env) and not model:
            flag = "--base-url" if base_url else "--api-key-env"
            raise cli._bad(f"{flag} needs --model (the model name the endpoint serves; or set $TILEAGENT_MODEL); "
                           f"without an endpoint, leave {flag} out to use the built-in drafter")
        provider = "openai" if base_url or api_key_env or os.environ.get("OPENAI_API_KEY") else "builtin"
        if provider == "openai" and not model:
            cli.err_console.print("[yellow]note:[/] OPENAI_API_KEY is set but no --model is given: using the built-in "
                                  "drafter")
            provider = "builtin"
    return {"provider": provider, "model": model, "base_url": base_url, "api_key_env": api_key_env, "seed": seed,
            "price_per_mtok": price_per_mtok}


def check_openai(options: dict) -> str | None:
    """The openai provider's settings checked before any work (exit 2): a model, an API key or a base URL, the key's
    variable set, and a local endpoint that accepts connections. Returns the API key (None for none)."""
    from tileagent import cli

    import socket
    from urllib.parse import urlsplit

    if not options.get("model"):
        raise cli._bad("--provider openai needs --model (the model name the endpoint serves)")
    env = options.get("api_key_env") or "OPENAI_API_KEY"
    if options.get("api_key_env") and not os.environ.get(env):
        raise cli._bad(f"--api-key-env {env}: the environment variable {env} is not set")
    key = os.environ.get(env)
    url = options.get("base_url") or os.environ.get("OPENAI_BASE_URL")
    if not key and not url:
        raise cli._bad("--provider openai needs an API key (set OPENAI_API_KEY, or name the variable with "
                       "--api-key-env) or the --base-url of a server that needs none")
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise cli._bad(f"--base-url {url}: not an http(s) URL (e.g. http://localhost:8000/v1)")
        if parts.hostname in _LOCAL_HOSTS or parts.hostname.startswith("127."):
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                socket.create_connection((parts.hostname, port), timeout=5).close()
            except OSError as e:
                why = "connection refused" if isinstance(e, ConnectionRefusedError) else (e.strerror or str(e))
                raise cli._bad(f"--base-url {url}: {why} at {parts.hostname}:{port}; is the server running?") from None
    return key


def parse_price(text: str) -> tuple[float, float]:
    """``--price IN,OUT``: USD per million input and output tokens, both finite and >= 0."""
    from tileagent import cli

    import math

    try:
        price_in, price_out = (float(x) for x in text.split(","))
    except ValueError:
        raise cli._bad(f"--price expects IN,OUT in USD per million input and output tokens (e.g. 2.5,10), "
                       f"got {text!r}") from None
    if not all(math.isfinite(x) and x >= 0 for x in (price_in, price_out)):
        raise cli._bad(f"--price: prices must be finite and >= 0, got {text!r}")
    return price_in, price_out


def make_drafter(options: dict):
    """The drafter the options name (``drafter_options``); a provider that cannot be made exits 2 saying why."""
    from tileagent import cli

    from tileagent.drafters import make_drafter

    kwargs = {k: v for k, v in options.items() if k not in ("provider", "api_key_env")}
    if options["provider"] == "openai":
        kwargs["api_key"] = check_openai(options)
    if options["provider"] == "file":
        kwargs["notify"] = lambda text: cli.console.print(text, highlight=False, soft_wrap=True)
    try:
        return make_drafter(options["provider"], **kwargs)
    except (ValueError, ImportError) as e:
        raise cli._bad(str(e)) from None


__all__ = ["check_openai", "drafter_options", "make_drafter", "parse_price"]
