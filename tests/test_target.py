"""When a config meets the run's target: faster than both baselines, or at the limit of its roofline and tied."""

import pytest

from tileagent.evaluator.records import ConfigResult, Timing
from tileagent.target import meets_target


def result(ours, eager, compiled, roofline, iqr=0.0):
    t = lambda ms: Timing(median_ms=ms, iqr_ms=iqr, trials=50)  # noqa: E731
    return ConfigResult(config={"M": 1}, correct=True, candidate=t(ours), eager=t(eager),
                        compiled=t(compiled) if compiled else None, speedup_eager=eager / ours,
                        speedup_compiled=compiled / ours if compiled else None, roofline_pct=roofline, bound="memory")


@pytest.mark.parametrize("ours, eager, compiled, roofline, iqr, met", [
    (1.00, 1.5, 1.1, 50.0, 0.0, True),     # faster than both
    (1.00, 1.5, 0.9, 50.0, 0.0, False),    # slower than torch.compile, far from the bound
    (1.01, 1.5, 1.00, 98.0, 0.0, True),    # squared ReLU: 98% of the roofline, 0.99x torch.compile: a tie
    (1.05, 1.5, 1.00, 98.0, 0.0, False),   # 5% slower is no tie, however close to the bound
    (1.05, 1.5, 1.00, 98.0, 0.03, True),   # ... unless the trials spread that much
    (1.01, 1.5, 1.00, 90.0, 0.0, False),   # a tie far from the bound: the kernel can still improve
    (1.00, 1.5, None, 50.0, 0.0, True),    # no torch.compile baseline (its note says why)
])
def test_meets_target(ours, eager, compiled, roofline, iqr, met):
    assert meets_target(result(ours, eager, compiled, roofline, iqr), 1.0) is met


def test_a_higher_target_still_counts_a_kernel_at_the_limit():
    assert not meets_target(result(1.0, 1.2, 1.1, 60.0), 1.5)
    assert meets_target(result(1.0, 1.2, 1.0, 97.0), 1.5)
