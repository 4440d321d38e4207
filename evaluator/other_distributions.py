"""After a mismatch: how the same config fares under the other input distributions (played LLM session 43).

In: the config check that raised a Mismatch (``evaluator.correctness._ConfigCheck``: its reference model, the
candidate's model key, the seed and the distribution that failed), the distributions of the check and a time budget.
Out: ``details["distributions"]`` on the Mismatch: per public distribution its verdict ("correct", "wrong",
"wrong, non-finite"), and for the hidden ones a count ("2 of 6 wrong, 1 of them non-finite"), never their names (the
feedback names no hidden distribution: a kernel must not special-case them).
How: one call of the candidate per other distribution, on inputs drawn from the failing seed, compared with the
reference by the check's own rule (``compare``; the oracle and the tie rules included), the distributions that ran
before the failing one on that seed counted as correct without a call; stopped before a call that would likely end
past the budget or the check's own deadline (``probe_until``: the worker's phase limit, so the probe cannot turn the
mismatch into a timeout); the ones not run are left out.
Guarantees: the Mismatch raised is the one found, unchanged but for ``distributions``; an error of a probe call (a
fault, a guard) ends the probe quietly, so nothing the probe does can hide or replace the first failure.
"""

from __future__ import annotations

import logging
import math
import time

from tileagent.evaluator.errors import Mismatch
from tileagent.evaluator.sandbox import Buffer
from tileagent.evaluator.spec import HIDDEN

log = logging.getLogger(__name__)

BUDGET_S = 20.0
"""The most time the probe may add to a failing check."""


def probe(checker, model, key, mismatch: Mismatch, dists: tuple[str, ...], budget_s: float = BUDGET_S) -> Mismatch:
    """``mismatch`` with ``details["distributions"]`` (see the module docstring) when another distribution ran."""
    where = mismatch.details
    failed, seed = where.get("distribution"), where.get("seed")
    if failed not in dists or not isinstance(seed, int) or "tail_of" in where or "trial" in where or len(dists) < 2:
        return mismatch
    verdicts: dict[str, str] = {}
    for d in dists[:dists.index(failed)]:
        verdicts[d] = "correct"  # checked on this seed before the failing one
    verdicts[failed] = _verdict(mismatch)
    start, last = time.perf_counter(), 0.0
    until = min(start + budget_s, checker.probe_until if checker.probe_until is not None else math.inf)
    for d in dists[dists.index(failed) + 1:]:
        began = time.perf_counter()
        if began + last > until:  # the next call would likely end past it
            break
        at = {**{k: where[k] for k in ("config", "seed", "input_seed") if k in where}, "distribution": d,
              "hidden": d in HIDDEN}
        buffers = []
        try:
            inputs = checker.spec.make_inputs(where["config"], checker.input_seed(seed), d, checker.device)
            ref = checker.spec.run_reference(model, [t.clone() for t in inputs], where["config"])
            buffers = [Buffer(t.clone()) for t in inputs]
            outs = checker.call(key, buffers, inputs, at)
            failure = checker.compare(outs, ref, at, 1, checker.oracle(model, inputs),
                                      checker.tie_runs(model, inputs, where["config"]))
        except Exception as e:  # noqa: BLE001 - the first failure stands; the probe only adds to it
            log.info("probe of distribution %r stopped: %s", d, e)
            break
        finally:
            if buffers:
                checker.sandbox.forget(buffers)
        verdicts[d] = "correct" if failure is None else _verdict(failure)
        last = time.perf_counter() - began
    if len(verdicts) > 1:
        mismatch.details["distributions"] = summary(verdicts)
    return mismatch


def _verdict(failure: Mismatch) -> str:
    rel = failure.details.get("rel_l2")
    nonfinite = isinstance(rel, str) and rel == "nan" or isinstance(rel, float) and rel != rel
    return "wrong, non-finite" if nonfinite else "wrong"


def summary(verdicts: dict[str, str]) -> dict:
    """{"public": {name: verdict}, "hidden": [run, wrong, non-finite]} of ``verdicts``."""
    hidden = [v for d, v in verdicts.items() if d in HIDDEN]
    return {"public": {d: v for d, v in verdicts.items() if d not in HIDDEN},
            "hidden": [len(hidden), sum(v != "correct" for v in hidden), sum(v.endswith("non-finite") for v in hidden)]}


ONE_SIDE = "wrong (NaN or inf where the reference is finite, or finite where it is not)"  # a mask not applied too


def sentence(distributions: dict) -> str:
    """The feedback's line for ``summary``'s dict: "The same config and seed under each input distribution:
    'normal' correct, 'uniform' correct; hidden ones: 2 of 6 wrong (1 with NaN or inf on one side only)"."""
    parts = [f"'{d}' {v.replace('wrong, non-finite', ONE_SIDE)}"
             for d, v in distributions.get("public", {}).items()]
    run, wrong, nonfinite = distributions.get("hidden") or (0, 0, 0)
    text = ", ".join(parts)
    if run:
        text += ("; " if text else "") + f"hidden ones: {wrong} of {run} wrong" + (
            f" ({nonfinite} with NaN or inf on one side only)" if nonfinite else "")
    public = distributions.get("public", {})
    if public.get("normal_x0.01") == "correct" and sum(v != "correct" for v in public.values()) >= 2:
        text += (": correct only on values near 0, where a cap, clamp or threshold never acts and a nonlinear "
                 "function is nearly linear; look at where such a function or a scale is applied, unless the "
                 "error grows with the values (precision: there it falls under atol)")  # 44c: a soft cap; 46b: TF32
    return f"\nThe same config and seed under each input distribution: {text}."
