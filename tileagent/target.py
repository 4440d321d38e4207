"""When a config's best kernel meets the run's target.

In: a correct config result (``tileagent.evaluator.records.ConfigResult``) and the target speedup. Out: met or not.
Guarantees: met when the kernel is at least ``target`` times faster than eager PyTorch and than torch.compile (a
missing torch.compile baseline, whose note says why, is not held against it), or when it is "at the limit"
(``at_the_limit``): then no kernel could beat a baseline that reaches the same bound, so a tie is the best outcome.
"""

from __future__ import annotations

AT_LIMIT_ROOFLINE_PCT = 95.0  # a kernel this close to its bound cannot be made meaningfully faster
MIN_NOISE = 0.01  # a tie: within the trials' spread, and never tighter than 1% of the baseline's median


def at_the_limit(r) -> bool:
    """Whether a correct, timed config result is "at the limit": at >= ``AT_LIMIT_ROOFLINE_PCT`` % of its roofline
    and, against every baseline it does not beat, a tie within the timing noise (the sum of both IQRs, at least
    ``MIN_NOISE`` of the baseline's median). Such a config meets the target: physics, not the kernel, sets its
    speed, and a baseline that reaches the same bound is only tied."""
    if r.roofline_pct is None or r.roofline_pct < AT_LIMIT_ROOFLINE_PCT or r.candidate is None or r.eager is None:
        return False
    for base in (r.eager, r.compiled):
        if base is None:
            continue
        noise = max(r.candidate.iqr_ms + base.iqr_ms, MIN_NOISE * base.median_ms)
        if r.candidate.median_ms > base.median_ms + noise:
            return False
    return True


def meets_target(r, target: float) -> bool:
    """Whether a correct, timed config result meets ``target`` (see the module docstring)."""
    if r.speedup_eager is not None and r.speedup_eager >= target and \
            (r.speedup_compiled is None or r.speedup_compiled >= target):
        return True
    return at_the_limit(r)
