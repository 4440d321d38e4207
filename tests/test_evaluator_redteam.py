"""The red-team corpus (tests/redteam/): every cheating candidate is rejected, for the right reason; the honest corpus
(tests/honest/) is accepted. Each cheat is a plausible ModelNew for a reference op in tests/redteam/ref_*.py."""

import re

import pytest

from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.errors import GuardViolation, LoadFailed, Mismatch, RunFailed
from tileagent.evaluator.spec import load_spec
from tests.conftest import REPO

REDTEAM, HONEST = REPO / "tests" / "redteam", REPO / "tests" / "honest"

# cheat -> (reference, error class, rule (GuardViolation) or None, fragment of the message)
CHEATS = {
    "calls_reference": ("softmax", GuardViolation, "torch-compute", "uses torch.softmax"),
    "torch_compute_forward": ("softmax", GuardViolation, "torch-compute", ".sum()"),
    "uses_functional": ("softmax", GuardViolation, "torch-compute", "uses torch.nn.functional.softmax"),
    "nn_layer": ("softmax", GuardViolation, "nn-layer", "self.softmax"),
    "aten_call": ("softmax", GuardViolation, "aten", "torch.ops.aten._softmax"),
    "torch_compile": ("softmax", GuardViolation, "torch-compile", "torch.compile"),
    "imports_triton": ("softmax", GuardViolation, "foreign-compute", "import triton"),
    "numpy_compute": ("softmax", GuardViolation, "foreign-compute", "import numpy"),
    "try_fallback": ("softmax", GuardViolation, "try-except", "try/except"),
    "background_thread": ("softmax", GuardViolation, "threads", "import threading"),
    "side_stream": ("softmax", GuardViolation, "stream", "torch.cuda.Stream"),
    "patch_perf_counter": ("softmax", GuardViolation, "timer", "import time"),
    "patch_cuda_event": ("softmax", GuardViolation, "patch", "assigns torch.cuda.Event"),
    "cache_by_data_ptr": ("softmax", GuardViolation, "identity-cache", ".data_ptr"),
    "lazy_subclass": ("softmax", GuardViolation, "tensor-subclass", "subclasses torch.Tensor"),
    "monkeypatch_evaluator": ("softmax", GuardViolation, "evaluator-access", "from tileagent import evaluator"),
    "reads_reference_global": ("softmax", GuardViolation, "introspection", "import sys"),
    "random_output": ("relu_scale", GuardViolation, "nondeterminism", "import random"),
    "returns_parameter": ("relu_scale", GuardViolation, "tensor-subclass", "torch.nn.Parameter"),
    "eval_hidden_code": ("relu_scale", GuardViolation, "dynamic-code", "eval()"),
    "fake_kernel_scope": ("relu_scale", GuardViolation, "compiler-internals", "compiler.kernel_scope"),
    "getattr_escape": ("relu_scale", GuardViolation, "introspection", "getattr()"),
    # caught at run time
    "contiguous_copy": ("relu_scale", GuardViolation, "torch-op", "aten::clone"),
    "freed_memory_no_kernel": ("softmax", GuardViolation, "no-kernel", "launched no compiled kernel"),
    "freed_memory_decoy": ("softmax", Mismatch, None, "got nan (NaN where the reference is finite"),
    "mutates_inputs": ("softmax", GuardViolation, "input-mutation", "changed input 0"),
    "identity_nonnegative": ("relu_scale", Mismatch, None, "input distribution 'normal'"),
    "returns_input_view": ("relu_scale", GuardViolation, "output-aliases-input", "shares memory with input 0"),
    "zeros_for_tiny": ("tiny_scale", Mismatch, None, "relative L2 error 1 exceeds 0.01"),
    "precision_downgrade": ("rmsnorm", Mismatch, None, "atol=0.0001 + rtol=0.0001"),
    "hardcoded_public_seed": ("softmax", Mismatch, None, "seed 0"),
    "public_only": ("softmax", Mismatch, None, "(hidden)"),
    "wrong_on_tails": ("rmsnorm", Mismatch, None, "(a tail size of config {'M': 8, 'N': 64})"),
    "ignores_weight": ("rmsnorm", Mismatch, None, "output 0 differs"),
    "cache_by_tensor_key": ("softmax", GuardViolation, "inconsistent-runs", "call 1 matched, call 2 did not match"),
    "stateful_first_call": ("relu_scale", GuardViolation, "inconsistent-runs", "call 1 matched"),
    "output_reused": ("relu_scale", GuardViolation, "output-reused", "an output of an earlier call"),
    "fp16_accumulate_gemm": ("out_proj", Mismatch, None, "against the float64 oracle"),
}

# the same cheats with the static check off: the run-time defences alone reject them
RUNTIME_ONLY = {
    "calls_reference": (GuardViolation, "torch-op", "aten::_to_copy"),
    "torch_compute_forward": (GuardViolation, "torch-op", "aten::sum"),
    "uses_functional": (GuardViolation, "torch-op", "aten::_to_copy"),
    "nn_layer": (GuardViolation, "torch-op", "aten::_softmax"),
    "aten_call": (GuardViolation, "torch-op", "aten::_softmax"),
    "numpy_compute": (GuardViolation, "torch-op", "aten::mul"),
    "background_thread": (GuardViolation, "threads", "left 1 thread(s) running"),
    "patch_perf_counter": (GuardViolation, "patch", "time.perf_counter"),
    "patch_cuda_event": (GuardViolation, "patch", "torch.cuda.Event"),
    "cache_by_data_ptr": (GuardViolation, "no-kernel", "launched no compiled kernel"),
    "lazy_subclass": (GuardViolation, "output-type", "LazyResult, not a plain torch.Tensor"),
    # the patch lands in the candidate's own process, where no comparison runs; its `* 0` is what fails it
    "monkeypatch_evaluator": (GuardViolation, "torch-op", "aten::mul"),
    "reads_reference_global": (RunFailed, None, "ModelNew.forward raised"),
    "random_output": ((GuardViolation, Mismatch), None, "differ"),  # a run of luck decides which of the two
    "returns_parameter": (GuardViolation, "output-type", "torch.nn.parameter.Parameter"),
    "eval_hidden_code": (GuardViolation, "torch-op", "aten::relu"),
    "getattr_escape": (GuardViolation, "torch-op", "aten::relu"),
    "fake_kernel_scope": (GuardViolation, "compiler-internals", "entered the compiler's kernel scope without calling"),
    "imports_triton": (LoadFailed, None, "No module named 'triton'"),
}

_SPECS = {}


def spec_for(name: str):
    if name not in _SPECS:
        _SPECS[name] = load_spec(REDTEAM / f"ref_{name}.py")
    return _SPECS[name]


def test_corpus_is_complete():
    cheats = sorted(p.stem for p in REDTEAM.glob("*.py") if not p.stem.startswith("ref_"))
    assert cheats == sorted(CHEATS)
    assert len(cheats) >= 25
    assert len(list(HONEST.glob("*.py"))) >= 4


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_is_rejected_for_the_right_reason(name):
    ref, error, rule, fragment = CHEATS[name]
    with pytest.raises(error) as info:
        check_candidate(spec_for(ref), REDTEAM / f"{name}.py")
    assert info.value.details.get("rule") == rule
    assert fragment in info.value.message


@pytest.mark.parametrize("name", sorted(RUNTIME_ONLY))
def test_cheat_is_rejected_at_run_time_without_the_static_check(name):
    error, rule, fragment = RUNTIME_ONLY[name]
    with pytest.raises(error) as info:
        check_candidate(spec_for(CHEATS[name][0]), REDTEAM / f"{name}.py", static_checks=False)
    if isinstance(error, tuple):  # either: calls disagreeing, or every call wrong
        assert info.value.details.get("rule") in ("inconsistent-runs", None)
    else:
        assert info.value.details.get("rule") == rule
    assert fragment in info.value.message


def test_mismatch_on_a_hidden_distribution_names_it():
    with pytest.raises(Mismatch) as info:
        check_candidate(spec_for("softmax"), REDTEAM / "public_only.py")
    d = info.value.details
    assert d["hidden"] is True and d["distribution"] in ("row_scales", "outliers", "offset")
    assert d["config"] == {"M": 8, "N": 64} and d["output"] == 0 and len(d["index"]) == 2


def test_mismatch_on_a_tail_names_the_tail_and_its_config():
    with pytest.raises(Mismatch) as info:
        check_candidate(spec_for("rmsnorm"), REDTEAM / "wrong_on_tails.py")
    d = info.value.details
    assert d["config"] == {"M": 7, "N": 64} and d["tail_of"] == {"M": 8, "N": 64}
    assert d["index"][0] >= 4 and d["got"] != d["got"]  # rows past the last full block: the NaN poison


HONEST_REFS = {"softmax": "softmax", "rmsnorm": "rmsnorm", "relu_scale": "relu_scale", "tiny_scale": "tiny_scale",
               "bias_gelu": "bias_gelu", "rmsnorm_silu": "rmsnorm_silu", "rms_stats": "rms_stats",
               "out_proj_fused": "out_proj"}


def test_every_honest_candidate_has_a_reference():
    assert sorted(p.stem for p in HONEST.glob("*.py")) == sorted(HONEST_REFS)


@pytest.mark.parametrize("name", sorted(HONEST_REFS))
def test_honest_candidate_is_accepted(name):
    spec = spec_for(HONEST_REFS[name])
    (result,) = check_candidate(spec, HONEST / f"{name}.py")
    assert result.correct and result.config == spec.configs[0]
    if not spec.free_dims:
        assert result.checks == 5 * len(spec.distributions) * 2
        return
    (tails,) = [note for note in result.notes if note.startswith("tail sizes checked")]
    sizes = [int(m) for m in re.findall(r"'M': (\d+)", tails)]
    assert {m % 8 for m in sizes + [result.config["M"]]} >= set(range(1, 8))  # every residue of the vector width
    # 5 seeds x 11 distributions x 2 calls; the tails v - 1 and v + 3: 2 seeds x 11 x 2; the others: 1 x 2 x 2
    assert result.checks == 5 * 11 * 2 + 2 * 2 * 11 * 2 + (len(sizes) - 2) * 4
