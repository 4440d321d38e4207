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


def test_the_elements_outside_are_located_where_they_gather_along_a_dim(monkeypatch):
    """Played LLM session 37: a token shift that mixed each sequence's first token with the previous sequence's last
    was shown one index and read as a precision problem; every differing element was at t = 0."""
    monkeypatch.setattr(compare, "CHUNK", 1000)  # the sample crosses chunks
    ref = torch.zeros(8, 7, 64)
    out = ref.clone()
    out[1:, 0, :] = 1.0  # t = 0 of batches 1..7
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert c.outside == 7 * 64 and len(c.sample) == c.outside
    assert compare.where_outside(c.sample, (8, 7, 64), c.outside) == \
        "every one at index 0 (the first) of dim 1 (size 7)"
    out = ref.clone()
    out[:, :, 61:] = 1.0  # the last three columns
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (8, 7, 64), c.outside) == \
        "every one at indices 61..63 (the last 3) of dim 2 (size 64)"
    out = ref.clone()
    out[::2, ::2, ::2] = 1.0  # spread over every dim: nothing to say
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (8, 7, 64), c.outside) is None


def test_a_gross_mismatch_is_not_called_a_precision_problem():
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    failure = {"kind": "Mismatch", "output": 0, "index": [2, 0, 5], "expected": 0.5, "got": -0.25, "mismatched": 13353,
               "total": 917504, "atol": 0.01, "rtol": 0.01, "max_abs_err": 2.5, "rel_l2": 0.257, "rel_l2_bound": 0.01,
               "config": {"B": 8}, "seed": 0, "distribution": "normal", "oracle_mismatched": 13353,
               "oracle_max_abs_err": 2.5, "reference_max_abs_err": 0.0065,
               "where_outside": "every one at index 0 (the first) of dim 1 (size 7)"}
    text = render_feedback(EvalResult(status="mismatch", message="m", failure=failure))
    assert "far beyond rounding (relative L2 error above 5%): a wrong element, not precision." in text
    assert "less accurate" not in text
    assert "\nThe differing elements: every one at index 0 (the first) of dim 1 (size 7).\n" in text
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={**failure, "rel_l2": 0.003}))
    assert "your kernel is less accurate than the reference's own arithmetic." in text
