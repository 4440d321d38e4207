"""The evaluator's element by element comparison in chunks (evaluator.compare): the figures and the mask of the whole
tensors at once, whatever the chunk size."""

import math

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
        "every one at index 0 (the first) of dim 1 (size 7); at indices 1..7 of dim 0 (size 8), none at index 0"
    out = ref.clone()
    out[:, :, 61:] = 1.0  # the last three columns
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (8, 7, 64), c.outside) == \
        "every one at indices 61..63 (the last 3) of dim 2 (size 64)"
    out = ref.clone()
    out[::2, ::2, ::2] = 1.0  # a stride's pattern; dim 2's 32 runs each side are too many to name
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (8, 7, 64), c.outside) == \
        "every one at indices 0, 2, 4, 6 of dim 0 (size 8), none at indices 1, 3, 5, 7; " \
        "at indices 0, 2, 4, 6 of dim 1 (size 7), none at indices 1, 3, 5"
    out = ref.clone()
    out[torch.rand(8, 7, 64) < 0.5] = 1.0  # spread at random: nothing to say
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (8, 7, 64), c.outside) is None


def test_the_rows_holding_the_elements_outside_are_named_when_others_hold_none():
    """Played LLM session 42: a segmented sum without the segment-end mask was wrong in 2 of its 3 segments; the
    feedback named one element and a chance match, nothing said which segments were wrong."""
    ref = torch.zeros(3, 4096)
    out = ref.clone()
    out[1:, ::3] = 1.0  # segments 1 and 2, a third of their columns
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (3, 4096), c.outside) == \
        "every one at indices 1, 2 of dim 0 (size 3), none at index 0"
    out = torch.zeros(64, 2, 32)
    out[[0, 5, 6, 7, 40], 1, :] = 1.0
    c = compare.compared(out, torch.zeros(64, 2, 32), Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (64, 2, 32), c.outside) == \
        "every one at indices 0, 5..7, 40 of dim 0 (size 64), none at indices 1..4, 8..39, 41..63; " \
        "at index 1 of dim 1 (size 2), none at index 0"
    out = torch.zeros(27, 4, 128)  # played LLM session 44: a rotary whose frequencies 24..39 read the wrong position
    out[:, :, 24:40] = out[:, :, 88:104] = 1.0
    out[[6, 10, 14]] = 0.0  # tokens whose two positions agree
    c = compare.compared(out, torch.zeros(27, 4, 128), Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (27, 4, 128), c.outside) == \
        "every one at indices 0..5, 7..9, 11..13, 15..26 of dim 0 (size 27), none at indices 6, 10, 14; " \
        "at indices 24..39, 88..103 of dim 2 (size 128), none at indices 0..23, 40..87, 104..127"
    out = torch.zeros(5, 256)
    out[torch.arange(5).repeat(3)[:13], torch.arange(13) * 17] = 1.0  # 13 scattered elements: a clean row is chance
    c = compare.compared(out, torch.zeros(5, 256), Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (5, 256), c.outside) is None


def test_an_input_whose_largest_values_sit_in_the_wrong_rows_is_named():
    """Played LLM session 42: a rank-16 update overflowed float16 in the one row of a hidden distribution's extreme
    inputs (the last of 5), and the feedback's "index 4 (the last) of dim 0" was read as a tail bug."""
    x = torch.randn(5, 64)
    x[4, 7] = 16000.0
    ref = torch.zeros(5, 48)
    ref[4, 3] = -math.inf
    out = ref.clone()
    out[4, 3] = -65504.0
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    held = compare.held_indices(c.sample, (5, 48), c.outside)
    assert held == {0: [4], 1: [3]}
    assert compare.input_peaks([x, torch.ones(48), torch.arange(5.0)], (5, 48), held) == \
        [[0, 0, 16000.0, float(x[:4].abs().max())]]
    x[4, 7] = 3.0  # no input larger there: nothing to say
    assert compare.input_peaks([x], (5, 48), held) == []
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback
    failure = {"kind": "Mismatch", "output": 0, "index": [4, 3], "expected": "-inf", "got": -65504.0, "mismatched": 1,
               "total": 240, "atol": 0.01, "rtol": 0.01, "max_abs_err": "nan", "rel_l2": "nan", "config": {"T": 5},
               "seed": 0, "distribution": "extremes", "hidden": True, "inputs_peak": [[0, 0, 16000.0, 3.91]]}
    text = render_feedback(EvalResult(status="mismatch", message="m", failure=failure))
    assert "Input 0 is largest there: |values| up to 1.6e+04 at those indices of dim 0, at most 3.91 at the others " \
           "(an overflow or a precision loss at large magnitudes, rather than an index or tail error?)" in text


def test_a_sample_of_the_elements_outside_spreads_over_the_whole_tensor(monkeypatch):
    """Played LLM session 38: with 99% of an output wrong, the first 2^20 elements outside all sat in its first rows,
    and the feedback said they gathered at indices 0..258 of dim 0. The sample is now every 2^k-th of them."""
    monkeypatch.setattr(compare, "CHUNK", 1000)
    monkeypatch.setattr(compare, "SAMPLE", 300)
    ref = torch.zeros(64, 40)
    out = torch.ones(64, 40)  # every element wrong
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert c.outside == 2560 and c.stride == 16 and c.sample == list(range(0, 2560, 16))
    assert compare.where_outside(c.sample, (64, 40), c.outside) is None
    out = ref.clone()
    out[:, 37:] = 1.0  # the last three columns: 192 elements, all kept
    c = compare.compared(out, ref, Tolerance(1e-3, 1e-3, 1e-2))
    assert compare.where_outside(c.sample, (64, 40), c.outside) == \
        "every one at indices 37..39 (the last 3) of dim 1 (size 40)"
    out = torch.zeros(64, 40, 8)
    out[:, 39, :] = 1.0
    c = compare.compared(out, torch.zeros(64, 40, 8), Tolerance(1e-3, 1e-3, 1e-2))
    assert c.outside == 512 and c.stride == 2
    assert compare.where_outside(c.sample, (64, 40, 8), c.outside) == \
        "every one of 256 sampled evenly from them at index 39 (the last) of dim 1 (size 40)"


def test_rows_off_by_one_amount_each_are_named_and_not_called_precision():
    """Played LLM session 45: a sparsemax threshold divided by the row's length instead of its support count shifted
    each row's nonzero outputs by one amount (18 of 500 elements, relative L2 0.3%); the float64 line called it
    "less accurate than the reference's own arithmetic", and the "fix" (more bisection steps) passed with the bug."""
    from tileagent.evaluator.compare import common_offset
    from tileagent.evaluator.records import EvalResult
    from tileagent.evaluator.spec import Tolerance
    from tileagent.feedback import render_feedback

    tol = Tolerance(1e-4, 1e-4, 1e-4)
    ref = torch.zeros(4, 50)
    ref[0, :2], ref[1, :3], ref[2, :4], ref[3, 0] = torch.tensor([.3, .7]), torch.tensor([.5, .25, .25]), \
        torch.tensor([.1, .2, .3, .4]), 1.0
    out = ref.clone()
    out[0, :2] += 2e-4
    out[1, :3] += 5e-4
    out[2, :4] -= 9e-4
    assert common_offset(out, ref, tol) == "by +0.0002 at 2 elements in row 0, by +0.0005 at 3 elements in row 1, " \
                                           "by -0.0009 at 4 elements in row 2"
    assert common_offset(ref + 0.5, ref, tol) == "by +0.5, every one of them"
    assert common_offset(ref + torch.randn(4, 50) * 1e-2, ref, tol) is None  # noise: no one amount a row
    assert common_offset(ref.unsqueeze(0).expand(2, 4, 50) + 0.25 * torch.arange(1., 3.).view(2, 1, 1),
                         ref.unsqueeze(0).expand(2, 4, 50), tol) == "by +0.25 at 50 elements in row (0, 0), by +0.25 " \
                                                                   "at 50 elements in row (0, 1), by +0.25 at 50 " \
                                                                   "elements in row (0, 2), ..."
    failure = {"kind": "Mismatch", "output": 0, "index": [2, 3], "expected": 0.4, "got": 0.3991, "mismatched": 9,
               "total": 200, "atol": 1e-4, "rtol": 1e-4, "max_abs_err": 9e-4, "rel_l2": 0.0015, "config": {"M": 4},
               "seed": 0, "distribution": "normal", "oracle_mismatched": 9, "oracle_max_abs_err": 9e-4,
               "reference_max_abs_err": 3e-8}
    text = " ".join(render_feedback(EvalResult(status="mismatch", message="m", failure=failure)).split())
    assert "your kernel is less accurate than the reference's own arithmetic." in text
    text = " ".join(render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure, "systematic": True})).split())
    assert "(max abs error 0.0009, the reference's 3e-08): a systematic error (the pattern above), not precision." \
        in text
    text = " ".join(render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure, "expected": 0.007, "got": 0.0103})).split())  # 47% off an element 70 atol large
    assert "far beyond rounding (the element shown is 47% off its value): a wrong element, not precision." in text


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
    # played LLM 48: dy - sum(dy * y) in bf16 at dy ~ 64 (a hidden distribution), correct under 'normal': precision
    text = " ".join(render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure, "distribution": "a hidden distribution", "hidden": True,
        "distributions": {"public": {"normal": "correct", "uniform": "correct"}, "hidden": [6, 2, 0]}})).split())
    assert "far beyond rounding (relative L2 error above 5%), yet the same config and seed are correct under " \
           "'normal' (below): these values break a step the others do not, by precision or range (a difference of " \
           "nearly equal values held in fp16 / bf16" in text and "a wrong element, not precision" not in text
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={**failure, "rel_l2": 0.003,
                                                                                "got": 0.46}))  # 8% off
    assert "your kernel is less accurate than the reference's own arithmetic." in text
    # played LLM session 44b: a min-p mask applied on the raw logits kept tokens the reference masks to -inf; the
    # float64 line called that precision, and the distributions line said "NaN or inf where the reference is finite"
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure, "rel_l2": "nan", "max_abs_err": "nan", "oracle_max_abs_err": 2.4e-7,
        "reference_max_abs_err": 2.4e-7, "distributions": {"public": {"normal": "wrong, non-finite"},
                                                           "hidden": [2, 1, 1]}}))
    assert "13353 element(s) differ too, some of them infinite or NaN on one side only: a mask, a fill or an " \
           "overflow, not precision." in text and "less accurate" not in text
    assert "'normal' wrong (NaN or inf where the reference is finite, or finite where it is not); hidden ones: 1 " \
           "of 2 wrong (1 with NaN or inf on one side only)." in text
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={**failure, "found_at": [3, 6, 5],
                                                                                 "found_count": 2}))
    assert ("every one at index 0 (the first) of dim 1 (size 7).\nThe value got at that index is the reference's at "
            "index (3, 6, 5) (and at 1 other element(s)): an element read from the wrong place?\n") in text


def test_every_later_output_that_differs_is_named_with_the_first():
    """Played LLM session 38: a MoE permutation returned (rows, row map); the feedback named output 0 (rows gathered
    through the map) and never the map itself, which the kernel had not written (the int64 poison)."""
    from types import SimpleNamespace

    from tileagent.evaluator.correctness import _ConfigCheck
    from tileagent.evaluator.errors import Mismatch
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    spec = SimpleNamespace(tolerance=lambda dtype: Tolerance(1e-2, 1e-2, 1e-2))
    ref = [torch.ones(4, 3), torch.arange(6), torch.zeros(2)]
    outs = [torch.zeros(4, 3), torch.full((6,), torch.iinfo(torch.int64).min), torch.zeros(2)]
    outs[1][0] = 0
    failure = Mismatch("output 0 differs", output=0, index=[0, 0], expected=1.0, got=0.0)
    failure = _ConfigCheck.also_differ(SimpleNamespace(spec=spec), failure, 0, outs, ref)
    assert failure.message == "output 0 differs; output 1 differs too (5 of 6 elements)"
    assert failure.details["other_outputs"] == [{"output": 1, "mismatched": 5, "total": 6, "index": [1],
                                                 "expected": 1.0, "got": -9.223372036854776e18, "dtype": "int64"}]
    text = render_feedback(EvalResult(status="mismatch", message=failure.message, failure={
        **failure.details, "mismatched": 12, "total": 12, "atol": 0.01, "rtol": 0.01, "max_abs_err": 1.0,
        "rel_l2": 1.0, "config": {"M": 4}, "seed": 0, "distribution": "normal"}))
    assert "\nOutput 1 differs too: 5 of 6 elements, e.g. at index (1,): expected 1, got -9223372036854775808.\n" \
        in text
    # played LLM session 40: the outputs that match are named too (a router's indices right, its weights wrong)
    assert failure.details["matching_outputs"] == [2] and "\nOutput 2 matches the reference.\n" in text
    later = _ConfigCheck.also_differ(SimpleNamespace(spec=spec), Mismatch("output 1 differs", output=1, index=[1],
                                                                          expected=1.0, got=0.0), 1, ref, ref)
    assert later.details["matching_outputs"] == [0, 2]


def test_a_single_value_that_differs_is_given_as_a_factor():
    """Played LLM session 44: a BitNet quantizer divided its mean by the padded element count (40 rows for 37); the
    feedback led with the int8 values, one grid step off, and left the scale's 0.925 = 37/40 to the reader."""
    from types import SimpleNamespace

    from tileagent.evaluator.correctness import _ConfigCheck
    from tileagent.evaluator.errors import Mismatch
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    spec = SimpleNamespace(tolerance=lambda dtype: Tolerance(1e-2, 1e-2, 1e-2))
    ref = [torch.zeros(4, 3, dtype=torch.int8), torch.tensor(0.798), torch.linspace(1, 2, 16)]
    outs = [torch.ones(4, 3, dtype=torch.int8), torch.tensor(0.798 * 37 / 40), torch.linspace(1, 2, 16) * 2]
    failure = _ConfigCheck.also_differ(SimpleNamespace(spec=spec), Mismatch("m", output=0, index=[0, 0]), 0, outs,
                                       ref)
    scale, doubled = failure.details["other_outputs"]
    assert abs(scale["ratio"] - 37 / 40) < 1e-6 and abs(doubled["ratio"] - 2.0) < 1e-6
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure.details, "expected": 0.0, "got": 1.0, "mismatched": 12, "total": 12, "atol": 0, "rtol": 0,
        "max_abs_err": 1.0, "rel_l2": 1.0, "config": {"N": 4}, "seed": 0, "distribution": "normal", "dtype": "int8"}))
    assert "expected 0.798, got 0.7382 (0.925 times the reference's; a single value: outputs computed from it " \
           "differ as a consequence)." in text
    assert "(2 times the reference's)." in text
    # played LLM session 44c: an empty bag's row all zeros read "the reference's times -0: a factor missing"
    assert compare.common_ratio(torch.zeros(16), torch.linspace(1, 2, 16), Tolerance(1e-2, 1e-2, 1e-2)) is None


def test_rows_off_by_one_factor_each_are_named_and_not_called_precision():
    """Played LLM session 46: a decode whose key mask reached one key past S added a term to each (batch, head) row's
    softmax denominator: every value of such a row was the reference's times its own factor near 0.96, 442 of 20480
    elements off at relative L2 2%, and the feedback called it "less accurate than the reference's own arithmetic"."""
    from tileagent.evaluator.compare import common_offset
    from tileagent.evaluator.spec import Tolerance

    tol = Tolerance(2e-3, 2e-2, 2e-2)
    torch.manual_seed(0)
    ref = torch.randn(2, 3, 64).bfloat16().float()
    factors = torch.tensor([[0.9617, 1.0, 0.95], [1.0, 0.97, 1.0]]).view(2, 3, 1)
    out = (ref * factors).bfloat16().float()
    assert common_offset(out, ref, tol, ratio=True) == "times 0.9609 at 61 elements in row (0, 0), times 0.95 at 64 " \
                                                       "elements in row (0, 2), times 0.9699 at 53 elements in row " \
                                                       "(1, 1)"  # medians of bf16-rounded ratios
    assert common_offset(out, ref, tol) is None  # not one amount added a row
    noisy = (ref * (1 + 0.05 * torch.randn_like(ref))).bfloat16().float()
    assert common_offset(noisy, ref, tol, ratio=True) is None  # precision-like scatter: no one factor a row
    zeros = ref * (torch.arange(3).view(1, 3, 1) != 1)  # played LLM 48b: rows read past a table's end are 0
    assert common_offset(zeros, ref, tol, ratio=True) is None  # no factor: not "times 0 ... a normalizer"


def test_a_mismatch_names_its_tail_and_the_configs_left_unchecked():
    """Played LLM session 46: the failing size was a tail (B=5, S=25) of a config that passed, and checking had
    stopped there; the feedback said neither, and the player read the error as precision."""
    from tileagent.evaluator.records import ConfigResult, EvalResult
    from tileagent.feedback import render_feedback

    failure = {"kind": "Mismatch", "output": 0, "index": [4, 35, 9], "expected": -0.6133, "got": -0.5898,
               "mismatched": 442, "total": 20480, "atol": 2e-3, "rtol": 2e-2, "max_abs_err": 0.027, "rel_l2": 0.0198,
               "config": {"B": 5, "S": 25}, "tail_of": {"B": 2, "S": 100}, "seed": 0, "distribution": "normal"}
    asked = [{"B": 1, "S": 64}, {"B": 2, "S": 100}, {"B": 2, "S": 300}, {"B": 3, "S": 40}]
    result = EvalResult(status="mismatch", message="m", failure=failure,
                        configs=[ConfigResult(config=asked[0], correct=True)])
    text = " ".join(render_feedback(result, asked=asked).split())
    assert "Inputs: config B=5, S=25 (a tail size of config B=2, S=100, which itself passed: sizes just off the " \
           "config's, where a tile ends part-full), seed 0" in text
    assert "Checking stops at the first failing config: B=1, S=64 passed, B=2, S=300; B=3, S=40 not checked this " \
           "turn." in text
    assert "Checking stops" not in render_feedback(result)  # batch runs check every config
    shrunk = {**failure, "config": {"B": 1, "S": 100}}  # played LLM 48: the failing config at the interpreter's B
    shrunk.pop("tail_of")
    text = " ".join(render_feedback(result.model_copy(update={"failure": shrunk}), asked=asked).split())
    assert "Checking stops at the first failing config: B=1, S=64 passed, B=2, S=300; B=3, S=40 not checked this " \
           "turn." in text
    close = EvalResult(status="mismatch", message="m", failure={**failure, "expected": 14.0554, "got": 14.0575})
    assert "expected 14.055, got 14.057." in render_feedback(close)  # played LLM 46b: "expected 14.06, got 14.06"


def test_a_kernel_correct_only_near_zero_is_pointed_at_its_nonlinearity():
    """Played LLM session 44c: a soft cap applied before the attention scale was correct under 'normal_x0.01' only
    (tanh is linear there); the distributions line said so without saying what it means."""
    from tileagent.evaluator.other_distributions import sentence

    wrong = {"normal": "wrong", "uniform": "wrong", "normal_x3": "wrong", "normal_x0.01": "correct"}
    assert sentence({"public": wrong, "hidden": [6, 6, 0]}).endswith(
        "hidden ones: 6 of 6 wrong: correct only on values near 0, where a cap, clamp or threshold never acts and a "
        "nonlinear function is nearly linear; look at where such a function or a scale is applied, unless the error "
        "grows with the values (precision: there it falls under atol).")
    assert "near 0" not in sentence({"public": {**wrong, "normal": "correct", "uniform": "correct"}})


WHERE = {"config": {"B": 8}, "seed": 0, "distribution": "normal"}


def test_a_wrong_value_found_elsewhere_in_the_reference_is_pointed_at():
    """Played LLM session 38: a window partition with rows and columns swapped wrote other windows' values; the value
    got is the reference's at another index (a rare value: a quantized output's common steps say nothing)."""
    from types import SimpleNamespace

    from tileagent.evaluator.correctness import _ConfigCheck

    torch.manual_seed(0)
    ref = torch.randn(8, 49, 16)
    out = ref.clone()
    out[3] = ref[3].reshape(7, 7, 16).transpose(0, 1).reshape(49, 16)  # window 3: row and column swapped
    check = SimpleNamespace(max_abs=0.0, rel_l2=0.0)
    failure = _ConfigCheck.compare_one(check, 0, out, ref, Tolerance(1e-3, 1e-3, 1e-2), WHERE, 1)
    i = tuple(failure.details["index"])
    assert failure.details["found_count"] == 1
    assert float(ref[tuple(failure.details["found_at"])]) == float(out[i]) != float(ref[i])
    assert f"the value got is the reference's at index {tuple(failure.details['found_at'])}" in failure.message
    q = torch.randint(-3, 4, (64, 64)).to(torch.int8)  # a quantized output one step off: every value is common
    off = q.clone()
    off[5, 7] += 1
    failure = _ConfigCheck.compare_one(check, 0, off, q, Tolerance(0, 0, 0), WHERE, 1)
    assert "found_at" not in failure.details


def test_a_wrong_value_that_is_another_outputs_is_pointed_at():
    """Played LLM session 41: a fused QKV split read k from q's columns; k's wrong values are q's (output 0's), which
    the search within output 1 cannot find. The feedback names the output and the index."""
    from types import SimpleNamespace

    from tileagent.evaluator.correctness import _ConfigCheck
    from tileagent.evaluator.errors import Mismatch
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    torch.manual_seed(0)
    ref = [torch.randn(5, 4, 8), torch.randn(5, 2, 8), torch.randn(5, 2, 8)]
    outs = [ref[0].clone(), ref[0][:, :2].clone(), ref[2].clone()]
    spec = SimpleNamespace(tolerance=lambda dtype: Tolerance(1e-2, 1e-2, 1e-2))
    failure = Mismatch("output 1 differs", output=1, index=[0, 1, 7], expected=float(ref[1][0, 1, 7]),
                       got=float(outs[1][0, 1, 7]))
    failure = _ConfigCheck.also_differ(SimpleNamespace(spec=spec), failure, 1, outs, ref)
    assert failure.details["found_in"] == 0 and failure.details["found_at"] == [0, 1, 7]
    assert failure.message.endswith("; the value got is the reference's output 0 at index (0, 1, 7)")
    text = render_feedback(EvalResult(status="mismatch", message=failure.message, failure={
        **failure.details, "mismatched": 80, "total": 80, "atol": 0.01, "rtol": 0.01, "max_abs_err": 3.0,
        "rel_l2": 1.4, "config": {"T": 5}, "seed": 0, "distribution": "normal"}))
    assert ("The value got at that index is the reference's output 0 at index (0, 1, 7): an element read from the "
            "wrong place?") in text


def test_a_chance_match_in_a_dense_low_precision_output_is_not_pointed_at():
    """Played LLM session 42: in a bfloat16 output nearly any wrong value is some element's value (948 of 1,000 random
    ones were "found"), so the pointer named a chance element. There only a match in the failing element's row, a
    few elements away (a swapped pair, a shifted read), counts; a float32 output keeps the search of the whole."""
    from types import SimpleNamespace

    from tileagent.evaluator.correctness import _ConfigCheck

    torch.manual_seed(0)
    ref = torch.randn(64, 512).to(torch.bfloat16)
    check = SimpleNamespace(max_abs=0.0, rel_l2=0.0)
    far = ref.clone()
    row = ref[3, 92:109].tolist()
    values, counts = ref.unique(return_counts=True)
    rare = [v for v, n in zip(values.tolist(), counts.tolist()) if n <= 2 and 1.5 < abs(v) < 3 and v not in row]
    far[3, 100] = rare[len(rare) // 2]  # a wrong value one or two other elements hold by chance, none near it
    failure = _ConfigCheck.compare_one(check, 0, far, ref, Tolerance(1e-2, 1e-2, 1e-2), WHERE, 1)
    assert failure.details["index"] == [3, 100] and "found_at" not in failure.details
    swapped = ref.clone()
    swapped[3, 100], swapped[3, 103] = ref[3, 103], ref[3, 100]
    failure = _ConfigCheck.compare_one(check, 0, swapped, ref, Tolerance(1e-3, 1e-3, 1e-3), WHERE, 1)
    assert failure.details["found_at"] == [3, 103 if failure.details["index"] == [3, 100] else 100]


def test_nan_where_the_reference_is_infinite_is_told_as_such():
    """Played LLM session 42: "expected inf, got nan (NaN where the reference is finite...)" misread the case."""
    from types import SimpleNamespace

    from tileagent.evaluator.correctness import _ConfigCheck

    ref = torch.ones(4, 8)
    ref[1, 2] = math.inf
    out = ref.clone()
    out[1, 2] = math.nan
    failure = _ConfigCheck.compare_one(SimpleNamespace(max_abs=0.0, rel_l2=0.0), 0, out, ref,
                                       Tolerance(1e-3, 1e-3, 1e-3), WHERE, 1)
    assert "expected inf, got nan (NaN where the reference is infinite: inf - inf, 0 * inf or inf / inf" \
        in failure.message


def test_a_common_factor_between_the_output_and_the_reference_is_found(monkeypatch):
    """Played LLM session 43b: a grouped RMSNorm divided by D instead of D / 8; every value was sqrt(8) times too
    large, and the feedback quoted one element. A constant ratio over the differing elements is named; noise is not."""
    monkeypatch.setattr(compare, "CHUNK", 1000)
    ref = torch.randn(64, 40) + 3.0
    tol = Tolerance(1e-2, 1e-2, 1e-2)
    assert compare.common_ratio(ref * 8 ** 0.5, ref, tol) == pytest.approx(8 ** 0.5)
    bf = ref.bfloat16()
    assert compare.common_ratio((bf.float() * 8 ** 0.5).bfloat16(), bf, tol) == pytest.approx(8 ** 0.5, rel=0.01)
    assert compare.common_ratio(ref.half(), ref.half(), tol) is None  # nothing outside
    assert compare.common_ratio(ref + torch.randn(64, 40), ref, tol) is None  # errors, but no common factor
    assert compare.common_ratio(ref * (1 + 1e-3), ref, tol) is None  # inside the tolerance


def test_precision_noise_is_not_one_factor_a_row():
    """An fp16-accumulating GEMM's rows are the reference's times 1 +- 1e-3 at every element: within 2% of each other,
    they read as one factor a row (systematic), and without the TF32 line the feedback said so on some draws."""
    from tileagent.evaluator.compare import common_offset
    from tileagent.evaluator.spec import Tolerance

    torch.manual_seed(0)
    ref = torch.randn(16, 32)
    noisy = ref * (1 + 1e-3 * torch.randn_like(ref))
    assert common_offset(noisy, ref, Tolerance(1e-5, 1e-5, 1e-5), ratio=True) is None
    assert common_offset(ref * 0.99, ref, Tolerance(1e-5, 1e-5, 1e-5), ratio=True) == "times 0.99, every one of them"
    ref16 = ref.bfloat16()  # a factor 3% off 1 on a bf16 output stands out of its rounding (eps 2^-7)
    assert common_offset((ref16.float() * 0.97).bfloat16(), ref16, Tolerance(1e-3, 1e-2, 1e-2), ratio=True) is not None
