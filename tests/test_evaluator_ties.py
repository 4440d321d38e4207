"""evaluator.ties and correctness.compare_ties: an int64 (index) output may differ from the reference's where the
reference's own choice among equal values is arbitrary, and nowhere else.

Played LLM, session 22: a MoE top-2 router that takes the lower index of equal probabilities failed on the ties
distribution ("index (1, 1): expected 6, got 1"), three turns in a row, with every weight right.
"""

import textwrap

import pytest
import torch

import tileagent.evaluator.correctness as correctness
import tileagent.evaluator.ties as ties
from tileagent.evaluator.correctness import _ConfigCheck, check_candidate
from tileagent.evaluator.errors import Mismatch
from tileagent.evaluator.spec import ALL_DISTRIBUTIONS, HIDDEN, identical, load_spec
from tileagent.evaluator.ties import TIE_RUNS, perturbed, tie_delta
from tests.conftest import REPO

MOE_REF = REPO / "bench" / "played_llm" / "refs" / "moe_top2.py"
MOE_KERNEL = REPO / "bench" / "played_llm" / "answers" / "moe_top2" / "turn1.py"  # the lower index of equal values
# softmax probabilities underflowing to exactly 0 tie whatever small change the inputs get (the scores rule)
UNDERFLOW = ("row_scales", "outliers", "extremes")


def write(tmp_path, text: str, name: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def lower_index_top2(logits):
    """Plain torch, a kernel's convention: the two largest probabilities, the lower index first among equal ones."""
    p = torch.softmax(logits, dim=-1)
    idx = torch.argsort(p, dim=-1, descending=True, stable=True)[:, :2]
    w = p.gather(1, idx)
    return w / w.sum(-1, keepdim=True), idx


def random_tie_top2(logits):
    """Plain torch: among equal probabilities, any one (a bitonic sort's order), decided by a fixed seed."""
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(logits, dim=-1)
    perm = torch.argsort(torch.rand(p.shape, generator=g), dim=-1)
    idx = perm.gather(1, torch.argsort(p.gather(1, perm), dim=-1, descending=True, stable=True)[:, :2])
    w = p.gather(1, idx)
    return w / w.sum(-1, keepdim=True), idx


def third_instead_of_second(logits):
    """The right weights, but the index of the third largest probability as the second: a wrong index."""
    p = torch.softmax(logits, dim=-1)
    w, idx = torch.topk(p, 3, dim=-1)
    return (w[:, :2] / w[:, :2].sum(-1, keepdim=True)), idx[:, [0, 2]]


def judge(spec, candidate, config, seed, distribution):
    """The candidate's outputs judged as a check judges them (``_ConfigCheck.compare`` with the oracle and the tie
    runs built as ``check`` builds them); returns (the Mismatch or None, the checker)."""
    check = _ConfigCheck(spec, None, "cpu", 0)
    model = spec.make_model(config)
    inputs = spec.make_inputs(config, check.input_seed(seed), distribution)
    ref = spec.run_reference(model, [t.clone() for t in inputs], config)
    outs = candidate(*[t.clone() for t in inputs])
    outs = outs if isinstance(outs, tuple) else (outs,)
    where = {"config": config, "seed": seed, "distribution": distribution, "hidden": distribution in HIDDEN}
    return check.compare(outs, ref, where, 1, check.oracle(model, inputs), check.tie_runs(model, inputs, config)), \
        check


@pytest.fixture(scope="module")
def moe_spec():
    return load_spec(MOE_REF)


@pytest.mark.parametrize("candidate", [lower_index_top2, random_tie_top2])
def test_a_moe_router_choosing_another_of_equal_values_passes_at_the_gpu_sizes(moe_spec, candidate):
    """At the reference's own configs (T=8192, E=8 and T=4096, E=64), three seeds of the ties distribution, where
    thousands of indices differ from the CPU's torch.topk: each is an index the reference itself returns when the
    inputs move by 2^-14 of their values."""
    accepted = 0
    for config in moe_spec.configs:
        for seed in range(3):
            failure, check = judge(moe_spec, candidate, config, seed, "ties")
            assert failure is None, failure.message
            accepted += check.ties_accepted.get(1, 0)
    assert accepted > 1000


def test_the_moe_kernel_that_failed_passes_every_distribution(moe_spec):
    """The played LLM's kernel (turn 1: the lower index of equal probabilities), checked as the CLI checks it on the
    CPU (the interpreter, the run-time guard, every seed and tail, every distribution), passes; the note counts the
    indices accepted."""
    results = check_candidate(moe_spec, MOE_KERNEL, configs=[{"T": 16, "E": 8}, {"T": 16, "E": 64}], seeds=2,
                              distributions=list(ALL_DISTRIBUTIONS), seed=1)
    assert all(r.correct for r in results)
    for r in results:
        (note,) = [n for n in r.notes if "(ties: " in n]
        assert note.startswith("output 1: ") and note.endswith(
            " element(s) differ from the reference's only where it chose among equal values (ties: the same score in "
            "the values its topk / sort / argmax call ranked, or a perturbation of the inputs by up to 2^-14 of each "
            "value (2 epsilons in fp16 and bf16) changes its own choice): accepted")


@pytest.mark.parametrize("distribution", UNDERFLOW)
def test_ties_among_underflowed_probabilities_are_explained_by_the_ranked_scores(moe_spec, distribution):
    """Probabilities that underflow to exactly 0 tie whatever small change the inputs get (no perturbation run
    separates them); the scores the reference's torch.topk ranked show they are equal."""
    for candidate in (lower_index_top2, random_tie_top2):
        failure, check = judge(moe_spec, candidate, {"T": 4096, "E": 64}, 0, distribution)
        assert failure is None, failure.message
        assert check.ties_accepted.get(1, 0) > 0


def test_a_wrong_index_still_fails_and_says_it_selects_another_score(moe_spec):
    for distribution in ("ties", "normal", "extremes"):
        failure, check = judge(moe_spec, third_instead_of_second, {"T": 64, "E": 8}, 0, distribution)
        assert isinstance(failure, Mismatch), distribution
        assert failure.details["output"] == 1 and failure.details["ties_unexplained"] > 0
        assert "differing index(es) select a value other than the one the reference's index selects in the scores " \
               "it ranked (its topk / sort / argmax call): not a choice among equal values" in failure.message
        assert not check.ties_accepted


def test_a_ranking_row_that_names_an_element_twice_fails():
    """Three equal top scores: top-2 may name any two of them, not one of them twice."""
    from tileagent.evaluator.ties import IndexCalls, equal_scores

    scores = torch.tensor([[0.5, 0.5, 0.5, 0.1], [0.9, 0.2, 0.2, 0.0]])
    with IndexCalls() as recorder:
        ref = torch.topk(scores, 2, dim=-1).indices
    assert equal_scores(torch.tensor([[2, 0], [0, 2]]), ref, recorder.calls) == 0
    assert equal_scores(torch.tensor([[1, 1], [0, 1]]), ref, recorder.calls) > 0
    assert equal_scores(torch.tensor([[0, 1], [0, 3]]), ref, recorder.calls) == 1  # 0.0 is not 0.2
    assert equal_scores(torch.tensor([[0, 1], [0, 7]]), ref, recorder.calls) == 1  # out of range


def test_reductions_and_the_flattened_argmax_compare_the_selected_scores():
    from tileagent.evaluator.ties import IndexCalls, equal_scores

    x = torch.tensor([[1.0, 3.0, 3.0], [float("nan"), 0.0, float("nan")]])
    with IndexCalls() as recorder:
        a = x.argmax(dim=1)
        m = torch.max(x, 1, keepdim=True).indices
        flat = torch.argmax(x[:1])
        torch.max(x, x)  # elementwise: no index op
    assert len(recorder.calls) == 3
    assert equal_scores(torch.tensor([2, 2]), a, recorder.calls) == 0  # NaN selects NaN
    assert equal_scores(torch.tensor([0, 0]), a, recorder.calls) == 1  # 1.0 is not 3.0; NaN is the max of row 1
    assert equal_scores(torch.tensor([[2], [2]]), m, recorder.calls) == 0
    assert equal_scores(torch.tensor(2), flat, recorder.calls) == 0
    assert equal_scores(torch.tensor([1, 1]), torch.tensor([5, 5]), recorder.calls) is None  # no call returned it


def _argmax_spec(tmp_path, dtype: str):
    return load_spec(write(tmp_path, f'''
        import torch
        import torch.nn as nn

        CONFIGS = [{{"M": 256, "V": 64}}]


        class Model(nn.Module):
            def forward(self, logits):
                return torch.argmax(logits, dim=-1)


        def get_inputs(M=256, V=64):
            return [torch.randn(M, V, dtype=torch.{dtype})]


        def get_init_inputs(M=256, V=64):
            return []
        ''', f"ref_argmax_{dtype}.py"))


def last_maximum(logits):
    """Another maximal index than torch.argmax's first one: the last."""
    return logits.shape[-1] - 1 - torch.argmax(logits.flip(-1), dim=-1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_an_argmax_returning_another_maximal_index_passes(tmp_path, dtype):
    spec = _argmax_spec(tmp_path, dtype)
    failure, check = judge(spec, last_maximum, spec.configs[0], 0, "ties")
    assert failure is None, failure.message
    assert check.ties_accepted[0] > 10  # about a third of the 256 rows have several maxima


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_an_argmax_returning_a_non_maximal_index_fails(tmp_path, dtype):
    spec = _argmax_spec(tmp_path, dtype)

    def second_largest(logits):
        return torch.topk(logits.float() + torch.arange(logits.shape[-1]) * 1e-6, 2, dim=-1).indices[:, 1]

    for distribution in ("ties", "normal"):
        failure, _ = judge(spec, second_largest, spec.configs[0], 0, distribution)
        assert isinstance(failure, Mismatch) and failure.details["ties_unexplained"] > 0, distribution


@pytest.mark.parametrize("dtype", ["int8", "int32"])
def test_rounding_half_away_from_zero_still_fails_for_quantized_integer_outputs(tmp_path, dtype):
    """The ties distribution exists to catch rounding at exact .5 (torch.round is half to even): an integer output
    other than int64 keeps the exact check, and no perturbation runs for it."""
    spec = load_spec(write(tmp_path, f'''
        import torch
        import torch.nn as nn

        CONFIGS = [{{"M": 16, "N": 64}}]


        class Model(nn.Module):
            def forward(self, x):
                return torch.round(x * 4.0).clamp(-128, 127).to(torch.{dtype})


        def get_inputs(M=16, N=64):
            return [torch.randn(M, N)]


        def get_init_inputs(M=16, N=64):
            return []
        ''', f"ref_quant_{dtype}.py"))

    def half_away(x):
        y = x * 4.0
        return (torch.sign(y) * torch.floor(y.abs() + 0.5)).clamp(-128, 127).to(getattr(torch, dtype))

    failure, check = judge(spec, half_away, spec.configs[0], 0, "ties")
    assert isinstance(failure, Mismatch) and "ties_unexplained" not in failure.details
    assert "rounding ties decided the other way" in failure.message or failure.details["mismatched"] * 100 > 16 * 64
    assert not check.ties_accepted


def test_the_reference_is_not_re_run_when_nothing_mismatches(moe_spec, monkeypatch):
    runs = []
    monkeypatch.setattr(ties, "perturbed", lambda inputs, i, fixed: runs.append(i) or perturbed(inputs, i, fixed))
    config = {"T": 16, "E": 8}
    check_candidate(moe_spec, MOE_KERNEL, configs=[config], seeds=2, distributions=["normal", "uniform"], seed=1)
    assert runs == []
    failure, _ = judge(moe_spec, lower_index_top2, config, 0, "normal")  # the same indices: no run either
    assert failure is None and runs == []
    failure, _ = judge(moe_spec, lower_index_top2, {"T": 64, "E": 8}, 0, "ties")  # the ranked scores explain it
    assert failure is None and runs == []
    monkeypatch.setattr(correctness, "equal_scores", lambda *args: None)  # as for an index output no call returned
    failure, _ = judge(moe_spec, lower_index_top2, {"T": 64, "E": 8}, 0, "ties")  # runs, as few as explain it
    assert failure is None and 0 < len(runs) <= TIE_RUNS


def test_perturbations_move_every_floating_dtype_and_nothing_else():
    """fp16 and bf16 values change (2^-10 would never change a bf16 value), in opposite directions within a pair;
    zeros move; integers, bools, non-finite values and FIXED_INPUTS positions do not; the runs are deterministic."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        x = ((torch.randint(-16, 16, (32, 64)).float() + 0.5) / 4.0).to(dtype)
        x[0, :8], x[1, 0], x[1, 1] = 0.0, float("inf"), float("nan")
        ints, mask = torch.arange(5), torch.ones(3, dtype=torch.bool)
        for i in range(0, TIE_RUNS, 6):  # even: runs i and i + 1 are a pair
            a, b = perturbed([x, ints, mask, 2.0, x], i, frozenset({4})), perturbed([x, ints, mask, 2.0, x], i + 1,
                                                                                      frozenset({4}))
            finite = torch.isfinite(x)
            moved = (a[0] != x) & finite
            assert moved.float().mean() > 0.6, (dtype, i)
            assert bool((a[0][0, :8] != 0).any())
            assert torch.equal(a[1], ints) and a[1] is not ints and torch.equal(a[2], mask) and a[3] == 2.0
            assert identical(a[4], x) and a[0].dtype == dtype
            assert a[0][1, 0] == float("inf") and bool(torch.isnan(a[0][1, 1]))
            both = moved & (b[0] != x)
            up = (a[0].double() - x.double())[both] > 0
            assert torch.equal(up, (b[0].double() - x.double())[both] < 0), (dtype, i)
            size = torch.where(finite, x.double().abs(), torch.zeros(()))
            scale = torch.maximum(size, size.mean(dim=-1, keepdim=True))  # the row's mean for elements below it
            change = (a[0].double() - x.double()).abs()[finite]  # rounding to fp16/bf16 adds at most eps / 2
            assert bool((change <= 1.5 * tie_delta(dtype) * scale[finite]).all()), (dtype, i)
            assert identical(perturbed([x], i)[0], a[0])


def test_an_index_mismatch_reads_as_wrong_indices_not_wrong_math(moe_spec):
    """Played LLM, session 22: "max abs error" and "relative L2" of an index output read as wrong math, and the
    logit quoted at the output's position was not the element the index chose."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    failure, _ = judge(moe_spec, third_instead_of_second, {"T": 16, "E": 8}, 1, "outliers")
    failure = correctness.with_inputs_at_index(failure, [torch.randn(16, 8)])
    d = failure.to_dict()
    assert d["dtype"] == "int64" and "inputs_at_index" not in d
    assert "int64 elements (indices) differ" in d["message"] and "max abs err" not in d["message"]
    text = render_feedback(EvalResult(status="mismatch", message=d["message"], failure=d))
    assert f"{d['mismatched']} of {d['total']} indices (int64) differ from the reference's; an index is exact" in text
    assert "max abs error" not in text and "relative L2" not in text and "Inputs at that index" not in text
    assert "outliers" not in text and "a hidden distribution" in text


def padded_lane_wins(logits):
    """The router's top-2 over 8 experts as a kernel with 16-lane tiles would compute it when its padded lanes,
    filled with 0 instead of -inf, win where every real logit is negative."""
    p = torch.softmax(logits, dim=-1)
    w, idx = torch.topk(p, 2, dim=-1)
    idx = torch.where(logits.max(-1, keepdim=True).values < 0, torch.tensor([8, 9]), idx)
    return w / w.sum(-1, keepdim=True), idx


def test_an_index_outside_the_references_values_is_named_as_a_lane_past_the_end(moe_spec):
    """Played LLM 48: an argmax over 150 channels returned 150 where the padded lanes of its last chunk, unmasked,
    won under 'negative' inputs; the feedback pointed at numerical stability. An index outside every value the
    reference's indices take is named as a position past a dim's end."""
    failure, _ = judge(moe_spec, padded_lane_wins, {"T": 16, "E": 8}, 1, "negative")
    d = failure.to_dict()
    assert d["hint"] == ("9 lies outside the values the reference's indices take (0 to 7): a position past a dim's "
                         "end, as a lane of a tile padded past the real size that won a max or a min (give such "
                         "lanes -inf or +inf first), or an index not offset to its tile's start")
    failure, _ = judge(moe_spec, third_instead_of_second, {"T": 16, "E": 8}, 1, "negative")
    assert "hint" not in failure.to_dict()  # a wrong index within the range: no such pattern


TOP_P_REF = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """A top-p mask: probabilities ranked by a sort that is not stable, the smallest set reaching p kept, the
    rest -inf (which of equal probabilities straddling p is kept is the sort's arbitrary choice)."""
    def forward(self, logits):
        p = torch.softmax(logits, dim=-1)
        sp, idx = torch.sort(p, dim=-1, descending=True)
        keep_sorted = (sp.cumsum(-1) - sp) < 0.5
        keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
        return logits.masked_fill(~keep, float("-inf"))

CONFIGS = [{"B": 16, "V": 64}]
def get_inputs(B=16, V=64):
    return [torch.randn(B, V)]
def get_init_inputs(B=16, V=64):
    return []
'''


def _top_p(order):
    """A top-p mask in plain torch ranking equal probabilities by ``order``: "low" (the lower index first: a stable
    sort), "high" (the higher first), "all" (every probability tied with the last one kept also kept: wrong)."""
    def candidate(logits):
        p = torch.softmax(logits, dim=-1)
        if order == "high":
            sp, idx = torch.sort(p.flip(-1), dim=-1, descending=True, stable=True)
            idx = p.shape[-1] - 1 - idx
        else:
            sp, idx = torch.sort(p, dim=-1, descending=True, stable=True)
        keep_sorted = (sp.cumsum(-1) - sp) < 0.5
        keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
        if order == "all":  # also every element equal to the smallest kept probability
            smallest = torch.where(keep, p, torch.ones_like(p)).amin(-1, keepdim=True)
            keep = keep | (p == smallest)
        return logits.masked_fill(~keep, float("-inf"))
    return candidate


def test_a_float_mask_decided_by_a_rank_among_equal_values_follows_the_tie_rule(tmp_path):
    """Played LLM, session 25: a top-p mask over an unstable sort failed every turn on the ties distribution (which
    of equal probabilities straddling p is masked is the sort's choice). Either convention of a kernel now passes,
    row by row explained by one perturbed run of the reference; keeping every tied element (no run's choice) fails,
    and so does a wrong threshold."""
    spec = load_spec(write(tmp_path, TOP_P_REF, "top_p_ref.py"))
    config = {"B": 16, "V": 64}
    for order in ("low", "high"):
        accepted = 0
        for seed in range(3):
            failure, check = judge(spec, _top_p(order), config, seed, "ties")
            assert failure is None, failure.message
            accepted += check.ties_accepted.get(0, 0)
        assert accepted > 0  # the ties distribution made the sorts disagree somewhere
    failures = [judge(spec, _top_p("all"), config, seed, "ties")[0] for seed in range(3)]
    assert any(f is not None for f in failures)
    wrong = next(f for f in failures if f is not None)
    assert "row(s) are not explained by ties either" in wrong.message and wrong.details["ties_unexplained"] >= 1

    def half_threshold(logits):
        p = torch.softmax(logits, dim=-1)
        sp, idx = torch.sort(p, dim=-1, descending=True, stable=True)
        keep = torch.zeros_like(sp, dtype=torch.bool).scatter(-1, idx, (sp.cumsum(-1) - sp) < 0.3)
        return logits.masked_fill(~keep, float("-inf"))

    failure, _ = judge(spec, half_threshold, config, 0, "normal")  # no ties there: the reference never jumps
    assert failure is not None and "ties" not in failure.message and "ties_unexplained" not in failure.details


def test_the_floating_tie_rule_gives_a_smooth_output_no_slack():
    """A run of the reference that only drifts (within the tolerance of the reference everywhere) explains nothing: a
    kernel just past the tolerance must not pass by landing within the tolerance of the drifted run."""
    from tileagent.evaluator.spec import Tolerance

    class Runs:  # the perturbed runs: the reference drifted by 0.9e-4 (inside its atol of 1e-4)
        calls = 0

        def outputs(self, i):
            self.calls += 1
            return (torch.full((4, 8), 0.9e-4),)

    ref, kernel = torch.zeros(4, 8), torch.full((4, 8), 1.5e-4)  # 1.5e-4 off the reference, 0.6e-4 off the run
    check = _ConfigCheck(None, None, "cpu", 0)
    runs = Runs()
    failure = check.compare_float_ties(0, kernel, ref, runs, Tolerance(1e-4, 1e-4, 1e-3), Mismatch("m"))
    # the reference never jumped where the kernel differs: not a tie, said nowhere, after 4 runs of the reference
    assert failure is not None and failure.message == "m" and "ties_unexplained" not in failure.details
    assert not check.ties_accepted and runs.calls == 4

    class Jumps:  # a run where the reference itself jumped to the kernel's values in row 0 only
        def outputs(self, i):
            out = torch.zeros(4, 8)
            out[0] = 1.5e-4
            return (out,)

    kernel[1:] = 0
    assert check.compare_float_ties(0, kernel, ref, Jumps(), Tolerance(1e-4, 1e-4, 1e-3), Mismatch("m")) is None
    assert check.ties_accepted == {0: 8}


def test_the_oracle_rule_widens_for_an_ill_conditioned_few_of_a_large_output_only():
    """Attention on 'extremes' (scores near 1e8): a kernel summing in another order than the reference is off at a
    few of millions of elements by more than twice the reference's own worst error there, within the reference's
    worst over inputs perturbed by 2 ulps (the spread). That few is accepted by the spread; a kernel off at many
    elements is judged without it, and the reference is not re-run for it."""
    from tileagent.evaluator.correctness import SPREAD_FEW
    from tileagent.evaluator.spec import Tolerance

    n = 100_000
    truth = torch.ones(n, dtype=torch.float64)
    ref = truth.clone()
    ref[7] += 0.1  # the reference's own worst error in this run
    tol = Tolerance(1e-4, 1e-4, 1e-3)
    calls = []

    def spread():
        calls.append(1)
        return 0.4, 2.0, None  # the reference's worst over its perturbed runs: max abs, L2; no oracle moves

    check = _ConfigCheck(None, None, "cpu", 0)
    few = int(SPREAD_FEW * n) // 2
    out = truth.clone()
    out[1000:1000 + few] += 0.5  # > 2 x 0.1, <= 2 x 0.4
    assert check.compare_oracle(0, out.float(), ref.float(), truth, tol, {}, Mismatch("m"), spread) is None
    assert calls == [1] and "oracle-spread" in check.oracle_accepted[0][1]

    many = truth.clone()
    many[1000:1000 + 4 * few] += 0.5
    failure = check.compare_oracle(0, many.float(), ref.float(), truth, tol, {}, Mismatch("m"), spread)
    assert failure is not None and failure.details["oracle_mismatched"] == 4 * few and calls == [1]


def test_an_element_whose_exact_answer_moves_under_perturbed_inputs_passes_within_that_move():
    """GQA prefill on 'extremes' (played LLM session 35, H100): one element off by 2.003x the reference's worst error,
    also beyond its worst over perturbed runs, where 2 ulps of input move the float64 oracle itself by more (on the
    CPU, at the elements the reference misses by > 500, the oracle moves 2.5x that miss). Within the move it passes;
    an element whose oracle stays put is still judged by the reference's error."""
    from tileagent.evaluator.spec import Tolerance

    n = 100_000
    truth = torch.zeros(n, dtype=torch.float64)
    ref = truth.clone()
    ref[7] += 1.0
    moved = torch.zeros(n, dtype=torch.float64)
    moved[5] = 10.0  # an ill-conditioned element: its exact answer moves by 10 on inputs 2 ulps away
    check = _ConfigCheck(None, None, "cpu", 0)
    tol = Tolerance(1e-4, 1e-4, 1.0)
    out = truth.clone()
    out[5] = 4.0  # > 2 x the spread's 1.5, <= 10
    spread = lambda: (1.5, 1.5, moved)  # noqa: E731
    assert check.compare_oracle(0, out.float(), ref.float(), truth, tol, {}, Mismatch("m"), spread) is None
    out[5], out[6] = 0.0, 4.0  # the same error where the oracle does not move
    failure = check.compare_oracle(0, out.float(), ref.float(), truth, tol, {}, Mismatch("m"), spread)
    assert failure is not None and failure.details["oracle_mismatched"] == 1


COLUMN_SUM_REF = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return (x * y).sum(0)

CONFIGS = [{"M": 4096, "D": 64}]

def get_inputs(M, D):
    return [torch.randn(M, D), torch.randn(M, D)]

def get_init_inputs(M, D):
    return []
'''


def test_a_wrong_column_sum_is_not_sent_after_ties():
    """Played LLM session 36: a column sum missing a row failed with "row(s) are not explained by ties either":
    near zero, the sums move past atol under the 2-ulp perturbations, which the rule read as the reference jumping.
    A smooth output answers an antithetic pair of perturbations with opposite moves; a jump does not."""
    import tempfile
    from pathlib import Path

    spec = load_spec(write(Path(tempfile.mkdtemp()), COLUMN_SUM_REF, "column_sum.py"))
    failure, _ = judge(spec, lambda x, y: (x[:-1] * y[:-1]).sum(0), {"M": 4096, "D": 64}, 0, "normal")
    assert failure is not None and "ties" not in failure.message and "ties_unexplained" not in failure.details



NORM_REF = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Rows normalized in float32, rounded to float16: the rounding jumps under perturbations of the inputs."""
    def forward(self, x):
        x = x.float()
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return ((x - mean) * torch.rsqrt(var + 1e-5)).half()

CONFIGS = [{"B": 16, "V": 256}]
DTYPES = torch.float16
def get_inputs(B=16, V=256):
    return [torch.randn(B, V)]
def get_init_inputs(B=16, V=256):
    return []
'''


def test_a_one_pass_variance_gets_no_sentence_about_ties(tmp_path):
    """Played LLM session 37: a one-pass variance (E[x^2] - mean^2, cancelling under a large mean) was told '3576
    row(s) are not explained by ties either', though the reference ranks nothing and no row was a tie (its float16
    rounding jumps under the perturbations). The sentence now comes only where a rank is in the reference or some
    differing row was a tie."""
    spec = load_spec(write(tmp_path, NORM_REF, "norm_ref.py"))

    def one_pass(x):
        x = x.float()
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean
        return ((x - mean) * torch.rsqrt(var.clamp_min(0) + 1e-5)).half()

    failure, _ = judge(spec, one_pass, {"B": 16, "V": 256}, 0, "offset_x1000")
    assert failure is not None and "ties" not in failure.message, failure.message


EDGE_REF = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """float32 arithmetic rounded to float16 at the end, with values around fp16's overflow boundary (65520)."""
    def forward(self, x):
        return (x.float() * 65525.0).to(torch.float16)  # x = +-1 lands just past the boundary

CONFIGS = [{"M": 256, "N": 256}]
def get_inputs(M=256, N=256):
    return [torch.randn(M, N, dtype=torch.float16)]
def get_init_inputs(M=256, N=256):
    return []
'''


def test_the_largest_finite_value_where_the_reference_overflowed_on_the_boundary_passes(tmp_path):
    """Played LLM session 42's LoRA linear on an H100: 5 of 65536 elements "expected -inf, got -65504" (float32 sums in
    another order, one rounding step apart at fp16's overflow boundary; the oracle keeps the reference's casts and
    overflowed too). Such elements pass where inputs perturbed by 2 epsilons make the reference finite; a kernel
    that clamps values far beyond the boundary to 65504 still fails."""
    spec = load_spec(write(tmp_path, EDGE_REF, "edge_ref.py"))
    config = {"M": 256, "N": 256}

    def other_order(x):  # the same product a hair smaller: values just past 65520 round to 65504 instead of inf
        return (x.float() * 65525.0 * (1 - 2.0 ** -12)).to(torch.float16)

    def saturating(x):
        return (x.float() * 65525.0).clamp(-65504, 65504).to(torch.float16)

    failure, check = judge(spec, other_order, config, 0, "normal")
    assert failure is None, failure.message
    with pytest.MonkeyPatch.context() as m:  # the same judgement without the rule: the case it exists for
        m.setattr(correctness, "explained", lambda *a: 0)
        assert "expected inf, got 65504" in judge(spec, other_order, config, 0, "normal")[0].message.replace("-", "")
    assert any("largest finite value where the reference rounded to an infinity" in n for n in check.notes)
    failure, _ = judge(spec, saturating, config, 0, "normal")
    assert failure is not None and "expected inf, got 65504" in failure.message.replace("-", "")
    ref, bad = torch.tensor([float("inf"), 1.0]), torch.tensor([True, True])
    from tileagent.evaluator.overflow_edge import at_edge
    assert at_edge(torch.tensor([65504.0, 2.0]), ref, bad) is None  # another element outside: not this rule's case
    assert at_edge(torch.tensor([-65504.0, 1.0]).half(), ref.half(), torch.tensor([True, False])) is None  # sign
