"""The evaluator's element by element comparison in chunks (evaluator.compare): the figures and the mask of the whole
tensors at once, whatever the chunk size."""

import pytest
import torch

from tileagent.evaluator import compare
from tileagent.evaluator.spec import Tolerance


def _case(seed):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(37, 53, generator=g)
    out = ref + 1e-4 * torch.randn(37, 53, generator=g)
    out.view(-1)[[5, 700, 1900]] += torch.tensor([0.5, -2.0, 2.0])  # outside; 700 and 1900 tie on score
    ref.view(-1)[11] = float("nan")
    out.view(-1)[11] = float("inf")  # inside: the reference is NaN there
    out.view(-1)[1500] = float("nan")  # a NaN where the reference is finite
    return out, ref


@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_chunked_figures_and_mask_equal_the_whole_tensors_ones(monkeypatch, chunk):
    tol = Tolerance(1e-3, 1e-3, 1e-2)
    out, ref = _case(chunk)
    whole, mask = compare.compared(out, ref, tol), compare.outside(out, ref, tol)
    monkeypatch.setattr(compare, "CHUNK", chunk)
    part = compare.compared(out, ref, tol)
    assert torch.equal(compare.outside(out, ref, tol), mask)
    assert mask.view(-1).nonzero().view(-1).tolist() == [5, 700, 1500, 1900]
    assert (part.outside, part.worst, part.nonfinite, part.max_abs) == (whole.outside, whole.worst, True, whole.max_abs)
    assert part.worst == 1500  # the non-finite element first
    assert part.err_l2 == pytest.approx(whole.err_l2, rel=1e-12) and part.ref_l2 == pytest.approx(whole.ref_l2)


def test_with_nothing_outside_the_worst_is_the_first_largest_error(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK", 10)
    ref = torch.zeros(95)
    out = ref.clone()
    out[[33, 71]] = 1e-4  # equal errors, both inside: the first
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert (c.outside, c.worst, c.max_abs) == (0, 33, pytest.approx(1e-4))


def test_the_finite_range_skips_nan_and_infinities_in_every_chunk(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK", 4)
    t = torch.tensor([1.0, float("nan"), -3.0, 2.0, float("inf"), 0.5, -0.25, 7.0, float("-inf")])
    assert compare.finite_range(t) == (7.0, -3.0, 7.0, False)
    assert compare.finite_range(torch.full((9,), 2.0, dtype=torch.bfloat16)) == (2.0, 2.0, 2.0, True)
    peak, lo, hi, every = compare.finite_range(torch.tensor([float("nan")] * 5))
    assert (peak, lo > hi, every) == (-float("inf"), True, False)
