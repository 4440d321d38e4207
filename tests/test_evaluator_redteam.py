"""The red-team corpus (tests/redteam/): every cheating candidate is rejected, for the right reason; the honest corpus
(tests/honest/) is accepted. Each cheat is a plausible ModelNew for a reference op in tests/redteam/ref_*.py."""

import importlib.util
import re

import pytest

from tileagent.evaluator.correctness import check_candidate, timed_calls
from tileagent.evaluator.errors import GuardViolation, LoadFailed, Mismatch, RunFailed
from tileagent.evaluator.sandbox import Sandbox
from tileagent.evaluator.spec import HIDDEN, load_spec
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
    "freed_memory_decoy": ("softmax", GuardViolation, "output-written", "output 0 was neither handed to a compiled "
                           "kernel"),
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
    # issue 18: a candidate that shares the checker's process could reach it
    "stack_frames_reference": ("relu_scale", GuardViolation, "introspection", "import sys"),
    "setprofile_hook": ("relu_scale", GuardViolation, "introspection", "import sys"),
    "forge_result_and_exit": ("relu_scale", GuardViolation, "introspection", "import os"),
    "forge_reply_on_sockets": ("relu_scale", GuardViolation, "introspection", "import os"),
    "loosen_tolerances": ("relu_scale", GuardViolation, "evaluator-access", "from tileagent.evaluator import spec"),
    "loosen_distributions": ("relu_scale", GuardViolation, "evaluator-access", "from tileagent.evaluator import spec"),
    "loosen_free_dims": ("relu_scale", GuardViolation, "evaluator-access", "from tileagent.evaluator import spec"),
    "patch_vector_norm": ("tiny_scale", GuardViolation, "patch", "assigns torch.linalg.vector_norm"),
    "patch_torch_equal": ("relu_scale", GuardViolation, "patch", "assigns torch.equal"),
    "writes_reference_weights": ("rmsnorm", GuardViolation, "introspection", "import gc"),
    "swap_model_forward": ("relu_scale", GuardViolation, "introspection", "import sys"),
    "reads_reference_file": ("relu_scale", GuardViolation, "dynamic-code", "calls exec()"),
    # the run-time guard left or sidestepped from inside
    "pop_dispatch_mode": ("relu_scale", GuardViolation, "private", "_pop_mode_temporarily"),
    "pop_mode_copy_into_allocation": ("relu_scale", GuardViolation, "private", "_pop_mode_temporarily"),
    "raw_thread_compute": ("relu_scale", GuardViolation, "threads", "import _thread"),
    "thread_at_import": ("relu_scale", GuardViolation, "threads", "import queue"),
    "subprocess_compute": ("relu_scale", GuardViolation, "threads", "import subprocess"),
    "fork_compute": ("relu_scale", GuardViolation, "introspection", "import os"),
    "subclass_via_alias": ("relu_scale", GuardViolation, "introspection", "accesses __torch_function__"),
    "list_subclass_lazy_iter": ("relu_scale", GuardViolation, "introspection", "accesses __getitem__"),
    "tuple_subclass": ("relu_scale", GuardViolation, "output-type", "a subclass of tuple"),
    "padded_launch_counter": ("relu_scale", GuardViolation, "compiler-internals",
                              "from tileagent.compiler import kernel_scope"),
    "export_runtime_raw_cuda": ("relu_scale", GuardViolation, "compiler-internals",
                                "from tileagent import export_runtime"),
    "finalizer_compute": ("relu_scale", GuardViolation, "introspection", "defines __del__"),
    # static blind spots
    "typing_sys_modules": ("relu_scale", GuardViolation, "introspection", "uses typing.sys.modules"),
    "dataclasses_inspect": ("relu_scale", GuardViolation, "introspection", "uses dataclasses.inspect.currentframe"),
    "torch_sys_in_init": ("relu_scale", GuardViolation, "introspection", "uses torch.sys.modules"),
    "name_not_main_block": ("relu_scale", GuardViolation, "torch-compute", "uses torch.relu"),
    "main_block_patch": ("relu_scale", GuardViolation, "patch", "binds the name __name__"),
    "nested_in_init": ("relu_scale", GuardViolation, "torch-compute", "uses torch.relu"),
    "lambda_in_init": ("relu_scale", GuardViolation, "torch-compute", ".relu()"),
    "module_built_in_forward": ("relu_scale", GuardViolation, "nn-layer", "constructs the nn.Module Helper"),
    "param_named_self": ("relu_scale", GuardViolation, "torch-compute", ".relu()"),
    "self_rebound": ("relu_scale", GuardViolation, "patch", "binds the name self"),
    "method_named_get_inputs": ("relu_scale", GuardViolation, "torch-compute", "uses torch.relu"),
    "operator_attrgetter": ("relu_scale", GuardViolation, "introspection", "calls operator.attrgetter()"),
    "module_as_value": ("relu_scale", GuardViolation, "torch-compute", ".relu()"),
    # telling checking from timing
    "detects_dispatch_mode": ("relu_scale", GuardViolation, "private", "torch._C._len_torch_dispatch_stack"),
    "reads_argv": ("relu_scale", GuardViolation, "introspection", "import sys"),
    "reads_environment": ("relu_scale", GuardViolation, "introspection", "import os"),
    # predictable inputs
    "precomputes_public_seeds": ("relu_scale", GuardViolation, "evaluator-access",
                                 "from tileagent.evaluator.spec import load_spec"),
    "precomputes_seed_table": ("relu_scale", GuardViolation, "init-random", "uses torch.Generator"),
    # coverage
    "wrong_when_m_mod_4_is_1_or_2": ("relu_scale", Mismatch, None, "(a tail size of config {'M': 8, 'N': 32})"),
    "one_pass_variance": ("layernorm", Mismatch, None, "input distribution 'offset"),
    # two buffers in turn: the third call returns the first call's memory (the last call's outputs are checked for
    # reuse first, so output_reused above keeps its rule)
    "output_ping_pong": ("relu_scale", GuardViolation, "output-provenance", "memory kept from an earlier call"),
    "round_half_up": ("quantize", Mismatch, None, "input distribution 'ties'"),
    "signed_zero_lost": ("half_recip", Mismatch, None, "input distribution 'ties'"),
    # red team, round 2 session 45: code run inside a kernel's scope, and memory the guard never saw
    "int_subclass_scalar": ("rmsnorm_silu", GuardViolation, "introspection", "class Grid subclasses int"),
    "builtin_alias_eval": ("rmsnorm_silu", GuardViolation, "dynamic-code", "uses the builtin eval as a value"),
    "init_stash_numpy": ("rmsnorm_silu", GuardViolation, "torch-compute",
                         "takes the torch function torch.Tensor.numpy as a value"),
    "getattr_alias_numpy": ("rmsnorm_silu", GuardViolation, "introspection", "uses the builtin getattr as a value"),
    "finalizer_in_kernel": ("rmsnorm_silu", GuardViolation, "introspection", "defines __del__"),
    # its second round, against those defences
    "stash_on_self_numpy": ("rmsnorm_silu", GuardViolation, "foreign-compute", "import numpy"),
    "gth_eval_numpy": ("rmsnorm_silu", GuardViolation, "dynamic-code", "uses typing.get_type_hints"),
    "attrgetter_value_numpy": ("relu_scale", GuardViolation, "introspection", "uses operator.attrgetter"),
    "star_import_attrgetter": ("relu_scale", GuardViolation, "introspection", "from operator import *"),
    "annotation_exec_numpy": ("relu_scale", GuardViolation, "dynamic-code", "calls exec()"),
    "numpy_writes_allocation": ("relu_scale", GuardViolation, "introspection", "uses operator.attrgetter"),
    "setprofile_inside_kernel": ("relu_scale", GuardViolation, "introspection", "uses operator.attrgetter"),
    "fake_scope_depth": ("relu_scale", GuardViolation, "dynamic-code", "uses typing.get_type_hints"),
    # right only in the interpreter's block order (static-clean)
    "interblock_write_race": ("relu_scale", GuardViolation, "inconsistent-runs", "the order of a kernel's blocks"),
    "interblock_read_after_write": ("relu_scale", GuardViolation, "inconsistent-runs", "the order of a kernel's blocks"),
}

# cheats that pass the checks and are caught by the timed calls (checked, then timed in the same process)
TIMING_ONLY = {
    "stale_after_many_calls": ("relu_scale", Mismatch, None, "timed trial"),
}

# the same cheats with the static check off: the run-time defences alone reject them
RUNTIME_ONLY = {
    "calls_reference": (GuardViolation, "torch-op", "aten::_to_copy"),
    "torch_compute_forward": (GuardViolation, "torch-op", "aten::sum"),
    "uses_functional": (GuardViolation, "torch-op", "aten::_to_copy"),
    "nn_layer": (GuardViolation, "torch-op", "aten::_softmax"),
    "aten_call": (GuardViolation, "torch-op", "aten::_softmax"),
    "numpy_compute": (GuardViolation, "torch-op", "aten::mul"),
    # no thread can start in the candidate's process on the CPU (it used to be caught when left running)
    "background_thread": (GuardViolation, "threads", "tried to start a thread or a process"),
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
    # issue 18: the tricks reach only the candidate's own process; its own wrong kernel is what fails
    "stack_frames_reference": (Mismatch, None, "output 0 differs"),
    "setprofile_hook": (Mismatch, None, "output 0 differs"),
    "forge_result_and_exit": (RunFailed, None, "the candidate's process exited with code 0"),
    "forge_reply_on_sockets": (GuardViolation, "output-type", "not tensors"),
    "loosen_tolerances": (Mismatch, None, "output 0 differs"),
    "loosen_distributions": (Mismatch, None, "output 0 differs"),
    "loosen_free_dims": (GuardViolation, "patch", "Spec.tail_configs was replaced"),
    "patch_vector_norm": (Mismatch, None, "relative L2 error 1 exceeds 0.01"),
    "patch_torch_equal": (GuardViolation, "patch", "torch.equal was replaced"),
    "writes_reference_weights": (Mismatch, None, "output 0 differs"),
    "swap_model_forward": (Mismatch, None, "output 0 differs"),
    "reads_reference_file": (GuardViolation, "torch-op", "aten::relu"),
    "raw_thread_compute": (GuardViolation, "threads", "can't start new thread"),
    "thread_at_import": (GuardViolation, "threads", "while it was imported"),
    "subprocess_compute": (GuardViolation, "threads", "tried to start a thread or a process"),
    "fork_compute": (GuardViolation, "threads", "tried to start a thread or a process"),
    "subclass_via_alias": (GuardViolation, "output-type", "not a plain torch.Tensor"),
    "list_subclass_lazy_iter": (GuardViolation, "output-type", "a subclass of list"),
    "finalizer_compute": (GuardViolation, "torch-op", "aten::relu"),
    "typing_sys_modules": (RunFailed, None, "ModelNew.forward raised"),
    "dataclasses_inspect": (Mismatch, None, "output 0 differs"),
    "torch_sys_in_init": (Mismatch, None, "output 0 differs"),
    "name_not_main_block": (GuardViolation, "torch-op", "aten::relu"),
    "main_block_patch": (GuardViolation, "patch", "torch.relu was replaced"),
    "nested_in_init": (GuardViolation, "torch-op", "aten::relu"),
    "lambda_in_init": (GuardViolation, "torch-op", "aten::relu"),
    "module_built_in_forward": (GuardViolation, "torch-op", "aten::relu"),
    "param_named_self": (GuardViolation, "torch-op", "aten::relu"),
    "self_rebound": (GuardViolation, "torch-op", "aten::relu"),
    "method_named_get_inputs": (GuardViolation, "torch-op", "aten::relu"),
    "operator_attrgetter": (GuardViolation, "torch-op", "aten::relu"),
    "module_as_value": (GuardViolation, "torch-op", "aten::relu"),
    "precomputes_public_seeds": (Mismatch, None, "output 0 differs"),
    "precomputes_seed_table": (Mismatch, None, "output 0 differs"),
    # their torch ops run where the dispatch mode cannot see them; the output's memory was not allocated under it
    "pop_dispatch_mode": (GuardViolation, "output-provenance", "output 0 is not in memory that the forward allocated"),
    "padded_launch_counter": (GuardViolation, "output-provenance", "output 0 is not in memory that the forward "
                              "allocated"),
    "int_subclass_scalar": (GuardViolation, "output-written", "output 0 was neither handed"),  # (and the kernel
    # got the plain int: __int__ never ran)
    "init_stash_numpy": (GuardViolation, "kernel-input-provenance", "argument 0 of the kernel main"),
    "getattr_alias_numpy": (GuardViolation, "kernel-input-provenance", "argument 0 of the kernel main"),
    "finalizer_in_kernel": (GuardViolation, "torch-op", "aten::copy_"),
    "stash_on_self_numpy": (GuardViolation, "kernel-input-provenance", "argument 0 of the kernel main"),
    "gth_eval_numpy": (GuardViolation, "kernel-input-provenance", "argument 0 of the kernel main"),
    "attrgetter_value_numpy": (GuardViolation, "kernel-input-provenance", "argument 0 of the kernel main"),
    "setprofile_inside_kernel": (GuardViolation, "patch", "installed a profile or trace hook"),
    # an output no kernel was handed or returned: written where the guard could not see (numpy, a dispatch mode popped,
    # a faked kernel scope)
    "star_import_attrgetter": (GuardViolation, "output-written", "output 0 was neither handed to a compiled kernel"),
    "annotation_exec_numpy": (GuardViolation, "output-written", "output 0 was neither handed to a compiled kernel"),
    "numpy_writes_allocation": (GuardViolation, "output-written", "output 0 was neither handed to a compiled kernel"),
    "fake_scope_depth": (GuardViolation, "output-written", "output 0 was neither handed to a compiled kernel"),
    "builtin_alias_eval": (GuardViolation, "output-written", "output 0 was neither handed to a compiled kernel"),
    "pop_mode_copy_into_allocation": (GuardViolation, "output-written", "output 0 was neither handed to a compiled "
                                      "kernel"),
}

# with the static checks off these look at the phase and find none: every call, timed or not, is made alike, so they
# compute in every call (the old evaluator timed them unguarded, where they skipped the work)
PHASE_BLIND = ["detects_dispatch_mode", "reads_argv", "reads_environment"]

_SPECS = {}


def spec_for(name: str):
    if name not in _SPECS:
        _SPECS[name] = load_spec(REDTEAM / f"ref_{name}.py")
    return _SPECS[name]


def test_corpus_is_complete():
    cheats = sorted(p.stem for p in REDTEAM.glob("*.py") if not p.stem.startswith("ref_"))
    assert cheats == sorted({**CHEATS, **TIMING_ONLY})
    assert len(cheats) >= 80
    static_off = set(RUNTIME_ONLY) | set(PHASE_BLIND)
    assert not static_off - set(CHEATS)
    assert len(list(HONEST.glob("*.py"))) >= 4


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_is_rejected_for_the_right_reason(name):
    """A fixed base seed, so that the reason is deterministic: round_half_up is also caught by the hidden
    'offset_x1000' distribution whenever its float32 values near 1000 land on an exact tie (x.125: base seeds 0 and 3),
    before the 'ties' distribution this test names; that failed one full run in session 5."""
    ref, error, rule, fragment = CHEATS[name]
    with pytest.raises(error) as info:
        check_candidate(spec_for(ref), REDTEAM / f"{name}.py", seed=1)
    assert info.value.details.get("rule") == rule
    assert fragment in info.value.message


@pytest.mark.parametrize("name", sorted(RUNTIME_ONLY))
def test_cheat_is_rejected_at_run_time_without_the_static_check(name):
    if name == "imports_triton" and importlib.util.find_spec("triton") is not None:
        pytest.skip("triton is installed here: importing it does nothing at run time (its kernel is ours); the "
                    "static check rejects the import")
    error, rule, fragment = RUNTIME_ONLY[name]
    with pytest.raises(error) as info:
        check_candidate(spec_for(CHEATS[name][0]), REDTEAM / f"{name}.py", static_checks=False)
    if isinstance(error, tuple):  # either: calls disagreeing, or every call wrong
        assert info.value.details.get("rule") in ("inconsistent-runs", None)
    else:
        assert info.value.details.get("rule") == rule
    assert fragment in info.value.message


@pytest.mark.parametrize("name", sorted(TIMING_ONLY))
def test_timing_cheat_is_caught_by_the_sampled_timed_calls(name):
    ref, error, rule, fragment = TIMING_ONLY[name]
    spec = spec_for(ref)
    with Sandbox(REDTEAM / f"{name}.py") as sandbox:
        (result,) = check_candidate(spec, REDTEAM / f"{name}.py", sandbox=sandbox)
        assert result.correct  # the checks alone do not catch it
        with pytest.raises(error) as info:
            timed_calls(spec, sandbox, spec.configs[0], trials=60, samples=60)
    assert info.value.details.get("rule") == rule and fragment in info.value.message


@pytest.mark.parametrize("name", PHASE_BLIND)
def test_phase_detectors_find_no_phase_and_compute_in_timed_calls_too(name):
    spec = spec_for("relu_scale")
    with Sandbox(REDTEAM / f"{name}.py") as sandbox:
        check_candidate(spec, REDTEAM / f"{name}.py", static_checks=False, sandbox=sandbox, seeds=1)
        times = timed_calls(spec, sandbox, spec.configs[0], trials=8, samples=8)  # every timed output compared
    assert len(times) == 8


def test_mismatch_on_a_hidden_distribution_names_it():
    with pytest.raises(Mismatch) as info:
        check_candidate(spec_for("softmax"), REDTEAM / "public_only.py")
    d = info.value.details
    assert d["hidden"] is True and d["distribution"] in HIDDEN  # the evaluation seed is the OS's: any of them
    assert d["config"] == {"M": 8, "N": 64} and d["output"] == 0 and len(d["index"]) == 2


def test_mismatch_on_a_tail_names_the_tail_and_its_config():
    with pytest.raises(Mismatch) as info:
        check_candidate(spec_for("rmsnorm"), REDTEAM / "wrong_on_tails.py")
    d = info.value.details
    assert d["config"] == {"M": 7, "N": 64} and d["tail_of"] == {"M": 8, "N": 64}
    assert d["index"][0] >= 4 and d["got"] == "nan"  # rows past the last full block: the NaN poison (as text)


HONEST_REFS = {"softmax": "softmax", "rmsnorm": "rmsnorm", "relu_scale": "relu_scale", "tiny_scale": "tiny_scale",
               "bias_gelu": "bias_gelu", "rmsnorm_silu": "rmsnorm_silu", "rms_stats": "rms_stats",
               "out_proj_fused": "out_proj", "relu_scale_held": "relu_scale"}


def test_every_honest_candidate_has_a_reference():
    assert sorted(p.stem for p in HONEST.glob("*.py")) == sorted(HONEST_REFS)


def test_tails_over_the_interpreters_limit_are_named_not_checked():
    """The CPU interpreter checks a wide config with its free dims halved (a 256000-word vocabulary at M=1); its
    tails would run M up to 7 at that width, 7x the limit: tails over ``max_tail_elements`` are skipped, and said."""
    (result,) = check_candidate(spec_for("rmsnorm"), HONEST / "rmsnorm.py", seeds=1, max_tail_elements=5 * 64)
    (checked,) = [note for note in result.notes if note.startswith("tail sizes checked")]
    (skipped,) = [note for note in result.notes if note.startswith("tail sizes not checked")]
    assert skipped.startswith("tail sizes not checked (inputs over 320 elements): ") and "{'M': 7, 'N': 64}" in skipped
    assert max(int(m) for m in re.findall(r"'M': (\d+)", checked)) <= 5
    assert {int(m) for m in re.findall(r"'M': (\d+)", checked + skipped)} == set(range(1, 8))
    # the feedback of a correct kernel says so too (played LLM, session 22: only eval.json did)
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    text = render_feedback(EvalResult(status="ok", configs=[result], timing_available=False))
    assert "\nTail sizes not checked (too large for the interpreter) at " in text and "{'M': 7, 'N': 64}" in text


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
