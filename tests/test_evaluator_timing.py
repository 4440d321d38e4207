"""Timing: statistics, outliers and the roofline on the CPU; the measurement itself on a GPU (marked gpu)."""

import pytest
import torch

from tileagent.evaluator.errors import GuardViolation
from tileagent.evaluator.timing import (
    _close,
    metadata,
    outliers,
    quartiles,
    roofline,
    speedup,
    summarize,
    tensor_bytes,
)


def test_median_iqr_and_outliers_of_trials():
    times = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 5.0]
    t = summarize(times)
    assert t.median_ms == 1.0 and t.trials == 8 and t.outliers == 1
    q1, _, q3 = quartiles(times)
    assert t.iqr_ms == pytest.approx(q3 - q1) and 0 < t.iqr_ms < 0.2
    assert outliers(times) == [7]
    assert outliers([2.0] * 30) == [] and summarize([3.0]).iqr_ms == 0


def test_outliers_on_both_sides():
    times = [10.0] * 10 + [10.5] * 10 + [1.0, 40.0]
    assert outliers(times) == [20, 21]


def test_speedup_is_median_over_median():
    base, cand = summarize([2.0, 2.0, 2.0]), summarize([0.5, 0.5, 0.5])
    assert speedup(base, cand) == 4.0 and speedup(None, cand) is None


def test_roofline_picks_the_slower_bound():
    # 4.8 TB/s and 800 TFLOP/s: 1 GB takes 0.208 ms; 2*4096^3 flops take 0.172 ms
    mem = roofline(1e9, None, time_ms=1e9 / 4800e6 * 2, bandwidth_gbs=4800, matmul_tflops=800)
    assert mem.bound == "memory" and mem.pct == pytest.approx(50, rel=1e-3)
    gemm = roofline(3 * 2 * 4096**2, 2 * 4096**3, time_ms=0.2, bandwidth_gbs=4800, matmul_tflops=800)
    assert gemm.bound == "compute" and gemm.pct == pytest.approx(100 * 0.1718 / 0.2, rel=1e-3)
    assert roofline(1e9, 2 * 4096**3, 1.0, 4800, None).bound == "memory"  # no measured peak: memory only


def test_bytes_and_spec_metadata():
    assert tensor_bytes([torch.empty(10, dtype=torch.float16), 3], torch.empty(4)) == 36

    class Spec:
        BYTES = staticmethod(lambda M, C: 4 * M * C)
        FLOPS = 1000

    assert metadata(Spec, "BYTES", {"M": 2, "C": 8}) == 64 and metadata(Spec, "FLOPS", {}) == 1000
    assert metadata(Spec, "BYTES", {"M": 2, "C": 8, "causal": True}) == 64  # keys it does not name are left out
    assert metadata(Spec, "OTHER", {}) is None and metadata(None, "BYTES", {}) is None


def test_outputs_compare_up_to_accumulation_order_and_same_nonfinite_places():
    ref = [torch.tensor([1.0, 2.0, float("inf")])]
    assert _close([torch.tensor([1.0, 2.0001, float("inf")])], ref)
    assert not _close([torch.tensor([1.0, 2.1, float("inf")])], ref)
    assert not _close([torch.tensor([1.0, 2.0, 5.0])], ref)  # finite where the reference is not
    assert not _close([torch.tensor([1.0, 2.0])], ref) and not _close([], ref)


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@gpu
def test_time_models_on_gpu():
    from tileagent.evaluator.timing import copy_bandwidth_gbs, time_models

    sets = [[torch.randn(4096, 4096, device="cuda", dtype=torch.float16)] for _ in range(3)]
    fields = time_models(lambda x: torch.relu(x), torch.nn.ReLU(), sets, trials=30)
    assert fields["candidate"].trials == 30 and 0 < fields["candidate"].median_ms < 1
    assert 0.5 < fields["speedup_eager"] < 2 and fields["bound"] == "memory"
    assert 10 < fields["roofline_pct"] < 150 and copy_bandwidth_gbs() > 1000


@pytest.mark.gpu
@gpu
def test_results_cached_by_pointer_are_caught():
    from tileagent.evaluator.timing import time_models

    cache = {}

    def cached(x):
        if x.data_ptr() not in cache:
            cache[x.data_ptr()] = torch.relu(x)
        return cache[x.data_ptr()]

    sets = [[torch.randn(1024, 1024, device="cuda")] for _ in range(3)]
    with pytest.raises(GuardViolation, match="changed between an untimed call"):
        time_models(cached, torch.nn.ReLU(), sets, trials=30)
