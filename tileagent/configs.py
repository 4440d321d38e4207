"""Which configs a run serves and at which sizes it evaluates them.

In: a loaded spec, ``--configs`` selections, ``--grid`` axes (batch), the device. Out: ``RunConfig`` pairs: the
config as the spec states it (what the exported module serves) and the config the evaluator runs (``eval``).
Guarantees:

- ``--configs`` items: ``KEY=v1,v2`` keeps the configs whose KEY is one of the values (items for several keys all
  apply); a list of 0-based indices ``0,3`` keeps those positions of the grid. A selection that matches nothing, an
  unknown key or an index out of range raises ``ConfigSelectionError`` naming it and what the grid has.
- ``--grid KEY=v1,v2`` (batch): the product of every axis, each applied over the spec's first config (its other keys
  kept). A key the reference does not take, or a value of another kind than the configs give the key (``C=abc``
  where C is an integer), raises ``ConfigSelectionError`` before any work.
- On the CPU (the interpreter is slow: the rmsnorm candidate takes minutes per config at M = 16384, seconds at
  M = 37) every FREE_DIMS key is set to its SMALL_CONFIG value when that is smaller, or to ``AUTO_SMALL`` when the
  reference declares no SMALL_CONFIG value for it (a size that is no multiple of a tile or vector width, so tails
  are exercised); other keys are kept. Every config is kept (its prompt, cost section and report row), also when its
  CPU size equals another's: callers ask for each eval size once (``unique_evals``). On CUDA the configs are
  evaluated as stated.
"""

from __future__ import annotations

import itertools

from pydantic import BaseModel, Field


def key(config: dict) -> str:
    """A config as the CLI and its notes write it: ``M=37 C=96``."""
    return " ".join(f"{k}={v}" for k, v in config.items())


class ConfigSelectionError(ValueError):
    """A --configs or --grid argument does not fit the spec's grid."""


class RunConfig(BaseModel):
    spec: dict = Field(description="the config as the reference's grid states it")
    eval: dict = Field(description="the config the loop asks the evaluator for (on the CPU the free dims at "
                                   "SMALL_CONFIG); the CPU interpreter may check smaller sizes still "
                                   "(evaluator.interpreter_sizes), as each result's evaluated_at says")


def _value(text: str):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def parse_axis(item: str, flag: str) -> tuple[str, list]:
    """``KEY=v1,v2`` -> (KEY, [v1, v2]) with ints and floats parsed."""
    key, sep, values = item.partition("=")
    if not sep or not key.strip() or not values.strip():
        raise ConfigSelectionError(f"{flag} expects KEY=v1,v2 (e.g. C=96,320), got {item!r}")
    return key.strip(), [_value(v) for v in values.split(",") if v.strip()]


def select(configs: list[dict], items: list[str]) -> list[dict]:
    """The configs that ``items`` (``--configs`` values) keep, in grid order."""
    if not items:
        return list(configs)
    keep = list(configs)
    for item in items:
        if "=" not in item:
            try:
                indices = [int(x) for x in item.split(",") if x.strip()]
            except ValueError:
                raise ConfigSelectionError(f"--configs expects KEY=v1,v2 or indices like 0,3; got {item!r}") from None
            bad = [i for i in indices if not 0 <= i < len(configs)]
            if bad:
                raise ConfigSelectionError(f"--configs index {bad[0]} is out of range: the grid has {len(configs)} "
                                           f"configs (0 to {len(configs) - 1})")
            chosen = [configs[i] for i in indices]
            keep = [c for c in keep if c in chosen]
            continue
        key, values = parse_axis(item, "--configs")
        if not any(key in c for c in configs):
            keys = sorted({k for c in configs for k in c})
            raise ConfigSelectionError(f"--configs {item}: the grid has no key {key!r} (its keys: {', '.join(keys)})")
        keep = [c for c in keep if c.get(key) in values]
        if not keep:
            have = sorted({str(c.get(key)) for c in configs}, key=lambda s: (len(s), s))
            raise ConfigSelectionError(f"--configs {item}: no config of the grid has {key} in {values} "
                                       f"(its values: {', '.join(have)})")
    return keep


def check_axis(item: str, flag: str, configs: list[dict], accepts=None) -> tuple[str, list]:
    """``parse_axis(item)``, checked against the reference: a key that no config has must be one that
    ``get_inputs`` / ``get_init_inputs`` take (``accepts``, None: any), and each value must be of the kind the
    configs give that key (integers for an integer key, numbers for a float key, true/false for a bool key)."""
    key, values = parse_axis(item, flag)
    known = [c[key] for c in configs if key in c]
    if not known:
        if accepts is not None and key not in accepts:
            takes = ", ".join(sorted(accepts)) or "no keys"
            raise ConfigSelectionError(f"{flag} {item}: the reference has no config key {key!r} (get_inputs() and "
                                       f"get_init_inputs() take: {takes})")
        return key, values
    sample = known[0]
    if isinstance(sample, bool):
        kind, ok = "true or false", lambda v: isinstance(v, bool)
    elif isinstance(sample, int):
        kind, ok = "integers", lambda v: isinstance(v, int) and not isinstance(v, bool)
    elif isinstance(sample, float):
        kind, ok = "numbers", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    else:
        return key, values
    for v in values:
        if not ok(v):
            raise ConfigSelectionError(f"{flag} {item}: {key} takes {kind} (the reference's configs have "
                                       f"{key}={sample}), got {v!r}")
    return key, values


def grid(base: dict, axes: list[str], accepts=None, reference: list[dict] | None = None) -> list[dict]:
    """The product of ``--grid`` axes applied over ``base`` (other keys kept), duplicates dropped; each axis
    checked with ``check_axis`` against ``reference`` (default ``[base]``) and ``accepts``."""
    parsed = [check_axis(a, "--grid", reference or [base], accepts) for a in axes]
    if not parsed:
        raise ConfigSelectionError("batch needs at least one --grid KEY=v1,v2")
    out = []
    for combo in itertools.product(*(values for _, values in parsed)):
        cfg = {**base, **{k: v for (k, _), v in zip(parsed, combo)}}
        if cfg not in out:
            out.append(cfg)
    return out


AUTO_SMALL = 37  # a free dim's CPU size when the reference gives no SMALL_CONFIG value for it


def reduce_for_device(spec, configs: list[dict], device: str) -> list[RunConfig]:
    """The RunConfigs for ``device`` (see the module docstring)."""
    small = dict(spec.small_config or {})
    out: list[RunConfig] = []
    for cfg in configs:
        ev = dict(cfg)
        if not device.startswith("cuda"):
            for key in spec.free_dims:
                size = small.get(key, AUTO_SMALL)
                if isinstance(ev.get(key), int) and isinstance(size, int) and size < ev[key]:
                    ev[key] = size
        out.append(RunConfig(spec=cfg, eval=ev))
    return out


def unique_evals(configs: list[RunConfig]) -> list[dict]:
    """The eval configs of ``configs``, each once, in order (configs that share a CPU size share its check)."""
    out: list[dict] = []
    for rc in configs:
        if rc.eval not in out:
            out.append(rc.eval)
    return out


__all__ = ["ConfigSelectionError", "RunConfig", "check_axis", "grid", "parse_axis", "reduce_for_device", "select",
           "unique_evals"]
