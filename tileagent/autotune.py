"""Autotuning of a correct candidate's knobs (prompts/system.md, "Tunable parameters").

In: the candidate's source, whose module-level ``TUNABLES = {"NAME": [default, v1, ...]}`` lists values of UPPER_CASE
module constants, the configs, its full evaluation (correct and timed on every config), and an ``evaluate`` callback
that runs one variant: ``evaluate(values, phase, configs) -> EvalResult`` (the loop writes the variant file, runs
the worker, persists the result). Out: a ``TuneResult``: per config, the fastest variant that passed the full check.
Guarantees:

- A variant is the source with each knob's assignment replaced (``assign``); the default variant (every knob at the
  value the source assigns, ``current_values``) is the candidate itself and is never re-evaluated.
- Search: the product of the knob values when it has at most ``PRODUCT_LIMIT`` variants, else coordinate descent (each
  knob in turn over its values, the others held at the best so far by the geometric mean over configs; two rounds).
- Screening ("screen" phase): one seed, the 'normal' distribution, every config even after one fails, fewer timed
  trials; baselines are not re-timed (the worker caches them). Winners are then fully checked ("full" phase: every
  seed and distribution, full trials) on the configs they won; a config whose winner fails keeps the default.
- Bounded: at most ``max_variants`` variants, and no new screening after ``max_seconds`` (the winners so far are
  still fully checked; the note says the search was cut short).
- ``parallel`` > 1 (the loop passes its evaluation workers' count, ``tileagent.pool``): the variants of one search
  step (the whole product, or one knob's values in a descent round), and the winners' full checks, are evaluated up
  to ``parallel`` at once; the results and the choice are the same as one at a time (given the same timings).
- Never raises for a variant's failure; a source without TUNABLES (or with an unusable one) gives ``TuneResult``
  with no variants and a ``note`` saying why.
"""

from __future__ import annotations

import ast
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

from tileagent.compiler import python_ast
from tileagent.evaluator.records import ConfigResult, EvalResult
from tileagent.runstore import config_key

log = logging.getLogger("tileagent.autotune")

PRODUCT_LIMIT = 32
SCREEN_SEEDS, SCREEN_TRIALS = 1, 20


class Winner(BaseModel):
    """The fastest fully checked variant for one config."""

    values: dict = Field(description="knob -> value assigned (the default variant: every knob at its first value)")
    variant: str = Field(description="variant_key(values)")
    result: ConfigResult


class TuneResult(BaseModel):
    winners: dict[str, Winner] = Field(default_factory=dict, description="config_key -> winner")
    screened: int = Field(0, description="variants screened")
    note: str = ""


def tunables_of(source: str) -> dict[str, list] | None:
    """The module-level ``TUNABLES`` dict of ``source`` (a literal), restricted to knobs that are assigned at module
    level; None when there is none or it is not a usable literal."""
    try:
        tree = python_ast.parse(source)
    except SyntaxError:
        return None
    assigned, table = set(), None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == "TUNABLES":
                try:
                    table = ast.literal_eval(node.value)
                except ValueError:
                    return None
            else:
                assigned.add(name)
    if not isinstance(table, dict):
        return None
    out = {k: list(v) for k, v in table.items() if k in assigned and isinstance(v, (list, tuple)) and v}
    missing = [k for k in table if k not in out]
    if missing:
        log.info("TUNABLES lists %s without a module-level assignment (or without values); not tuned", missing)
    return out or None


def current_values(source: str, knobs: dict[str, list]) -> dict:
    """The value each knob is assigned at module level in ``source`` (a literal), else its first listed value: a
    source whose knobs were tuned before (an archived kernel) keeps its tuned values as its default variant."""
    out = {k: v[0] for k, v in knobs.items()}
    for node in python_ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in knobs:
                try:
                    out[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return out


def assign(source: str, values: dict) -> str:
    """``source`` with each module-level ``NAME = ...`` of ``values`` replaced by ``NAME = repr(value)``."""
    lines = source.splitlines(keepends=True)
    spans = {}
    for node in python_ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in values:
                spans[node.targets[0].id] = (node.lineno, node.end_lineno)
    for name, (start, end) in sorted(spans.items(), key=lambda kv: -kv[1][0]):
        lines[start - 1:end] = [f"{name} = {values[name]!r}  # tuned\n"]
    return "".join(lines)


def search_space(source: str) -> str | None:
    """A key two sources share when autotuning either one screens the same variants: the same text once every knob's
    value and the order of its TUNABLES list are set aside, each source's own values among its lists. None for a
    source without usable TUNABLES or with a knob assigned a value its list lacks (its default variant lies outside
    the space)."""
    knobs = tunables_of(source)
    if not knobs:
        return None
    values = current_values(source, knobs)
    if any(values[k] not in v for k, v in knobs.items()):
        return None
    space = {k: sorted(map(repr, v)) for k, v in sorted(knobs.items())}
    return assign(source, {**{k: None for k in knobs}, "TUNABLES": space})


def variant_key(values: dict) -> str:
    """A stable, file-name-safe name of a variant: 'BLOCK_M=4,THREADS=128'."""
    return config_key(values)


def time_of(result: ConfigResult | None) -> float | None:
    """The candidate's median time of a correct, timed config result, else None."""
    if result is None or not result.correct or result.candidate is None:
        return None
    return result.candidate.median_ms


class Tuner:
    """One autotuning run; ``run()`` returns the TuneResult."""

    def __init__(self, source: str, configs: list[dict], base: EvalResult,
                 evaluate: Callable[[dict, str, list[dict]], EvalResult], max_variants: int = 64,
                 max_seconds: float | None = None, parallel: int = 1):
        self.source, self.configs, self.evaluate, self.max_variants = source, configs, evaluate, max_variants
        self.parallel = max(1, parallel)
        self.deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self.cut = False
        self.knobs = tunables_of(source) or {}
        self.default = current_values(source, self.knobs)
        self.results: dict[str, dict[str, ConfigResult]] = {}  # variant -> config key -> screening result
        self.values: dict[str, dict] = {}
        self._record(self.default, base)

    def _record(self, values: dict, result: EvalResult) -> None:
        key = variant_key(values)
        self.values[key] = values
        self.results[key] = {config_key(c.config): c for c in result.configs}

    def _screen(self, values: dict) -> None:
        key = variant_key(values)
        if key in self.results or len(self.results) > self.max_variants:
            return
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.cut = True
            return
        self._record(values, self.evaluate(values, "screen", self.configs))

    def _screen_many(self, batch: list[dict]) -> None:
        """``_screen`` each of ``batch``; with ``parallel`` > 1, up to that many at once (threads; the deadline is
        checked before each group, results are recorded in ``batch``'s order)."""
        if self.parallel == 1:
            for values in batch:
                self._screen(values)
            return
        todo: list[dict] = []
        for values in batch:
            if variant_key(values) not in self.results and all(variant_key(v) != variant_key(values) for v in todo):
                todo.append(values)
        todo = todo[:max(0, self.max_variants + 1 - len(self.results))]
        for start in range(0, len(todo), self.parallel):
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.cut = True
                return
            group = todo[start:start + self.parallel]
            for values, result in zip(group, _concurrently(lambda v: self.evaluate(v, "screen", self.configs),
                                                           group)):
                self._record(values, result)

    def _score(self, key: str) -> float:
        """Geometric mean of the times over the configs (inf when a config failed)."""
        times = [time_of(self.results[key].get(config_key(c))) for c in self.configs]
        if any(t is None or t <= 0 for t in times):
            return math.inf
        return math.exp(sum(math.log(t) for t in times) / len(times))

    def search(self) -> None:
        names = list(self.knobs)
        product = math.prod(len(v) for v in self.knobs.values())
        if product <= PRODUCT_LIMIT:
            self._screen_many([dict(zip(names, combo)) for combo in itertools.product(*(self.knobs[n] for n in names))])
            return
        best = dict(self.default)
        for _ in range(2):
            before = variant_key(best)
            for name in names:
                self._screen_many([{**best, name: value} for value in self.knobs[name]])
                # the variant cap or the deadline may have left some unscreened: choose among those that ran
                candidates = [c for v in self.knobs[name] if variant_key(c := {**best, name: v}) in self.results]
                best = min(candidates or [best], key=lambda vals: self._score(variant_key(vals)))
            if variant_key(best) == before:
                break

    def run(self) -> TuneResult:
        if not self.knobs:
            return self._defaults("the candidate lists no TUNABLES")
        if not self.evaluate_timed():
            return self._defaults("timing unavailable: knobs left at their defaults")
        self.search()
        default_key = variant_key(self.default)
        picks: dict[str, str] = {}
        for config in self.configs:
            ck = config_key(config)
            timed = [(t, key) for key, res in self.results.items() if (t := time_of(res.get(ck))) is not None]
            picks[ck] = min(timed)[1] if timed else default_key
        winners = {ck: Winner(values=self.default, variant=default_key, result=self.results[default_key][ck])
                   for ck in picks if ck in self.results[default_key]}
        by_variant: dict[str, list[dict]] = {}
        for config in self.configs:
            if picks[config_key(config)] != default_key:
                by_variant.setdefault(picks[config_key(config)], []).append(config)
        checks = list(by_variant.items())
        fulls = _concurrently(lambda kc: self.evaluate(self.values[kc[0]], "full", kc[1]), checks) \
            if self.parallel > 1 else [self.evaluate(self.values[key], "full", configs) for key, configs in checks]
        for (key, _), full in zip(checks, fulls):
            for c in full.configs:
                base = winners.get(config_key(c.config))
                if c.correct and (base is None or time_of(base.result) is None or
                                  (time_of(c) is not None and time_of(c) < time_of(base.result))):
                    winners[config_key(c.config)] = Winner(values=self.values[key], variant=key, result=c)
        note = "tuning time budget spent: the search was cut short" if self.cut else ""
        return TuneResult(winners=winners, screened=len(self.results) - 1, note=note)

    def evaluate_timed(self) -> bool:
        base = self.results[variant_key(self.default)]
        return bool(base) and all(time_of(r) is not None for r in base.values())

    def _defaults(self, note: str) -> TuneResult:
        base = self.results[variant_key(self.default)]
        return TuneResult(winners={ck: Winner(values=self.default, variant=variant_key(self.default), result=r)
                                   for ck, r in base.items() if r.correct}, note=note)


def autotune(source: str, configs: list[dict], base: EvalResult,
             evaluate: Callable[[dict, str, list[dict]], EvalResult], max_variants: int = 64,
             max_seconds: float | None = None, parallel: int = 1) -> TuneResult:
    """Tune ``source``'s knobs (see the module docstring)."""
    return Tuner(source, configs, base, evaluate, max_variants, max_seconds, parallel).run()


def _concurrently(fn: Callable, items: list) -> list:
    """``[fn(x) for x in items]``, each call in its own thread; the first exception is raised after all ended."""
    results: list = [None] * len(items)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            results[k] = fn(items[k])
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


__all__ = ["PRODUCT_LIMIT", "SCREEN_SEEDS", "SCREEN_TRIALS", "TuneResult", "Winner", "assign", "autotune",
           "current_values", "time_of", "tunables_of", "variant_key"]
