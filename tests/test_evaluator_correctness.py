"""evaluator.candidate and evaluator.correctness: loading candidates, building models, and what the check reports."""

import math
import textwrap

import pytest
import torch

from tileagent.evaluator.candidate import build_models, load_candidate
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.errors import CompileFailed, LoadFailed, Mismatch, RunFailed, SpecError
from tileagent.evaluator.spec import load_spec
from tests.conftest import REPO

REDTEAM = REPO / "tests" / "redteam"

RELU_SCALE = '''
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def relu_scale(M, N, threads=32):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=threads) as row:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                x[j] = BODY
            T.copy(x, Y[row, 0])

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_scale(*x.shape)(x)
'''


def write(tmp_path, text: str, name: str = "cand.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(scope="module")
def relu_spec():
    return load_spec(REDTEAM / "ref_relu_scale.py")


def relu_candidate(tmp_path, body: str, name: str = "cand.py"):
    return write(tmp_path, RELU_SCALE.replace("BODY", body), name)


# -- loading -------------------------------------------------------------------------------------------------------


def load_error(tmp_path, text: str) -> LoadFailed:
    with pytest.raises(LoadFailed) as info:
        load_candidate(write(tmp_path, text))
    return info.value


def test_candidate_syntax_error(tmp_path):
    assert load_error(tmp_path, "import torch\nx = [1,\n").message == "cand.py:2: syntax error: '[' was never closed"


def test_candidate_without_model_new(tmp_path):
    text = RELU_SCALE.replace("BODY", "x[j]").replace("class ModelNew", "class Model")
    assert load_error(tmp_path, text).message == (
        "cand.py defines no class ModelNew (the candidate format: class ModelNew(nn.Module) with Model's constructor "
        "and forward signature)")


def test_candidate_raising_on_import(tmp_path):
    text = RELU_SCALE.replace("BODY", "x[j]") + "\nraise ValueError('nope')\n"
    line = textwrap.dedent(text).splitlines().index("raise ValueError('nope')") + 1
    err = load_error(tmp_path, text)
    assert err.message == f"cand.py:{line}: importing the candidate raised ValueError: nope"
    assert err.details["line"] == line


def test_compile_error_at_import_is_compile_failed_with_the_diagnostic(tmp_path):
    text = RELU_SCALE.replace("BODY", "x[j, 0]") + "\nKERNEL = relu_scale(4, 8)\n"
    with pytest.raises(CompileFailed) as info:
        load_candidate(write(tmp_path, text))
    diagnostic = info.value.details["diagnostic"]
    assert diagnostic["code"].startswith("E") and "message" in diagnostic
    assert info.value.message.startswith("cand.py: the kernel did not compile: ")


def test_compile_error_in_forward_is_compile_failed(tmp_path, relu_spec):
    with pytest.raises(CompileFailed) as info:
        check_candidate(relu_spec, relu_candidate(tmp_path, "x[j, 0]"))
    assert info.value.details["diagnostic"]["code"].startswith("E")


def test_constructor_with_the_wrong_signature(tmp_path, relu_spec):
    text = RELU_SCALE.replace("BODY", "x[j]").replace(
        "class ModelNew(nn.Module):", "class ModelNew(nn.Module):\n    def __init__(self, n):\n"
        "        super().__init__()\n")
    with pytest.raises(LoadFailed) as info:
        check_candidate(relu_spec, write(tmp_path, text))
    assert info.value.message.startswith("ModelNew(*get_init_inputs()) raised TypeError: ")
    assert info.value.message.endswith("; ModelNew takes Model's constructor arguments []")


def test_build_models_seeds_both_and_copies_matching_weights(tmp_path):
    spec = load_spec(REDTEAM / "ref_rmsnorm.py")
    text = (REPO / "tests" / "honest" / "rmsnorm.py").read_text().replace(
        "self.weight = nn.Parameter(torch.ones(N))",
        "self.weight = nn.Parameter(torch.ones(N))\n        self.other = nn.Parameter(torch.zeros(3))")
    model, new = build_models(spec, load_candidate(write(tmp_path, text)), spec.configs[0])
    assert torch.equal(model.weight, new.weight) and model.redrawn == ["weight"]
    assert torch.equal(new.other, torch.zeros(3))


def test_forward_raising_is_run_failed_with_the_line(tmp_path, relu_spec):
    text = RELU_SCALE.replace("BODY", "x[j]").replace("return relu_scale(*x.shape)(x)",
                                                       "return relu_scale(*x.shape)(x.view(-1))")
    with pytest.raises(RunFailed) as info:
        check_candidate(relu_spec, write(tmp_path, text))
    d = info.value.details
    line = 1 + next(k for k, t in enumerate(text.splitlines()) if "x.view(-1)" in t)
    assert d["exception"] == "KernelArgumentError" and d["line"] == line and d["seed"] == 0
    assert "parameter 'X' expects rank 2" in info.value.message


def test_a_kernel_fault_at_a_dsl_line_names_the_forward_line_as_the_call(tmp_path, relu_spec):
    """Played LLM session 43: "... T.atomic_min (line 48)" after a race named at its DSL line read as a second
    location; the forward's line is where the kernel was called."""
    shift = "            for j in T.Parallel(N - 1):\n                Y[row, j] = Y[row, j + 1]\n"
    text = RELU_SCALE.replace("BODY", "x[j]").replace("            T.copy(x, Y[row, 0])\n",
                                                       "            T.copy(x, Y[row, 0])\n" + shift)
    with pytest.raises(RunFailed) as info:
        check_candidate(relu_spec, write(tmp_path, text))
    lines = text.splitlines()
    race = 1 + next(k for k, t in enumerate(lines) if "Y[row, j + 1]" in t)
    call = 1 + next(k for k, t in enumerate(lines) if "return relu_scale" in t)
    message = info.value.message
    assert message.startswith("ModelNew.forward raised RaceFault: ") and f"cand.py:{race}:" in message
    assert "T.Parallel iterations race on Y" in message and f"(called at line {call});" in message


# -- comparing -----------------------------------------------------------------------------------------------------


def test_error_just_under_the_fp32_tolerance_passes(tmp_path, relu_spec):
    (result,) = check_candidate(relu_spec, relu_candidate(tmp_path, "T.max(x[j], 0.0) * 2.0001"), seeds=1)
    assert result.correct and 0 < result.rel_l2 < 1e-4 and result.max_abs_err > 0


def test_error_just_over_the_fp32_tolerance_fails_with_everything_the_agent_needs(tmp_path, relu_spec):
    with pytest.raises(Mismatch) as info:
        check_candidate(relu_spec, relu_candidate(tmp_path, "T.max(x[j], 0.0) * 2.001"), seeds=1)
    d = info.value.details
    assert d["config"] == {"M": 8, "N": 32} and d["seed"] == 0 and d["distribution"] == "normal"
    assert d["hidden"] is False and d["output"] == 0 and d["call"] == 1
    i, j = d["index"]
    assert math.isclose(d["got"], d["expected"] * 1.0005, rel_tol=1e-6)
    assert d["atol"] == 1e-4 and d["rtol"] == 1e-4 and 0 < d["mismatched"] <= d["total"] == 256
    assert info.value.message.startswith(f"output 0 differs from the reference at index ({i}, {j}): expected ")
    ((position, x),) = d["inputs_at_index"]  # the input there: relu(x) * 2 is the expected value
    assert position == 0 and math.isclose(d["expected"], max(x, 0.0) * 2.0, rel_tol=1e-6)


def test_a_mismatch_says_how_the_other_distributions_fare_naming_only_the_public_ones(tmp_path, relu_spec):
    """Played LLM session 43: an fp16 sum of squares that overflows failed under one hidden distribution, and the
    feedback's lone 'got -0' read as an out-of-bounds load; which distributions fail tells range from indexing."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.evaluator.spec import HIDDEN, PUBLIC_DISTRIBUTIONS
    from tileagent.feedback import render_feedback

    with pytest.raises(Mismatch) as info:  # wrong only past 50: the large hidden distributions
        check_candidate(relu_spec, relu_candidate(tmp_path, "T.if_then_else(x[j] > 50.0, 0.0, T.max(x[j], 0.0) * 2.0)"),
                        seeds=1)
    d = info.value.details
    assert d["hidden"] and d["distribution"] in HIDDEN
    probed = d["distributions"]
    assert probed["public"] == {name: "correct" for name in PUBLIC_DISTRIBUTIONS}
    run, wrong, nonfinite = probed["hidden"]
    assert 1 <= wrong < run <= len(HIDDEN) and nonfinite == 0
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={**d, "kind": "Mismatch"}))
    assert ("The same config and seed under each input distribution: 'normal' correct, 'uniform' correct, "
            f"'normal_x3' correct, 'normal_x0.01' correct, 'negative' correct; hidden ones: {wrong} of {run} wrong.") \
        in text
    assert not any(f"'{name}'" in text for name in HIDDEN)


def test_the_look_at_the_other_distributions_stops_at_the_checks_deadline(tmp_path, relu_spec):
    """The worker passes its phase's limit: past it the probe makes no call (a mismatch must not become a timeout);
    the distributions checked before the failing one still count."""
    import time

    from tileagent.evaluator.spec import HIDDEN, PUBLIC_DISTRIBUTIONS

    with pytest.raises(Mismatch) as info:
        check_candidate(relu_spec, relu_candidate(tmp_path, "T.if_then_else(x[j] > 50.0, 0.0, T.max(x[j], 0.0) * 2.0)"),
                        seeds=1, probe_until=time.perf_counter())
    probed = info.value.details["distributions"]
    assert probed["public"] == {name: "correct" for name in PUBLIC_DISTRIBUTIONS}
    run, wrong, nonfinite = probed["hidden"]  # the failing one and those before it (which of row_scales, outliers
    assert wrong == 1 and nonfinite == 0 and run <= 3 < len(HIDDEN)  # and offset first reaches x > 50: the draw's)


def test_the_inputs_quoted_at_a_failing_index_are_those_that_broadcast_to_the_output():
    """Played LLM, session 25: a scan's (B, N, L) inputs were quoted at a (B, Dm, L) output's index (another
    quantity there); a (1, Dm, 1) operand is read at its broadcast index."""
    from tileagent.evaluator.correctness import with_inputs_at_index

    x, bias, state = torch.randn(2, 4, 3), torch.randn(1, 4, 1), torch.randn(2, 5, 3)
    failure = with_inputs_at_index(Mismatch("m", index=[1, 2, 0], output=0), [x, bias, state, 3.0],
                                   (torch.zeros(2, 4, 3),))
    assert failure.details["inputs_at_index"] == [[0, x[1, 2, 0].item()], [1, bias[0, 2, 0].item()]]
    nan = with_inputs_at_index(Mismatch("m", index=[0, 0, 0], output=0), [torch.full((2, 4, 3), float("nan"))],
                               (torch.zeros(2, 4, 3),))
    assert nan.details["inputs_at_index"] == [[0, "nan"]]  # text: it travels as JSON


def test_an_input_with_one_short_dim_more_is_quoted_by_its_row():
    """Played LLM session 41: a conv1d decode step's (B, C) output was quoted with x alone, not the (B, C, 4) state
    it shifts; such an input's row at the index is quoted (up to 8 values), a longer last dim is not."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.evaluator.correctness import with_inputs_at_index
    from tileagent.feedback import render_feedback

    x, state, long = torch.randn(2, 6), torch.randn(2, 6, 4), torch.randn(2, 6, 64)
    failure = with_inputs_at_index(Mismatch("m", index=[1, 5], output=0), [x, state, long], (torch.zeros(2, 6),))
    assert failure.details["inputs_at_index"] == [[0, x[1, 5].item()], [1, state[1, 5].tolist()]]
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure.details, "expected": 1.0, "got": 2.0, "mismatched": 1, "total": 12, "atol": 0.01, "rtol": 0.01,
        "max_abs_err": 1.0, "rel_l2": 0.5, "config": {"B": 2}, "seed": 0, "distribution": "normal"}))
    row = ", ".join(f"{v:.6g}" for v in state[1, 5].tolist())
    assert f"Inputs at that index: input 0 = {x[1, 5].item():.6g}, input 1 = [{row}] (its last dim)." in text


def test_an_input_of_fewer_dims_is_quoted_where_its_sizes_name_the_output_dims_it_follows():
    """Played LLM session 43: adaLN's (B, C) shift and scale of a (B, T, C) output were not quoted, and a block that
    read the wrong sample's row was read as a shifted read. An input whose sizes are one choice of the output's
    dims is read there (with its index); where two choices fit (B == T) it is left out."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.evaluator.correctness import with_inputs_at_index
    from tileagent.feedback import render_feedback

    x, shift, weight, ambiguous = torch.randn(2, 5, 3), torch.randn(2, 3), torch.randn(3), torch.randn(5, 5)
    failure = with_inputs_at_index(Mismatch("m", index=[1, 4, 2], output=0), [x, shift, weight, ambiguous],
                                   (torch.zeros(2, 5, 3),))
    assert failure.details["inputs_at_index"] == [[0, x[1, 4, 2].item()], [1, shift[1, 2].item(), [1, 2]],
                                                  [2, weight[2].item(), [2]]]
    square = with_inputs_at_index(Mismatch("m", index=[1, 4, 2], output=0), [torch.randn(5, 3)],
                                  (torch.zeros(5, 5, 3),))  # dims (0, 2) or (1, 2): not quoted
    assert "inputs_at_index" not in square.details
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure.details, "expected": 1.0, "got": 2.0, "mismatched": 1, "total": 30, "atol": 0.01, "rtol": 0.01,
        "max_abs_err": 1.0, "rel_l2": 0.5, "config": {"B": 2}, "seed": 0, "distribution": "normal"}))
    assert f"input 1 = {shift[1, 2].item():.6g} (at its index (1, 2)), input 2 = {weight[2].item():.6g} (at its " \
           "index (2,))." in text


def test_an_offsets_input_names_the_segment_holding_the_failing_row():
    """Played LLM session 44c: a varlen softmax that took in the next sequence's rows was quoted x's element only.
    An integer input that reads as offsets along one output dim (cu_seqlens; or ends without the leading 0) names the
    segment holding the index; offsets ending at a size two dims share, or not sorted, name none."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.evaluator.correctness import with_inputs_at_index
    from tileagent.feedback import render_feedback

    x, cu = torch.randn(9, 4), torch.tensor([0, 2, 3, 9], dtype=torch.int32)
    failure = with_inputs_at_index(Mismatch("m", index=[5, 1], output=0), [x, cu], (torch.zeros(9, 4),))
    assert failure.details["segment_at_index"] == [1, 0, 2, 3, 9]
    ends = with_inputs_at_index(Mismatch("m", index=[2, 1], output=0), [x, cu[1:]], (torch.zeros(9, 4),))
    assert ends.details["segment_at_index"] == [1, 0, 1, 2, 3]
    for bad, out in ((cu, torch.zeros(9, 9)), (torch.tensor([0, 3, 2, 9]), torch.zeros(9, 4)),
                     (cu.float(), torch.zeros(9, 4))):
        assert "segment_at_index" not in with_inputs_at_index(Mismatch("m", index=[5, 1], output=0), [x, bad],
                                                              (out,)).details
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure.details, "expected": 1.0, "got": 2.0, "mismatched": 1, "total": 36, "atol": 0.01, "rtol": 0.01,
        "max_abs_err": 1.0, "rel_l2": 0.5, "config": {"T": 9}, "seed": 0, "distribution": "normal"}))
    assert f"Inputs at that index: input 0 = {x[5, 1].item():.6g}.\nInput 1 reads as offsets along dim 0: index 5 " \
           "there lies in its segment 2, rows 3 to 8 (6 rows).\n" in text


def test_a_wrong_value_found_in_an_input_of_other_sizes_near_the_scaled_index_is_named():
    """Played LLM session 45: a 3x3 stride-2 max-pool whose window started a row low had no input quoted (no dim of x
    matches the output's), though each wrong value was an element of x just past its window. The value got is
    looked for in such an input within 3 elements of the failing index scaled by the shapes' ratio."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.evaluator.correctness import with_inputs_at_index
    from tileagent.feedback import render_feedback

    x = torch.randn(2, 4, 15, 14)
    out = torch.zeros(2, 4, 8, 7)
    got = float(x[1, 2, 8, 1])
    failure = with_inputs_at_index(Mismatch("m", index=[1, 2, 3, 0], output=0, got=got), [x], (out,))
    assert failure.details["got_from_input"] == [0, [1, 2, 8, 1], [1, 2, 5, 0]]
    far = with_inputs_at_index(Mismatch("m", index=[1, 2, 0, 0], output=0, got=got), [x], (out,))
    assert "got_from_input" not in far.details  # row 8 is 8 rows from the scaled index 0: not looked at
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={
        **failure.details, "expected": 1.0, "mismatched": 1, "total": 448, "atol": 0.01, "rtol": 0.01,
        "max_abs_err": 1.0, "rel_l2": 0.5, "config": {"N": 2}, "seed": 0, "distribution": "normal"}))
    assert "\nThe value got is input 0's at index (1, 2, 8, 1); the failing index, scaled by the two shapes' ratio, " \
           "falls at (1, 2, 5, 0) of it: a window, stride or padding that reads there?" in text


def test_the_mismatch_feedback_quotes_the_inputs_at_the_failing_index(tmp_path, relu_spec):
    """A hidden distribution stays unnamed, but its magnitudes show: the input value at the wrong element."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    with pytest.raises(Mismatch) as info:
        check_candidate(relu_spec, relu_candidate(tmp_path, "T.max(x[j], 0.0) * 2.001"), seeds=1,
                        distributions=["offset_x1000"])
    d = info.value.to_dict()
    assert d["hidden"] is True and d["inputs_at_index"][0][1] > 900
    text = render_feedback(EvalResult(status="mismatch", message=d["message"], failure=d))
    x = d["inputs_at_index"][0][1]
    # no TF32 line: the kernel has no gemm (played LLM 46b: it misled on a mean's precision at an offset)
    assert f"\nInputs at that index: input 0 = {x:.6g}.\n" in text and "TF32" not in text
    assert "input distribution a hidden distribution" in text and "offset" not in text


def test_nan_passes_only_where_the_reference_has_nan(tmp_path):
    spec = load_spec(write(tmp_path, '''
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.log(x) * 2.0

        def get_inputs():
            return [torch.randn(8, 32)]

        def get_init_inputs():
            return []
        ''', "ref_log.py"))
    (result,) = check_candidate(spec, relu_candidate(tmp_path, "T.log(x[j]) * 2.0", "log.py"), seeds=1)
    assert result.correct
    (note,) = [n for n in result.notes if "NaN or Inf" in n]  # one note, every distribution it happened under
    assert note.startswith("the reference gives NaN or Inf in output 0 under distribution(s) 'normal', ")
    with pytest.raises(Mismatch) as info:
        check_candidate(spec, relu_candidate(tmp_path, "T.log(T.abs(x[j])) * 2.0", "abslog.py"), seeds=1)
    assert info.value.details["expected"] == "nan" and math.isfinite(info.value.details["got"])
    assert info.value.details["max_abs_err"] == "nan"  # text: a failure's details travel as JSON
    assert "no error size: some values are non-finite where the reference's are not, or the reverse" in \
        info.value.message and "max abs err nan" not in info.value.message
    # played LLM, session 24: a top-k filter's -inf where the reference is finite read as "max abs error nan"
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    sent = EvalResult(status="mismatch", message=info.value.message, failure=info.value.to_dict())
    text = render_feedback(EvalResult.model_validate(sent.model_dump(mode="json")))  # as the worker's pipe carries it
    assert "some are infinite or NaN\nwhere the reference's are finite, or the reverse, so no error size applies." \
        in text and "error nan" not in text
    assert "expected nan, got " in text  # session 25: "expected 6592, got -" (NaN went through JSON as null)
    # played LLM, session 25 (on the H200): an overflow the reference turns into NaN may come out as an infinity in
    # another order of the same arithmetic; an infinity where the reference is NaN passes, a finite value does not
    (result,) = check_candidate(spec, relu_candidate(tmp_path, "T.log(T.max(x[j], 0.0)) * 2.0", "clamplog.py"), seeds=1)
    assert result.correct


def test_inf_must_match_in_sign_and_place(tmp_path):
    spec = load_spec(write(tmp_path, '''
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return 1.0 / torch.relu(x)

        def get_inputs():
            return [torch.randn(8, 32)]

        def get_init_inputs():
            return []
        ''', "ref_inv.py"))
    (result,) = check_candidate(spec, relu_candidate(tmp_path, "1.0 / T.max(x[j], 0.0)", "inv.py"), seeds=1,
                                distributions=["normal"])
    assert result.correct
    with pytest.raises(Mismatch, match="expected inf, got -inf"):
        check_candidate(spec, relu_candidate(tmp_path, "-1.0 / T.max(x[j], 0.0)", "neg.py"), seeds=1,
                        distributions=["normal"])
    with pytest.raises(Mismatch, match=r"got inf \(infinite where the reference is finite, or the reverse: a mask"):
        check_candidate(spec, relu_candidate(tmp_path, "1.0 / T.max(x[j] - 0.5, 0.0)", "shifted.py"), seeds=1,
                        distributions=["normal"])


def test_degenerate_reference_is_flagged(tmp_path, relu_spec):
    (result,) = check_candidate(relu_spec, REPO / "tests" / "honest" / "relu_scale.py", seeds=1)
    assert "degenerate reference: output 0 is constant under distribution(s) 'negative'" in result.notes
    assert not any("varies by less than its tolerance" in n for n in result.notes)
    # red team, session 45: 1 + 1e-3 * tanh(x) in fp16 stayed within the tolerance of one constant, which passed
    spec = load_spec(write(tmp_path, '''
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return 1.0 + 1e-5 * torch.tanh(x)

        def get_inputs():
            return [torch.randn(8, 32)]

        def get_init_inputs():
            return []
        ''', "ref_near_const.py"))
    (result,) = check_candidate(spec, relu_candidate(tmp_path, "1.0 + 0.00001 * T.tanh(x[j])", "near.py"), seeds=1)
    assert "degenerate reference: output 0 varies by less than its tolerance under every distribution: a constant " \
           "output would pass; tighten TOLERANCES or draw inputs that move it" in result.notes


def test_seeds_distributions_and_configs_can_be_chosen(tmp_path, relu_spec):
    configs = [{"M": 3, "N": 32}, {"M": 5, "N": 32}]
    results = check_candidate(relu_spec, REPO / "tests" / "honest" / "relu_scale.py", seeds=2,
                              distributions=["normal", "uniform"], configs=configs, seed=12345)
    assert [r.config for r in results] == configs and {r.seed for r in results} == {12345}
    # seeds x distributions x 2 calls; the tails v - 1 and v + 3 with half the seeds; residue tails 1 seed, 2 dists
    residue_tails = [len(relu_spec.tail_configs(c, 12345)) - len(relu_spec.tail_configs(c)) for c in configs]
    assert [r.checks for r in results] == [2 * 2 * 2 + 2 * 1 * 2 * 2 + n * 2 * 2 for n in residue_tails]


def test_the_runner_maps_no_input_buffer_once_the_checks_and_timed_calls_are_done(relu_spec):
    """Played LLM session 37 on an H100: the runner kept a mapping of every check's input buffers (each check's first
    call's, refilled for the next check's second call, was never let go), and over a config's tails 57 GiB of them
    stayed allocated in the checker's process (CUDA IPC keeps a block while a consumer maps it)."""
    from tileagent.evaluator.correctness import timed_calls
    from tileagent.evaluator.sandbox import Sandbox

    with Sandbox(REPO / "tests" / "honest" / "relu_scale.py") as sandbox:
        check_candidate(relu_spec, REPO / "tests" / "honest" / "relu_scale.py", seeds=2, configs=[{"M": 3, "N": 32}],
                        distributions=["normal", "uniform", "normal_x3"], sandbox=sandbox)
        assert sandbox.mapped == set()
        timed_calls(relu_spec, sandbox, {"M": 3, "N": 32}, trials=3, warmup=1)
        assert sandbox.mapped == set()


def test_reference_failing_on_a_tail_is_a_spec_error(tmp_path):
    spec = load_spec(write(tmp_path, '''
        import torch
        import torch.nn as nn

        CONFIGS = [{"M": 8, "N": 32}]
        FREE_DIMS = ["M"]

        class Model(nn.Module):
            def forward(self, x):
                assert x.shape[0] % 8 == 0, "M must be a multiple of 8"
                return torch.relu(x) * 2.0

        def get_inputs(M, N):
            return [torch.randn(M, N)]

        def get_init_inputs(M, N):
            return []
        ''', "ref_div8.py"))
    with pytest.raises(SpecError, match=r"Model.forward raised AssertionError: M must be a multiple of 8 \(config "
                                        r"\{'M': 7, 'N': 32\}\)"):
        check_candidate(spec, REPO / "tests" / "honest" / "relu_scale.py", seeds=1)


# -- issue 18, point 9: fair tolerances (a float64 oracle) -----------------------------------------------------------

def test_a_fused_epilogue_more_accurate_than_the_reference_is_accepted_by_the_oracle_rule():
    spec = load_spec(REPO / "tests" / "redteam" / "ref_out_proj.py")
    (result,) = check_candidate(spec, REPO / "tests" / "honest" / "out_proj_fused.py", seeds=1)
    assert result.correct
    (note,) = [n for n in result.notes if "oracle rule" in n]
    assert note.startswith("output 0: accepted by the oracle rule, not the fixed one: the reference itself is off by")
    assert note.endswith("the candidate is within the fixed tolerance of the float64 oracle")


def test_an_fp16_accumulating_gemm_is_rejected_although_judged_against_the_oracle():
    spec = load_spec(REPO / "tests" / "redteam" / "ref_out_proj.py")
    with pytest.raises(Mismatch) as info:
        check_candidate(spec, REPO / "tests" / "redteam" / "fp16_accumulate_gemm.py", seeds=1)
    d = info.value.details
    assert "against the float64 oracle" in info.value.message and "more than 2x the reference's own error" in \
        info.value.message
    assert d["oracle_mismatched"] > 0 and d["oracle_max_abs_err"] > 2 * d["reference_max_abs_err"]
    # played LLM, session 22: the feedback says so (it names no hidden distribution, but says that the kernel's
    # arithmetic, not its logic, is the difference)
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    text = render_feedback(EvalResult(status="mismatch", message=info.value.message, failure=info.value.to_dict()))
    assert (f"\nAgainst a float64 evaluation of the reference, {d['oracle_mismatched']} element(s) are off by more "
            "than twice the reference's own error (max abs error ") in text
    assert "your kernel is less accurate than the reference's own arithmetic." in text


def test_without_a_float64_oracle_the_fixed_rule_decides(tmp_path):
    """A reference whose ops refuse float64 (here: it insists on float32 weights) has no oracle; nothing breaks."""
    spec = load_spec(write(tmp_path, '''
        import torch
        import torch.nn as nn

        CONFIGS = [{"M": 4, "N": 32}]


        class Model(nn.Module):
            def forward(self, x):
                assert x.dtype == torch.float32
                return torch.relu(x) * 2


        def get_inputs(M=4, N=32):
            return [torch.randn(M, N)]


        def get_init_inputs(M=4, N=32):
            return []
    ''', name="ref.py"))
    path = relu_candidate(tmp_path, "T.max(x[j], 0.0) * 2.001")
    with pytest.raises(Mismatch) as info:
        check_candidate(spec, path, seeds=1, distributions=["normal"])
    assert "oracle" not in info.value.message


def _topk_check():
    from tileagent.evaluator.correctness import _ConfigCheck

    spec = load_spec(REPO / "bench" / "suite" / "softmax_topk.py")
    where = {"config": {"M": 2, "E": 6, "K": 3}, "seed": 0, "distribution": "offset"}
    return _ConfigCheck(spec, None, "cpu", 0), where


def test_indices_of_equal_values_may_come_in_another_order():
    """torch.topk leaves the order of equal values undefined (CUDA sorts its selection with a bitonic sort): the
    candidate's indices may list the reference's indices of tied values (within the values' tolerance) in another
    order along the last dim; the check says it accepted that."""
    check, where = _topk_check()
    values = torch.tensor([[0.5, 0.25, 0.25], [0.4, 0.3, 0.3 + 1e-9], [0.1, 0.1, 0.1]])
    ref = (values, torch.tensor([[3, 1, 4], [0, 5, 2], [7, 8, 9]]))
    outs = (values.clone(), torch.tensor([[3, 4, 1], [0, 2, 5], [9, 7, 8]]))
    assert check.compare(outs, ref, where, 1) is None
    assert any("order of equal values" in n for n in check.notes)


@pytest.mark.parametrize("indices, why", [
    ([[1, 3, 4], [0, 5, 2]], "a permutation of untied values"),
    ([[3, 1, 2], [0, 5, 2]], "an index the reference did not return (a tie at the k-th value cannot be verified)"),
    ([[3, 1, 1], [0, 5, 2]], "the same index twice"),
    ([[3, 1, 999], [0, 5, 2]], "an index past every index the reference returned"),
    ([[3, 1, -4], [0, 5, 2]], "a negative index"),
])
def test_indices_that_select_other_elements_are_a_mismatch(indices, why):
    check, where = _topk_check()
    values = torch.tensor([[0.5, 0.25, 0.25], [0.4, 0.3, 0.3]])
    ref = (values, torch.tensor([[3, 1, 4], [0, 5, 2]]))
    failure = check.compare((values.clone(), torch.tensor(indices)), ref, where, 1)
    assert isinstance(failure, Mismatch), why
    assert failure.message.startswith("output 1 differs from the reference at index (0, ")
    assert "are not the reference's indices of equal values (within atol=" in failure.message, failure.message
    assert not check.notes


def test_indices_of_unsorted_values_are_not_a_ranking():
    """max(dim=0) of a 3-d tensor returns (values, indices) whose last dim holds different elements, not ranks: two
    equal maxima there are no licence to swap their indices, so the tie rule applies only where the reference's
    values are sorted along the last dim."""
    check, where = _topk_check()
    values = torch.tensor([[0.25, 0.5, 0.25], [0.4, 0.3, 0.4]])
    ref = (values, torch.tensor([[3, 1, 4], [0, 5, 2]]))
    failure = check.compare((values.clone(), torch.tensor([[4, 1, 3], [0, 5, 2]])), ref, where, 1)
    assert isinstance(failure, Mismatch) and "indices of equal values" not in failure.message


@pytest.mark.parametrize("delta, hinted", [(1, True), (2, False)])
def test_integer_values_off_by_one_at_a_few_elements_are_named_as_rounding_ties(delta, hinted):
    """Played LLM, GPU turn 1 (issue 19): an int8 quantization differed from torch by exactly 1 at 163 of 33.5M
    values (ties at .5 rounded the other way: torch on CUDA divides by a Python number as a multiplication by its
    reciprocal). The mismatch says what such a pattern means; a larger difference is not given that reading."""
    from tileagent.evaluator.correctness import _ConfigCheck

    spec = load_spec(REPO / "bench" / "suite" / "int8_row_quant.py")
    check = _ConfigCheck(spec, None, "cpu", 0)
    where = {"config": {"M": 4, "K": 256}, "seed": 0, "distribution": "normal"}
    q = torch.randint(-127, 128, (4, 256), dtype=torch.int8)
    scales = torch.rand(4, 1)
    got = q.clone()
    got[1, 7] = q[1, 7] - delta if q[1, 7] > 0 else q[1, 7] + delta
    failure = check.compare((got, scales.clone()), (q, scales), where, 1)
    assert isinstance(failure, Mismatch)
    assert failure.message.startswith("output 0 differs from the reference at index (1, 7)")
    assert ("rounding ties decided the other way" in failure.message) == hinted, failure.message


@pytest.mark.parametrize("under, hinted", [(True, True), (False, False)])
def test_int32_counts_all_below_the_reference_are_named_lost_updates(under, hinted):
    """Played LLM session 43: a histogram by plain read-and-write counted 1 where 14 were due, and the feedback's
    reading was written for floats. Counts that are all too small say lost updates; one too large does not."""
    from tileagent.evaluator.correctness import _ConfigCheck

    spec = load_spec(REPO / "bench" / "played_llm" / "refs" / "moe_expert_count.py")
    check = _ConfigCheck(spec, None, "cpu", 0)
    where = {"config": {"T": 37, "K": 2, "E": 8}, "seed": 0, "distribution": "normal"}
    counts = torch.tensor([14, 9, 0, 3, 20, 7, 11, 10], dtype=torch.int32)
    got = torch.where(counts > 0, torch.ones_like(counts), counts)
    if not under:
        got[1] = 30
    failure = check.compare((got,), (counts,), where, 1)
    assert isinstance(failure, Mismatch) and failure.message.startswith("output 0 differs from the reference at")
    assert ("updates lost, as when several iterations or threads add into one element by a plain read and write "
            "instead of T.atomic_add" in failure.message) == hinted, failure.message


@pytest.mark.parametrize("bits, hinted", [(13, True), (0, False)])
def test_a_float32_output_off_by_tf32_precision_names_tf32(bits, hinted):
    """Played LLM, session 27: a float32 GEMM written with a float32 T.gemm runs on TF32 tensor cores (10 mantissa
    bits). A float32 output whose error is of that size says so; an error far larger (a wrong value) does not."""
    from tileagent.compiler.intrinsics import truncate_tf32
    from tileagent.evaluator.correctness import _ConfigCheck

    spec = load_spec(REPO / "bench" / "played_llm" / "refs" / "gemm_sigmoid_scale_residual.py")
    check = _ConfigCheck(spec, None, "cpu", 0)
    where = {"config": {"M": 40, "K": 256, "N": 256}, "seed": 0, "distribution": "normal"}
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(40, 256, generator=gen), torch.randn(256, 256, generator=gen) / 16
    ref = x @ w.T
    got = truncate_tf32(x) @ truncate_tf32(w).T if bits else ref * 1.5
    failure = check.compare((got,), (ref,), where, 1)
    assert isinstance(failure, Mismatch)
    assert ("TF32 tensor cores" in failure.message) == hinted, failure.message


def _fp16_check(tmp_path):
    from tileagent.evaluator.correctness import _ConfigCheck

    spec = load_spec(write(tmp_path, '''
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return x * 2

        def get_inputs():
            return [torch.randn(2, dtype=torch.float16)]

        def get_init_inputs():
            return []
        ''', "ref_half.py"))
    return _ConfigCheck(spec, None, "cpu", 0)


def _half(*xs):
    return (torch.tensor(xs, dtype=torch.float16),)


def test_an_overflow_to_inf_is_accepted_only_where_the_float64_result_is_at_the_overflow(tmp_path):
    """silu(gate) * up in fp16: the reference rounds silu to fp16 first and gets 65504; a kernel keeping it in
    float32 gets inf. That is the correct rounding of the exact product when it is 65520 or more; an infinity is
    accepted within a factor 2 of the largest fp16 (an intermediate of another order overflows), not further."""
    check, where = _fp16_check(tmp_path), {"config": {}, "seed": 0, "distribution": "extremes"}
    ref = _half(65504.0, 1.0)
    assert check.compare(_half(math.inf, 1.0), ref, where, 1, oracle=lambda: (torch.tensor([65530.0, 1.0],
                                                                                           dtype=torch.float64),))\
        is None
    failure = check.compare(_half(math.inf, 1.0), _half(30000.0, 1.0), where, 1,
                            oracle=lambda: (torch.tensor([30000.0, 1.0], dtype=torch.float64),))
    assert failure is not None and "expected 30000, got inf" in failure.message
    failure = check.compare(_half(-math.inf, 1.0), ref, where, 1,
                            oracle=lambda: (torch.tensor([65530.0, 1.0], dtype=torch.float64),))
    assert failure is not None and "got -inf" in failure.message


def test_an_infinity_within_a_factor_2_of_overflow_is_another_order_of_the_same_products(tmp_path):
    """A parallel cumprod under 'extremes' (round 2 session 26, on the H200 and on the CPU): the sequential reference
    ends at 3.38e38, a tree of partial products overflows in an intermediate."""
    check, where = _fp16_check(tmp_path), {"config": {}, "seed": 0, "distribution": "extremes"}
    near = lambda: (torch.tensor([60000.0, 1.0], dtype=torch.float64),)  # noqa: E731
    assert check.compare(_half(math.inf, 1.0), _half(60000.0, 1.0), where, 1, oracle=near) is None
    assert check.compare(_half(-math.inf, 1.0), _half(60000.0, 1.0), where, 1, oracle=near) is not None


def test_a_reference_that_overflows_gives_no_slack_to_the_other_elements(tmp_path):
    check, where = _fp16_check(tmp_path), {"config": {}, "seed": 0, "distribution": "extremes"}
    truth = lambda: (torch.tensor([100.0, 1.0], dtype=torch.float64),)  # noqa: E731
    failure = check.compare(_half(100.0, 50.0), _half(math.inf, 1.0), where, 1, oracle=truth)
    assert failure is not None and "against the float64 oracle 1 element(s) are outside the tolerance" in \
        failure.message


def test_where_the_oracle_overflows_the_fixed_rule_judges_and_the_oracle_the_rest(tmp_path):
    """Played LLM session 25 on the H200: a selective scan under 'extremes' left 4 of 3 million elements off by the
    reference's own rounding of cancelling 1e30-sized terms; one element where the float64 oracle overflowed too had
    disabled the oracle for the whole output."""
    check, where = _fp16_check(tmp_path), {"config": {}, "seed": 0, "distribution": "extremes"}
    truth = lambda: (torch.tensor([math.inf, -866.0, 3.0], dtype=torch.float64),)  # noqa: E731
    ref = _half(math.inf, -880.0, 3.0)  # off by 14 at element 1: the candidate's 852 is within 2x that
    assert check.compare(_half(math.inf, -852.0, 3.0), ref, where, 1, oracle=truth) is None
    failure = check.compare(_half(5.0, -852.0, 3.0), ref, where, 1, oracle=truth)  # the fixed rule at element 0
    assert failure is not None and "against the float64 oracle 1 element(s) are outside" in failure.message
    failure = check.compare(_half(math.inf, -800.0, 3.0), ref, where, 1, oracle=truth)  # 66 > 2 x 14
    assert failure is not None and "against the float64 oracle 1 element(s) are outside" in failure.message


def test_the_references_own_overflow_matched_by_the_kernel_leaves_the_oracle_the_other_elements(tmp_path):
    """Played LLM session 36 on the H200: a column sum under 'extremes' whose float32 reference overflowed to inf at
    an element where the float64 oracle is finite; the kernel overflowed there too (the fixed rule agrees), and that
    element had disabled the oracle for the whole output, so 2 elements within the reference's own error failed."""
    check, where = _fp16_check(tmp_path), {"config": {}, "seed": 0, "distribution": "extremes"}
    truth = lambda: (torch.tensor([20000.0, -866.0, 3.0], dtype=torch.float64),)  # noqa: E731
    ref = _half(math.inf, -880.0, 3.0)  # overflowed in fp16 on the way to element 0; off by 14 at element 1
    assert check.compare(_half(math.inf, -852.0, 3.0), ref, where, 1, oracle=truth) is None
    failure = check.compare(_half(-math.inf, -852.0, 3.0), ref, where, 1, oracle=truth)  # not the reference's inf
    assert failure is not None and "against the float64 oracle" not in failure.message
    failure = check.compare(_half(math.inf, -800.0, 3.0), ref, where, 1, oracle=truth)  # 66 > 2 x 14
    assert failure is not None and "against the float64 oracle 1 element(s) are outside" in failure.message


def test_a_loss_is_judged_by_the_references_worst_error_over_perturbed_runs(tmp_path):
    """A distillation KL of nearly equal distributions (1e-4 of cancelling 1e-2 terms, a sweep of session 26): one
    run's error of a 0-d output is one draw of the rounding noise; a float32 kernel off by 3x eager's error in that
    run passes when the reference itself is off that much on inputs 2 ulps away, and fails when it is not."""
    from tileagent.evaluator.spec import Tolerance

    check, where = _fp16_check(tmp_path), {"config": {}, "seed": 0, "distribution": "normal_x0.01"}
    tol, truth = Tolerance(1e-4, 1e-4, 1e-4), torch.tensor(1.0e-4, dtype=torch.float64)
    ref, out = torch.tensor(1.0e-4 + 3e-7), torch.tensor(1.0e-4 - 9e-7)  # the reference off by 3e-7, the kernel 9e-7

    def judge(spread):
        return check.compare_oracle(0, out, ref, truth, tol, where, Mismatch("m", index=[]), spread)

    assert judge(None) is not None and judge(lambda: (4e-7, 4e-7, None)) is not None  # 9e-7 > 2 x 4e-7
    assert judge(lambda: (6e-7, 6e-7, None)) is None
    (note,) = check.oracle_notes()
    assert "within 2x the reference's worst error against the float64 oracle over 8 runs on inputs perturbed" in note


def test_the_oracle_keeps_float64_through_the_references_float32_casts():
    """References upcast 16-bit inputs with ``.float()`` / ``.to(torch.float32)`` / float32 factories; inside the
    oracle those stay float64, or the "float64" oracle is the float32 reference again (played LLM session 24)."""
    from tileagent.evaluator import oracle

    class Model(torch.nn.Module):
        def forward(self, x):
            acc = torch.zeros(x.shape[0], dtype=torch.float32) + torch.zeros(x.shape[0])
            y = x.float().to(torch.float32) + 1e-9 + x.to(dtype=torch.float32).type(torch.float32)
            return acc + y.sum(-1), (y * 3).half()

    x = torch.randn(4, 64, dtype=torch.float16)
    total, half = oracle.run(Model().to(torch.float64), [x])
    x64 = x.double()
    assert total.dtype == torch.float64 and torch.equal(total, (x64 + 1e-9 + x64).sum(-1))
    # a cast to 16 bits is rounding the reference asks for: its values are rounded, the arithmetic after it is exact
    assert half.dtype == torch.float64 and torch.equal(half, ((x64 + 1e-9 + x64) * 3).half().double())
    assert torch.get_default_dtype() == torch.float32


def test_the_oracle_adds_exactly_after_a_cast_to_16_bits():
    """On the H200 (round 2, session 26) the built-in drafter's cumsum of ``x.half()`` failed: CUDA's ``torch.cumsum``
    of an fp16 tensor adds in fp16 (off by 3 ulps at 300 terms) while the kernel adds in float32, and the oracle,
    keeping the fp16 tensor, repeated the reference's additions. The oracle rounds the cast's values and adds in
    float64."""
    from tileagent.evaluator import oracle

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x.half(), dim=1), x.to(torch.bfloat16) * 3, torch.zeros(2, dtype=torch.float16) + 1 / 3

    x = torch.randn(4, 300)
    scan, scaled, third = oracle.run(Model().to(torch.float64), [x])
    assert torch.equal(scan, torch.cumsum(x.half().double(), dim=1))
    assert torch.equal(scaled, x.to(torch.bfloat16).double() * 3) and torch.equal(third, torch.full((2,), 1 / 3,
                                                                                                   dtype=torch.float64))


def test_an_oracle_out_of_memory_runs_one_index_of_the_first_dim_at_a_time_where_the_model_keeps_them_apart():
    """On the H100 (played LLM session 35) the float64 oracle of GQA prefill at B=7, S=4096 ran out of memory (30 GB
    of scores a copy), so the fixed rule judged an ill-conditioned few alone and rejected a kernel the oracle rule
    accepted at S=1024. Out of memory, the oracle runs each index of the inputs' common first dim and concatenates;
    not where the indices are not treated apart (statistics over the batch) or an output loses that dim."""
    from tileagent.evaluator import oracle

    class Limited(torch.nn.Module):  # "out of memory" above 8 batch indices
        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, x, w):
            if x.shape[0] > 8:
                raise torch.OutOfMemoryError("CUDA out of memory (a test)")
            return self.f(x, w)

    x, w = torch.randn(12, 3, 7), torch.randn(12, 7)
    (out,) = oracle.run(Limited(lambda x, w: torch.softmax(x.float() * w[:, None], -1)), [x, w])
    assert out.dtype == torch.float64 and torch.equal(out, torch.softmax(x.double() * w.double()[:, None], -1))
    x, w = torch.randn(100, 3, 7), torch.randn(100, 7)  # runs of 4 indices (32 runs at most), 8 at once fit
    (out,) = oracle.run(Limited(lambda x, w: torch.softmax(x.float() * w[:, None], -1)), [x, w])
    assert torch.equal(out, torch.softmax(x.double() * w.double()[:, None], -1))
    assert oracle.run(Limited(lambda x, w: x - x.mean(0)), [x, w]) is None  # the batch's mean: not apart
    assert oracle.run(Limited(lambda x, w: (x * w[:, None]).sum()), [x, w]) is None  # a loss: no first dim
    assert oracle.run(Limited(lambda x, w: x), [x, torch.randn(4, 7)]) is None  # no common first dim


def test_a_loss_more_accurate_than_its_float32_reference_passes_and_a_wrong_one_fails(tmp_path):
    """The played KL-divergence kernel of session 24 accumulates in float64 and is within 1e-5 of the exact loss, where
    the float32 reference is up to 1% off (0-d output: the relative L2 rule is a relative tolerance): it failed every
    turn while the oracle ran the reference's ``.float()`` in float32. Now accepted by the oracle rule; the same
    kernel's loss scaled by 1.02 is still a mismatch."""
    played = REPO / "bench" / "played_llm"
    spec = load_spec(played / "refs" / "kl_div_rows.py")
    (result,) = check_candidate(spec, played / "answers" / "kl_div_rows" / "turn2.py", configs=[{"M": 3, "V": 1000}],
                                seeds=1, seed=7)
    assert result.correct
    source = (played / "answers" / "kl_div_rows" / "turn2.py").read_text()
    assert source.count("* tt, \"float32\")") == 1, "the test scales the kernel's loss"
    wrong = write(tmp_path, source.replace("* tt, \"float32\")", "* tt * 1.02, \"float32\")"), "kl_wrong.py")
    with pytest.raises(Mismatch, match="against the float64 oracle"):
        check_candidate(spec, wrong, configs=[{"M": 3, "V": 1000}], seeds=1, seed=7)


def test_feedback_names_the_relative_l2_rule_when_every_element_is_within_tolerance():
    """Played LLM, session 24: a 0-d loss failed the relative L2 bound with every element within atol, and the
    prompt said "0 of 1 elements are outside atol=...", hiding which rule failed."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    failure = {"index": [], "output": 0, "expected": 9.805e-05, "got": 9.918e-05, "mismatched": 0, "total": 1,
               "atol": 1e-4, "rtol": 1e-4, "rel_l2_bound": 1e-4, "max_abs_err": 1.13e-06, "rel_l2": 0.0116,
               "config": {"M": 2, "V": 1000}, "seed": 0, "distribution": "normal", "dtype": "float32"}
    text = render_feedback(EvalResult(status="mismatch", message="m", failure=failure))
    assert ("Every element is within atol=0.0001 + rtol=0.0001 * |expected|, but the relative L2 error 0.0116 exceeds "
            "its bound 0.0001:\nthe output is small next to atol, so it is judged relative to its own size (a single "
            "value: a relative tolerance).") in text
    assert "0 of 1 elements" not in text
    assert "seed 0 (inputs are drawn afresh every turn)" in text


def test_a_reference_with_nan_is_not_called_below_atol(relu_spec):
    """AdamW's update on a drawn (negative) second moment is half NaN: its finite values decide the peak (Python's
    max(0.0, nan) is 0.0, and the note said "max |value| 0" before; played LLM, session 33)."""
    from evaluator.correctness import _ConfigCheck

    check = _ConfigCheck(relu_spec, sandbox=None, device="cpu", base_seed=0)
    ref = torch.tensor([float("nan"), 3.0, -5.0, float("nan")])
    check.flag_degenerate((ref,), {"distribution": "normal"})
    check.flag_degenerate((torch.tensor([1e-6, -2e-6, 0.0, 3e-7]),), {"distribution": "small"})
    notes = check.degenerate_notes()
    assert not any("stays below atol" in n and "'normal'" in n for n in notes), notes
    assert any("stays below atol" in n and "'small'" in n for n in notes)
    assert any("gives NaN or Inf in output 0 under distribution(s) 'normal'" in n for n in notes)


def test_held_outputs_stay_within_their_byte_budget_and_a_reused_buffer_is_still_caught(monkeypatch):
    """Played LLM session 36 on an H100: six held logits gradients of 16384 x 128256 and their copies (the
    output-reused check) ran the evaluator out of memory. Held outputs keep a fingerprint, not a copy; beyond the
    latest call's outputs, held ones go oldest first once they pass ``HELD_BYTES``; a candidate writing into the buffer
    it returned last time is still caught."""
    from tileagent.evaluator import correctness, held_outputs
    from tileagent.evaluator.errors import GuardViolation

    monkeypatch.setattr(held_outputs, "HELD_BYTES", 3 * 4096)  # three held outputs of 1024 float32
    check, where = correctness._ConfigCheck(None, None, "cpu", 0), {"config": {}, "seed": 0, "distribution": "n"}
    outs = [torch.randn(1024) for _ in range(5)]
    for o in outs:
        check.check_storage([o], [], where)
    assert [id(t) for t, _ in check.held.held] == [id(o) for o in outs[-3:]]
    assert all(isinstance(then, int) for _, then in check.held.held)  # fingerprints: no copies held
    big = torch.randn(4096)  # alone over the budget: the latest call's output is held all the same
    check.check_storage([big], [], where)
    assert [id(t) for t, _ in check.held.held] == [id(big)]
    big[0] += 1.0  # the candidate writes into what it returned, then returns another tensor
    with pytest.raises(GuardViolation) as e:
        check.check_storage([torch.randn(8)], [], where)
    assert "an output of an earlier call changed after a later call" in str(e.value)


def test_the_reported_max_abs_error_is_the_published_distributions_one():
    """Played LLM session 36: a correct GeGLU reported max abs err 1.7e10, the rounding of values near 1e15 under a
    hidden distribution; the relative L2 error keeps every distribution."""
    from tileagent.evaluator import correctness
    from tileagent.evaluator.spec import Tolerance

    check, tol = correctness._ConfigCheck(None, None, "cpu", 0), Tolerance(1e-3, 1e-3, 1e-2)
    ref = torch.tensor([1.0e15, 2.0])
    assert check.compare_one(0, ref * (1 + 1e-6), ref, tol, {"distribution": "x", "hidden": True}, 1) is None
    assert check.max_abs == 0.0 and check.rel_l2 > 0
    assert check.compare_one(0, ref + 1e-4, ref, tol, {"distribution": "normal", "hidden": False}, 1) is None
    assert 0 < check.max_abs < 1e-3


def test_a_floating_output_failing_the_fixed_rule_keeps_its_error_in_the_record():
    """Played LLM session 37: an fp8 output one e4m3 step off, accepted by the oracle rule, was recorded with max abs
    err 0. The fixed rule's figures are recorded before its verdict (a later rule may accept the output); index
    outputs only when they match."""
    from tileagent.evaluator import correctness
    from tileagent.evaluator.spec import Tolerance

    check, tol = correctness._ConfigCheck(None, None, "cpu", 0), Tolerance(1e-3, 1e-3, 1e-2)
    ref, where = torch.tensor([448.0, 2.0, 1.0]), {"config": {}, "seed": 0, "distribution": "normal", "hidden": False}
    assert check.compare_one(0, ref + torch.tensor([32.0, 0.0, 0.0]), ref, tol, where, 1) is not None
    assert check.max_abs == 32.0 and check.rel_l2 > 0
    idx = torch.tensor([3, 1, 2])
    assert check.compare_one(1, idx + 5, idx, Tolerance(0, 0, 0), where, 1) is not None
    assert check.max_abs == 32.0


def test_integer_inputs_get_one_check_a_seed_not_one_per_distribution(tmp_path):
    """Played LLM session 38: a relative-position bias whose one input is an int64 arange ran ~55 identical checks a
    config (the input distributions draw floating inputs only)."""
    spec = load_spec(write(tmp_path, '''
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, i):
                return (i * 2).float()

        def get_inputs():
            return [torch.randint(0, 9, (64,))]

        def get_init_inputs():
            return []
        ''', "ref_int.py"))
    assert not spec.drawn({}) and len(spec.distributions) > 1
    candidate = write(tmp_path, '''
        import torch
        import torch.nn as nn
        import tileagent
        import tileagent.language as T

        @tileagent.jit(out_idx=[1])
        def double(N):
            @T.prim_func
            def main(I: T.Tensor((N,), "int64"), Y: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    for j in T.Parallel(N):
                        Y[j] = T.cast(I[j] * 2, "float32")
            return main

        class ModelNew(nn.Module):
            def forward(self, i):
                return double(i.shape[0])(i)
        ''', "cand_int.py")
    (result,) = check_candidate(spec, candidate, seeds=2, tails=False)
    assert result.correct and result.checks == 2 * 2  # two seeds, each one check of two calls
    assert "no input is drawn from the input distributions (none is floating): one check a seed" in result.notes


def test_an_input_whose_dims_follow_the_output_in_another_order_is_quoted():
    """Played LLM session 44: a merge of attention states NaN at (t, h, d) under its ~1000-valued inputs; the (H, T)
    log-sum-exps that overflowed were left out of the quoted inputs (a (T, H, D) output). They are quoted at [h, t],
    also where T is 1 (a dim of size 1 is read at 0); a short dim the output lacks (mrope's (3, T) positions) is
    quoted as a row; an input that two choices of dims fit is still left out."""
    from tileagent.evaluator.correctness import with_inputs_at_index
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    out, lse = torch.randn(4, 3, 8), torch.randn(3, 4)
    failure = with_inputs_at_index(Mismatch("m", index=[2, 1, 5], output=0), [out, lse], (torch.zeros(4, 3, 8),))
    assert failure.details["inputs_at_index"] == [[0, out[2, 1, 5].item()], [1, lse[1, 2].item(), [1, 2]]]
    one = torch.randn(3, 1)
    decode = with_inputs_at_index(Mismatch("m", index=[0, 2, 5], output=0), [one], (torch.zeros(1, 3, 8),))
    assert decode.details["inputs_at_index"] == [[0, one[2, 0].item(), [2, 0]]]
    temperature = torch.rand(1)  # session 44b: a min-p filter's per-row temperature at B = 1
    one = with_inputs_at_index(Mismatch("m", index=[0, 75], output=0), [temperature], (torch.zeros(1, 128),))
    assert one.details["inputs_at_index"] == [[0, temperature[0].item(), [0]]]
    positions = torch.randint(0, 9, (3, 4))  # mrope's (t, h, w) positions of each token, a (T, H, D) output
    rows = with_inputs_at_index(Mismatch("m", index=[2, 1, 5], output=0), [positions], (torch.zeros(4, 2, 8),))
    assert rows.details["inputs_at_index"] == [[0, positions[:, 2].tolist(), [None, 2]]]
    text = render_feedback(EvalResult(status="mismatch", message="m", failure={
        **rows.details, "expected": 1.0, "got": 2.0, "mismatched": 1, "total": 96, "atol": 0.01, "rtol": 0.01,
        "max_abs_err": 1.0, "rel_l2": 0.5, "config": {"T": 4}, "seed": 0, "distribution": "normal"}))
    assert f"input 0 = [{', '.join(str(v) for v in positions[:, 2].tolist())}] (at its index (:, 2))." in text
    both = with_inputs_at_index(Mismatch("m", index=[2, 1, 5], output=0), [torch.randn(4, 4)], (torch.zeros(4, 4, 8),))
    assert "inputs_at_index" not in both.details  # (T, H) or (H, T) when T == H: left out, never guessed


def test_an_error_spread_over_the_output_names_the_l2_rule_not_an_element_count(tmp_path):
    """Played LLM 46b's cdist_l2 on an H100: every element within 2x the reference's worst error against the float64
    oracle, the kernel's L2 error more than 2x the reference's; the message said '0 element(s) are outside'."""
    check, where = _fp16_check(tmp_path), {"config": {}, "seed": 0, "distribution": "offset"}
    truth = lambda: (torch.ones(16, dtype=torch.float64),)  # noqa: E731
    ref = (torch.tensor([1.25] + [1.0] * 15, dtype=torch.float16),)  # the reference off by 0.25 at one element
    failure = check.compare((torch.full((16,), 1.3, dtype=torch.float16),), ref, where, 1, oracle=truth)
    assert failure is not None and "against the float64 oracle each element is within 2x the reference's worst " \
        "error (max abs err 0.3, the reference's 0.25), but the L2 error over the output, 0.3 of its norm, is 4.8x " \
        "the reference's (0.0625)" in failure.message
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    text = " ".join(render_feedback(EvalResult(status="mismatch", message=failure.message,
                                               failure=failure.to_dict())).split())
    assert ("Against a float64 evaluation of the reference, every element is within twice the reference's own error "
            "(max abs error 0.2998, the reference's 0.25), but more of them are off: the L2 norm of the error is 4.8x "
            "the reference's: far beyond rounding (relative L2 error above 5%): a wrong element") in text, text
