"""Isolation: a candidate that hangs or crashes costs its own request only; the worker restarts and goes on.

The worker runs ``tests.evaluator_fakes.fake_evaluate`` (the candidate's forward against the reference's, nothing
else), so these tests exercise the isolation layer alone; ``test_real_evaluation_*`` use the real evaluator.
"""

import importlib.util
import json
import os
import signal
import textwrap

import pytest
from typer.testing import CliRunner

from tileagent.evaluator.errors import (
    CandidateError,
    CompileFailed,
    DeviceFault,
    EvalError,
    GuardViolation,
    Mismatch,
    SpecError,
    Timeout,
    WorkerError,
)
from tileagent.evaluator.records import EvalRequest
from tileagent.evaluator.worker import EvalWorker, budget_s, expand_configs, status_of

FAKE = "tests.evaluator_fakes:fake_evaluate"

REFERENCE = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs(n=4):
    return [torch.arange(float(n))]
def get_init_inputs(n=4):
    return []
"""
CANDIDATES = {
    "honest": """
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                print("candidate output goes to stderr, not into the pipe")
                return x + x
    """,
    "wrong": """
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return x + 1
    """,
    "hang": """
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                while True:
                    pass
    """,
    "segfault_on_5": """
        import os, signal
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                if x.numel() == 5:
                    os.kill(os.getpid(), signal.SIGSEGV)
                return x + x
    """,
}


@pytest.fixture
def files(tmp_path):
    (tmp_path / "ref.py").write_text(REFERENCE)
    (tmp_path / "no_model.py").write_text("import torch\n")
    for name, text in CANDIDATES.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp_path


def _request(files, candidate, **kw):
    kw = {"configs": [{"n": 3}, {"n": 5}], "compile_timeout_s": 5, "run_timeout_s": 1, **kw}
    return EvalRequest(kernel_path=str(files / f"{candidate}.py"), reference_path=str(files / "ref.py"),
                       device="cpu", **kw)


def test_hang_and_segfault_are_contained_and_the_same_worker_goes_on(files):
    with EvalWorker("cpu", evaluate_fn=FAKE) as worker:
        first = worker.evaluate(_request(files, "honest"))
        assert first.status == "ok" and [c.config for c in first.configs] == [{"n": 3}, {"n": 5}]

        hung = worker.evaluate(_request(files, "hang", compile_timeout_s=2))
        assert hung.status == "timeout" and hung.failure["kind"] == "Timeout"
        assert "checking config {'n': 3} did not finish within 3 s" in hung.message
        assert worker.restarts == 1

        crashed = worker.evaluate(_request(files, "segfault_on_5"))
        assert crashed.status == "crash" and "SIGSEGV" in crashed.message and "config {'n': 5}" in crashed.message
        assert "segfault_on_5.py" in crashed.message  # the faulthandler's traceback from the worker's stderr
        assert [c.config for c in crashed.configs] == [{"n": 3}]  # the config finished before the crash is kept
        assert worker.restarts == 2

        after = worker.evaluate(_request(files, "honest"))
        assert after.status == "ok" and all(c.correct for c in after.configs)

        os.kill(worker.pid, signal.SIGKILL)  # dead between requests: not the next candidate's fault
        assert worker.evaluate(_request(files, "honest", configs=[{"n": 2}])).status == "ok"
        assert worker.restarts == 3


REFERENCE_FAULTS = {  # Model.forward at n == 5 (config {'n': 5}); line 6 of each file
    "raises": "raise RuntimeError('boom')",
    "exits": "os._exit(3)",
    "segfaults": "os.kill(os.getpid(), signal.SIGSEGV)",
    "hangs": "time.sleep(60)",
}


def _faulty_reference(files, kind: str) -> str:
    text = ("import os, signal, time\nimport torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
            f"        if x.numel() == 5:\n            {REFERENCE_FAULTS[kind]}\n        return x * 2\n")
    (files / f"ref_{kind}.py").write_text(text)
    return str(files / f"ref_{kind}.py")


def test_a_reference_failing_in_the_worker_is_the_references_fault_never_the_candidates(files):
    """Raising, exiting, crashing or hanging in the reference's own code (marked by ``spec.running_reference``) is a
    spec_error naming the reference's file and line (where Python knows it), not a candidate crash or timeout; the
    configs finished before are kept and the worker goes on."""
    with EvalWorker("cpu", evaluate_fn=FAKE) as worker:
        results = {kind: worker.evaluate(_request(files, "honest").model_copy(
            update={"reference_path": _faulty_reference(files, kind)})) for kind in REFERENCE_FAULTS}
        assert all(r.status == "spec_error" and r.failure["kind"] == "SpecError" for r in results.values())
        assert all([c.config for c in r.configs] == [{"n": 3}] for r in results.values())
        assert results["raises"].message == "the reference ref_raises.py raised RuntimeError: boom at ref_raises.py:6"
        assert results["exits"].message.partition("; the worker's last output:")[0] == (  # then the candidate's print
            "the reference ref_exits.py ended the evaluation worker in Model.forward (config {'n': 5}) (no Python "
            "stack: the process ended itself, e.g. os._exit, so no line is known): exited with code 3; the reference "
            "is at fault, not the candidate")
        assert results["segfaults"].message.startswith(
            "the reference ref_segfaults.py ended the evaluation worker in Model.forward (config {'n': 5}) at "
            "ref_segfaults.py:6: died from signal SIGSEGV; the reference is at fault, not the candidate; the worker's "
            "last output:\n")
        assert results["segfaults"].failure["line"] == 6 and results["segfaults"].failure["fault"] == "died"
        assert results["hangs"].message == (
            "the reference ref_hangs.py did not finish Model.forward (config {'n': 5}) at ref_hangs.py:6 within 1 s "
            "(it hangs, sleeps or is too slow); the worker was killed and restarted; the reference is at fault, not "
            "the candidate")
        assert worker.restarts == 3
        assert worker.evaluate(_request(files, "honest")).status == "ok"


def test_a_phase_that_runs_out_of_time_over_many_short_reference_steps_is_a_timeout_not_the_references_fault(files):
    """The budget is the phase's: a reference whose every step is quick (0.3 s of a 1 s budget, six times) does not
    hang; the phase is what did not finish. Only a step that ran half the budget or more is blamed on the reference
    (``test_a_reference_failing_in_the_worker_is_the_references_fault_never_the_candidates``: a 60 s sleep)."""
    (files / "ref_slow.py").write_text("import time\nimport torch\nclass Model(torch.nn.Module):\n"
                                       "    def forward(self, x):\n        time.sleep(0.3)\n        return x * 2\n")
    with EvalWorker("cpu", evaluate_fn=FAKE) as worker:
        result = worker.evaluate(_request(files, "honest", configs=[{"n": 3}, {"n": 3, "reps": 6}]).model_copy(
            update={"reference_path": str(files / "ref_slow.py")}))
    assert result.status == "timeout" and result.failure["kind"] == "Timeout"
    assert result.message.startswith("checking config {'n': 3, 'reps': 6} did not finish within 1 s (the reference's "
                                     "Model.forward was running, for ")
    assert result.message.endswith(" s: the phase's time went to many steps); the worker was killed and restarted "
                                   "(a config's checks have 1 s, the first config's 5 s more for compiling the "
                                   "kernels)")
    assert [c.config for c in result.configs] == [{"n": 3}]


def test_every_error_maps_to_one_status():
    cases = [(SpecError("x"), "spec_error"), (CompileFailed("x"), "compile_error"), (Mismatch("x"), "mismatch"),
             (GuardViolation("x", rule="r"), "guard_violation"), (CandidateError("x"), "candidate_error"),
             (Timeout("x"), "timeout"), (DeviceFault("x"), "crash"), (WorkerError("x"), "crash"),
             (EvalError("x"), "internal_error"), (ValueError("x"), "internal_error")]
    assert [status_of(e) for e, _ in cases] == [s for _, s in cases]


def test_configs_expand_from_the_grid_and_overrides():
    grid = [{"M": 16384, "C": 96}, {"M": 16384, "C": 160}]
    assert expand_configs(grid) == grid
    assert expand_configs(grid, overrides={"M": 1000}) == [{"M": 1000, "C": 96}, {"M": 1000, "C": 160}]
    assert expand_configs(grid, overrides={"C": 320}) == [{"M": 16384, "C": 320}]
    assert expand_configs(grid, overrides={"M": [7, 9], "C": 96}) == [{"M": 7, "C": 96}, {"M": 9, "C": 96}]
    assert expand_configs(grid, configs=[{"M": 1, "C": 32}]) == [{"M": 1, "C": 32}]


def test_time_limits_per_phase():
    r = EvalRequest(kernel_path="k.py", reference_path="r.py", compile_timeout_s=10, run_timeout_s=3)
    assert [budget_s(r, "load", None), budget_s(r, "check", 0), budget_s(r, "check", 1),
            budget_s(r, "timing", 1)] == [10, 13, 3, 13]


# -- the CLI ------------------------------------------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch):
    from tileagent import cli as module

    monkeypatch.setattr(module, "EVALUATE_FN", FAKE)
    runner = CliRunner()
    return lambda *args: runner.invoke(module.app, ["eval", *map(str, args), "--device", "cpu"])


def test_cli_eval_runs_the_worker_and_writes_the_record(cli, files):
    out = files / "out.json"
    ok = cli(files / "honest.py", files / "ref.py", "--config", "n=3,6", "--json", out)
    assert ok.exit_code == 0, ok.output
    record = json.loads(out.read_text())
    assert record["status"] == "ok" and [c["config"] for c in record["configs"]] == [{"n": 3}, {"n": 6}]
    assert "correct" in ok.output and "timing unavailable" in ok.output


class _InProcessWorker:
    """EvalWorker's interface, running the fake evaluation in this process (for exit-code tests)."""

    def __init__(self, device, evaluate_fn):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def evaluate(self, request):
        from tests.evaluator_fakes import fake_evaluate

        return fake_evaluate(request)


def test_cli_eval_exit_codes(cli, files, monkeypatch):
    from tileagent import evaluator
    import tileagent.evaluator.worker

    monkeypatch.setattr(evaluator.worker, "EvalWorker", _InProcessWorker)
    assert cli(files / "honest.py", files / "ref.py").exit_code == 0
    wrong = cli(files / "wrong.py", files / "ref.py")
    assert wrong.exit_code == 1 and "mismatch" in wrong.output
    bad_spec = cli(files / "honest.py", files / "no_model.py")
    assert bad_spec.exit_code == 2 and "defines no class Model" in bad_spec.output


def test_cli_eval_bad_input_exits_2_without_a_worker(cli, files):
    assert cli(files / "missing.py", files / "ref.py").exit_code == 2
    assert cli(files / "honest.py", files / "missing.py").exit_code == 2
    no_value = cli(files / "honest.py", files / "ref.py", "--config", "n")
    assert no_value.exit_code == 2 and "--config expects KEY=v1,v2 (e.g. C=96,320), got 'n'" in no_value.output
    assert "note: --config/-c is deprecated; use --grid (same meaning)" in no_value.output


# -- the real evaluator, once its parts exist ---------------------------------------------------------------------

needs_correctness = pytest.mark.skipif(importlib.util.find_spec("evaluator.correctness") is None,
                                       reason="evaluator.correctness not built yet")


KERNEL = """
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def relu_scale(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as row:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                x[j] = T.max(x[j], 0.0) * 2.0
            T.copy(x, Y[row, 0])

    return main
"""
REAL = {
    "reference": """
        import torch
        import torch.nn as nn

        CONFIGS = [{"M": 4, "N": 32}]


        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x) * 2


        def get_inputs(M=4, N=32):
            return [torch.randn(M, N)]


        def get_init_inputs(M=4, N=32):
            return []
    """,
    "honest": KERNEL + """
class ModelNew(nn.Module):
    def forward(self, x):
        return relu_scale(*x.shape)(x)
""",
    "hang": KERNEL + """
class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
""",
    "oom": KERNEL + """
import torch


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty(1 << 50, dtype=torch.uint8)  # a petabyte
""",
}


@needs_correctness
def test_real_evaluation_contains_a_hang_and_an_oom_and_goes_on(tmp_path):
    """The real evaluator in the worker (static and run-time guards, seeds, distributions). A segfault cannot get
    past its static guard (os, signal, ctypes are banned imports), so out of memory stands in for the crash."""
    for name, text in REAL.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text) if name == "reference" else text)

    def request(name, **kw):
        return EvalRequest(kernel_path=str(tmp_path / f"{name}.py"), reference_path=str(tmp_path / "reference.py"),
                           device="cpu", seeds=2, compile_timeout_s=3, run_timeout_s=1, **kw)

    with EvalWorker("cpu") as worker:
        first = worker.evaluate(request("honest"))
        assert first.status == "ok" and first.configs[0].correct and first.configs[0].checks > 2
        hung = worker.evaluate(request("hang"))
        assert hung.status == "timeout" and "config {'M': 4, 'N': 32} did not finish within 4 s" in hung.message
        oom = worker.evaluate(request("oom"))
        assert oom.status == "crash" and oom.message.startswith("out of memory") and oom.failure["fault"] == "oom"
        assert worker.restarts == 2
        after = worker.evaluate(request("honest"))
        assert after.status == "ok" and after.configs[0].correct and not after.timing_available


BIG_REFERENCE = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
CONFIGS = [{"M": 4, "N": 1000}, {"M": 8, "N": 65536}, {"M": 16, "N": 65536}, {"M": 8, "N": 40}]
SMALL_CONFIG = {"M": 2, "N": 64}
def get_inputs(M, N):
    return [torch.randn(M, N)]
def get_init_inputs():
    return []
"""


def test_on_the_cpu_a_config_too_large_for_the_interpreter_is_checked_at_small_config_sizes(tmp_path):
    """Inputs over INTERPRETER_INPUT_ELEMENTS (8 x 65536 > 2**18) and no free dim: the sizes SMALL_CONFIG states are
    halved toward it until they fit (M=8, N=65536 at M=4, N=32768; M=16 at M=8), so two configs stay two checks; the
    result keeps the config as stated, names the size checked, and says why. A config under the limit, or already
    smaller than SMALL_CONFIG on a key, keeps its sizes (issue 19: the played LLM waited 420 s per turn for the
    interpreter on full-size non-free dims; session 22: two softmax configs came down to one check at SMALL_CONFIG)."""
    from tileagent.evaluator.records import ConfigResult
    from tileagent.evaluator.worker import evaluate
    from tileagent.feedback import render_feedback

    ref = tmp_path / "ref.py"
    ref.write_text(BIG_REFERENCE)
    checked = []

    def check(spec, kernel_path, device, configs, seeds, **kw):
        checked.append(configs[0])
        return [ConfigResult(config=configs[0], correct=True, checks=seeds)]

    request = EvalRequest(kernel_path=str(ref), reference_path=str(ref), device="cpu", seeds=1)
    result = evaluate(request, check_candidate=check)
    assert result.status == "ok"
    assert checked == [{"M": 4, "N": 1000}, {"M": 4, "N": 32768}, {"M": 8, "N": 32768}, {"M": 8, "N": 40}]
    assert [(c.config, c.evaluated_at) for c in result.configs] == [
        ({"M": 4, "N": 1000}, None), ({"M": 8, "N": 65536}, {"M": 4, "N": 32768}),
        ({"M": 16, "N": 65536}, {"M": 8, "N": 32768}), ({"M": 8, "N": 40}, None)]
    assert result.configs[1].notes == [
        "checked at M=4, N=32768 on the CPU interpreter (the sizes SMALL_CONFIG states halved toward it): the inputs "
        "and model tensors of M=8, N=65536 hold 524,288 elements and its outputs 524,288, more than the interpreter "
        "checks in time (262,144 each); a GPU checks the config as stated"]
    assert "Checked at smaller sizes (inputs or outputs too large for the interpreter; the free dims (FREE_DIMS) " \
           "halved until the inputs and model tensors fit, and the outputs too, other sizes as stated; where that is " \
           "not enough, the sizes SMALL_CONFIG states halved toward it until they fit, the first it states alone " \
           "first, then with the next (a config's last dims, its rows and planes, stay as stated where that fits, " \
           "unless two configs would then be checked alike); else SMALL_CONFIG's sizes): M=8, N=65536 at " \
           "M=4, N=32768; M=16, N=65536 at M=8, N=32768. A path your kernel takes only at the sizes as stated was " \
           "compiled for them, not run." in render_feedback(result)
    # played LLM session 39: the loop passes the configs as stated (free dims too) that each check stands for
    stated = [[{"M": 64, "N": 1000}], [{"M": 64, "N": 65536}, {"M": 32, "N": 65536}], [{"M": 128, "N": 65536}], []]
    assert "else SMALL_CONFIG's sizes): M=64, N=65536 and M=32, N=65536 at M=4, N=32768; M=128, N=65536 at M=8, " \
           "N=32768." in render_feedback(result, stated=stated)


def test_on_the_cpu_a_config_too_large_for_the_interpreter_halves_its_free_dims_first(tmp_path):
    """Played LLM, session 19: softcap + log_softmax over a 256000-word vocabulary was checked at SMALL_CONFIG's
    V=1000, where the kernel took one chunk a row; the 63-chunk path a GPU runs was compiled, never run. The free dims
    are halved first, the other sizes kept; SMALL_CONFIG's sizes when that is not enough or the model's own tensors
    are too large (a GEMM's weight)."""
    from tileagent.evaluator.spec import load_spec
    from tileagent.evaluator.interpreter_sizes import interpreter_config

    ref = tmp_path / "ref.py"
    ref.write_text(BIG_REFERENCE.replace('SMALL_CONFIG = {"M": 2, "N": 64}',
                                         'SMALL_CONFIG = {"M": 2, "N": 64}\nFREE_DIMS = ["M"]'))
    spec = load_spec(ref)
    run, note = interpreter_config(spec, {"M": 8, "N": 65536})
    assert run == {"M": 4, "N": 65536}
    assert note.startswith("checked at M=4, N=65536 on the CPU interpreter (the free dims halved, the other sizes as "
                           "stated): the inputs and model tensors of M=8, N=65536 hold 524,288 elements")
    # too wide even at M=1: N halved toward SMALL_CONFIG's 64 with M until they fit
    assert interpreter_config(spec, {"M": 8, "N": 400000})[0] == {"M": 2, "N": 100000}
    assert interpreter_config(spec, {"M": 4, "N": 1000}) == ({"M": 4, "N": 1000}, None)
    weighted = tmp_path / "weighted.py"
    weighted.write_text(ref.read_text().replace(
        "class Model(torch.nn.Module):\n", "class Model(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.w = torch.nn.Parameter(torch.randn(600, 600))\n"))
    # a weight too large at any input size: SMALL_CONFIG's sizes
    assert interpreter_config(load_spec(weighted), {"M": 8, "N": 65536})[0] == {"M": 2, "N": 64}


def test_on_the_cpu_a_config_keeps_its_last_dims_where_shrinking_the_first_is_enough():
    """Played LLM, session 33: a depthwise 7x7 conv's 56 x 56 planes (C=96) were checked at C=48, 28 x 28, where a
    kernel leaving rows 36-55 of each plane unwritten passed. The first size SMALL_CONFIG states (C) shrinks alone
    while that fits; the M x N reference above, whose two configs differ only in that first size, keeps them apart
    by halving every size together (its expectations there are unchanged)."""
    from tileagent.evaluator.interpreter_sizes import interpreter_configs
    from tileagent.evaluator.spec import load_spec

    from tests.conftest import REPO

    ref = REPO / "bench" / "played_llm" / "refs" / "depthwise_conv7x7.py"
    configs = [{**c, "B": 2} for c in load_spec(ref).configs]  # B free: at SMALL_CONFIG's 2
    assert interpreter_configs(ref, configs) == [{"B": 2, "C": 24, "H": 56, "W": 56},
                                                 {"B": 1, "C": 192, "H": 28, "W": 28},  # B halved
                                                 {"B": 2, "C": 384, "H": 14, "W": 14}]  # fits as stated


def test_on_the_cpu_a_layers_weight_counts_toward_the_interpreters_size():
    """Played LLM, session 20: bf16 linear + bias + GELU at M=40 (SMALL_CONFIG's tokens), K=4096, N=16384 has 164K
    input elements but a 67M-element weight; it was checked as stated and timed out twice (300 s, 420 s). The
    model's parameters and buffers count with the inputs: K and N are halved toward SMALL_CONFIG's until the weight
    and inputs fit."""
    from tileagent.evaluator.interpreter_sizes import interpreter_config
    from tileagent.evaluator.spec import load_spec

    from tests.conftest import REPO

    spec = load_spec(REPO / "bench" / "played_llm" / "refs" / "linear_bias_gelu.py")
    run, note = interpreter_config(spec, {"M": 40, "K": 4096, "N": 16384})
    assert run == {"M": 40, "K": 128, "N": 512}
    assert note.startswith("checked at M=40, K=128, N=512 on the CPU interpreter (the sizes SMALL_CONFIG states halved "
                           "toward it): the inputs and model tensors of M=40, K=4096, N=16384 hold 67,289,088 elements")
    qk = load_spec(REPO / "bench" / "played_llm" / "refs" / "qk_rmsnorm.py")  # a (D,) weight leaves it as stated
    assert interpreter_config(qk, {"B": 2, "S": 5, "H": 32, "D": 128}) == ({"B": 2, "S": 5, "H": 32, "D": 128}, None)


def test_each_config_says_how_long_its_check_took(tmp_path):
    """Played LLM, GPU turns (issue 19): a turn cost about 100 s of H200 time per op and nothing said where it went;
    every config's result now carries the worker's wall seconds per phase (check; timing when timed)."""
    import time

    from tileagent.evaluator.records import ConfigResult
    from tileagent.evaluator.worker import evaluate

    ref = tmp_path / "ref.py"
    ref.write_text(BIG_REFERENCE)

    def slow_check(spec, kernel_path, device, configs, seeds, **kw):
        time.sleep(0.05)
        return [ConfigResult(config=configs[0], correct=True, checks=seeds)]

    request = EvalRequest(kernel_path=str(ref), reference_path=str(ref), device="cpu", seeds=1)
    result = evaluate(request, check_candidate=slow_check)
    assert result.status == "ok" and result.configs
    for c in result.configs:
        assert set(c.seconds) == {"check"} and c.seconds["check"] >= 0.05, c.seconds


def test_an_out_of_memory_names_the_function_and_line_that_ran_out():
    """Played LLM session 37: the evaluator ran out of device memory and said nothing of where (the reference, one of
    its own checks, the candidate)."""
    import torch

    from tileagent.evaluator.worker import classify

    def allocate_everything():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 7.87 GiB (a test)")

    try:
        allocate_everything()
    except torch.OutOfMemoryError as e:
        fault = classify(e, "cpu")
    line = allocate_everything.__code__.co_firstlineno + 1
    assert fault.message == (f"out of memory in allocate_everything at test_evaluator_worker.py:{line}: CUDA out of "
                             f"memory. Tried to allocate 7.87 GiB (a test)")
