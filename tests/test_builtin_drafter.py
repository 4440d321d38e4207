"""The built-in drafter: family recognition from the traced graph, candidates that pass the evaluator on the CPU and
lower for CUDA at the tasks' real sizes, and the turn policy (variants not repeated, plain refusals)."""

import importlib.util
import textwrap

import pytest
import torch

from tileagent.compiler.jit import JITImpl
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.guards import check_source
from tileagent.evaluator.spec import load_spec
from tests.conftest import REPO
from tileagent.drafters.base import AttemptSummary, DrafterUnavailable, DraftTask
from tileagent.drafters.builtin import BuiltinDrafter, explain, recognize_family

TASKS = {
    "rmsnorm_silu": "rmsnorm",
    "layernorm": "layernorm",
    "softmax": "softmax",
    "bias_gelu": "elementwise",
    "swish_bias": "elementwise",
    "sum_reduction": "row_reduction",
    "gemm_relu": "gemm_epilogue",
    "matmul_scale_residual": "gemm_epilogue",
    "attention": "attention",
    "mla_decode": None,
}


def task_path(name):
    return REPO / "tasks" / f"{name}.py"


def make_task(name, turn=1, n=1, history=()):
    path = task_path(name)
    return DraftTask(task_name=name, reference_path=str(path), reference_source=path.read_text(), configs=[],
                     turn=turn, n=n, history=list(history))


def write_reference(tmp_path, name, body, inputs, init="[]"):
    """A KernelBench reference file with ``body`` as the Model class."""
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
                    + textwrap.dedent(body) + f"\n\ndef get_inputs():\n    return {inputs}\n\n\n"
                    f"def get_init_inputs():\n    return {init}\n")
    return path


# -- recognition -----------------------------------------------------------------------------------------------------


def test_every_shipped_task_is_listed_here():
    assert {p.stem for p in (REPO / "tasks").glob("*.py")} == set(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_shipped_task_is_recognized_as_its_family(name):
    match = recognize_family(task_path(name))
    assert (match.family if match else None) == TASKS[name]


def test_recognition_reads_what_the_templates_need():
    rms = recognize_family(task_path("rmsnorm_silu"))
    assert (rms.eps.value, rms.eps.attr, rms.activation, rms.weight) == (1e-5, "eps", "silu", "gamma")
    att = recognize_family(task_path("attention"))
    assert (att.layout, att.causal.attr, att.head_dim, att.scale) == ("bshd", "causal", 64, None)
    res = recognize_family(task_path("matmul_scale_residual"))
    assert res.gemm_b_transposed and [s.attr for s in res.consts.values() if s.attr] == ["scaling_factor"]
    red = recognize_family(task_path("sum_reduction"))
    assert (red.reduce_op, red.reduce_dims, red.keepdim, red.reduce_dim_attr) == ("sum", (1,), True, "dim")
    swish = recognize_family(task_path("swish_bias"))
    assert (swish.dtype, [o.role for o in swish.operands]) == ("bfloat16", ["full", "row"])


def test_recognition_does_not_look_at_the_file_name(tmp_path):
    path = tmp_path / "attention.py"
    path.write_text(task_path("softmax").read_text())
    assert recognize_family(path).family == "softmax"


def test_elementwise_chain_with_a_parameter(tmp_path):
    path = write_reference(tmp_path, "chain", """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(torch.randn(64))

            def forward(self, x, y):
                z = torch.tanh(x * self.scale) - 0.5 * y
                return torch.clamp(F.leaky_relu(z, 0.1), -2.0, 2.0)
        """, "[torch.randn(8, 64), torch.randn(8, 64)]")
    match = recognize_family(path)
    assert match.family == "elementwise"
    assert sorted((o.name, o.role) for o in match.operands) == [("scale", "row"), ("x", "full"), ("y", "full")]


def test_layernorm_module(tmp_path):
    path = write_reference(tmp_path, "ln", """
        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.norm = nn.LayerNorm(n, eps=1e-6)

            def forward(self, x):
                return F.gelu(self.norm(x))
        """, "[torch.randn(4, 8, 32)]", "[32]")
    match = recognize_family(path)
    assert (match.family, match.eps.value, match.activation) == ("layernorm", 1e-6, "gelu")


def test_manual_softmax_and_manual_layernorm(tmp_path):
    soft = write_reference(tmp_path, "soft", """
        class Model(nn.Module):
            def forward(self, x):
                z = x * 0.125
                e = torch.exp(z - z.amax(dim=-1, keepdim=True))
                return e / e.sum(dim=-1, keepdim=True)
        """, "[torch.randn(16, 64)]")
    assert recognize_family(soft).family == "softmax"
    ln = write_reference(tmp_path, "manual_ln", """
        class Model(nn.Module):
            def forward(self, x):
                mu = x.mean(-1, keepdim=True)
                var = ((x - mu) ** 2).mean(-1, keepdim=True)
                return (x - mu) / torch.sqrt(var + 1e-5)
        """, "[torch.randn(16, 64)]")
    assert recognize_family(ln).family == "layernorm"


def test_linear_then_gelu(tmp_path):
    path = write_reference(tmp_path, "mlp", """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64, 32).half()

            def forward(self, x):
                return F.gelu(self.fc(x), approximate="tanh")
        """, "[torch.randn(16, 64).half()]")
    match = recognize_family(path)
    assert (match.family, match.activation, match.gemm_b_transposed, match.bias) == \
        ("gemm_epilogue", "gelu", True, "fc_bias")


def test_ops_outside_the_families_are_declined(tmp_path):
    path = write_reference(tmp_path, "sort", """
        class Model(nn.Module):
            def forward(self, x):
                return torch.sort(x, dim=1).values
        """, "[torch.randn(8, 64)]")
    match, reason = explain(path)
    assert match is None and "sort" in reason
    with pytest.raises(DrafterUnavailable, match="outside the built-in drafter's families.*--provider openai"):
        BuiltinDrafter().draft(DraftTask(task_name="sort", reference_path=str(path), reference_source="",
                                         configs=[], turn=1))


def test_a_failure_inside_the_drafter_ends_the_run_as_undraftable(monkeypatch, caplog):
    """A bug of ours while rendering (float8 outputs once raised KeyError) is DrafterUnavailable naming the error and
    the way on (the loop's "no drafter could draft it"), with the traceback in the log, not a crash of the run."""
    from tileagent.drafters.builtin import drafter

    def broken(match, knobs):
        raise KeyError("torch.float8_e4m3fn")

    monkeypatch.setattr(drafter, "render", broken)
    with caplog.at_level("ERROR", logger="tileagent.drafters.builtin"), pytest.raises(DrafterUnavailable) as err:
        BuiltinDrafter().draft(make_task("softmax"))
    assert str(err.value).startswith("softmax: the built-in drafter failed on this reference with an internal error "
                                     "(KeyError: 'torch.float8_e4m3fn'; the log has the traceback)")
    assert "--provider file" in str(err.value) and "Traceback" in caplog.text


def test_mla_decode_is_declined_in_plain_words():
    with pytest.raises(DrafterUnavailable) as err:
        BuiltinDrafter().draft(make_task("mla_decode"))
    text = str(err.value)
    assert "mla_decode" in text and "attention" in text and "--base-url" in text


# -- candidates --------------------------------------------------------------------------------------------------------

FAMILY_TASKS = sorted(name for name, family in TASKS.items() if family)


@pytest.mark.parametrize("name", FAMILY_TASKS)
def test_first_draft_passes_the_evaluator_on_the_cpu(name, tmp_path):
    draft = BuiltinDrafter().draft(make_task(name))[0]
    assert draft.label.startswith("builtin/") and draft.response
    path = tmp_path / f"{name}_candidate.py"
    path.write_text(draft.source)
    spec = load_spec(task_path(name))
    results = check_candidate(spec, path, device="cpu", configs=[spec.module.SMALL_CONFIG], seeds=1)
    assert [r.correct for r in results] == [True]


def test_attention_rounds_p_unless_the_tolerance_is_tighter_than_the_default(tmp_path):
    """tasks/attention.py declares atol 1e-3 for fp16: P @ V also takes P's rounding residue (a third gemm). The same
    reference with the default tolerance gets the two-gemm kernel (P rounded to fp16, as FlashAttention), which
    passes the evaluator."""
    tight = BuiltinDrafter().draft(make_task("attention"))[0].source
    assert "\nSPLIT_P = True\n" in tight
    path = tmp_path / "attention_default_tol.py"
    path.write_text("\n".join(line for line in task_path("attention").read_text().splitlines()
                              if not line.startswith("TOLERANCES")))
    draft = BuiltinDrafter().draft(DraftTask(task_name=path.stem, reference_path=str(path), reference_source="",
                                             configs=[], turn=1))[0]
    assert "\nSPLIT_P = False\n" in draft.source and draft.label == "builtin/attention:128x128s2t256"
    candidate = tmp_path / "attention_default_tol_candidate.py"
    candidate.write_text(draft.source)
    spec = load_spec(path)
    results = check_candidate(spec, candidate, device="cpu", configs=[spec.module.SMALL_CONFIG], seeds=1)
    assert [r.correct for r in results] == [True]


def test_generated_kernels_serve_inline_references(tmp_path):
    """Three inputs of different broadcast roles in fp32 (rows of 3-d tensors, a per-row operand), and nn.Linear +
    tanh-GELU in fp16 on a 3-d input: the first drafts pass the evaluator."""
    chain = write_reference(tmp_path, "chain3", """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(torch.randn(64))

            def forward(self, x, y, c):
                z = torch.tanh(x * self.scale) - 0.5 * y + c
                return torch.clamp(F.leaky_relu(z, 0.1), -2.0, 2.0)
        """, "[torch.randn(3, 5, 64), torch.randn(3, 5, 64), torch.randn(3, 5, 1)]")
    mlp = write_reference(tmp_path, "mlp3", """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64, 32).half()

            def forward(self, x):
                return F.gelu(self.fc(x), approximate="tanh")
        """, "[torch.randn(2, 9, 64).half()]")
    for path in (chain, mlp):
        draft = BuiltinDrafter().draft(DraftTask(task_name=path.stem, reference_path=str(path), reference_source="",
                                                 configs=[], turn=1))[0]
        candidate = tmp_path / f"{path.stem}_candidate.py"
        candidate.write_text(draft.source)
        results = check_candidate(load_spec(path), candidate, device="cpu", seeds=1)
        assert [r.correct for r in results] == [True], path.stem


class _Captured(Exception):
    pass


def _load(path, name):
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", FAMILY_TASKS)
def test_turn_one_drafts_lower_for_cuda_at_every_real_config(name, tmp_path):
    """Each turn-1 candidate, built for the emulator target at every CONFIGS size (ModelNew and its inputs on the
    meta device: shapes only, nothing runs), gives CUDA C++ that NVRTC compiles for sm_90a."""
    spec = load_spec(task_path(name), check=False)
    for k, draft in enumerate(BuiltinDrafter().draft(make_task(name, n=2))):
        check_source(draft.source)
        path = tmp_path / f"{name}_{k}.py"
        path.write_text(draft.source)
        module = _load(path, f"_builtin_{name}_{k}")
        kernels = []
        for attr, factory in list(vars(module).items()):
            if isinstance(factory, JITImpl):
                factory.target = "sim"

                def capture(*args, _factory=factory, **kwargs):
                    kernels.append(_factory(*args, **kwargs))
                    raise _Captured

                setattr(module, attr, capture)
        for config in spec.configs:
            kernels.clear()
            with torch.device("meta"):
                model = module.ModelNew(*spec.init_inputs(config))
            with pytest.raises(_Captured):
                model(*spec.sample_inputs(config, 0, "meta"))
            assert kernels[0].target.kind == "sim"
            assert kernels[0].cubin("sm_90a")[:4] == b"\x7fELF", (draft.label, config)


# -- turns ---------------------------------------------------------------------------------------------------------


def test_later_turns_skip_tried_variants_and_then_give_up():
    drafter = BuiltinDrafter()
    history = []
    labels = []
    for turn in range(1, 20):
        try:
            drafts = drafter.draft(make_task("softmax", turn=turn, n=2, history=history))
        except DrafterUnavailable as e:
            assert "all" in str(e) and "softmax" in str(e) and "compile_error" in str(e)
            break
        assert 1 <= len(drafts) <= 2
        for k, d in enumerate(drafts):
            assert d.label not in labels
            labels.append(d.label)
            history.append(AttemptSummary(attempt_id=f"t{turn}-c{k}", turn=turn, label=d.label, source=d.source,
                                          status="compile_error" if k else "ok"))
    else:
        pytest.fail("the drafter never ran out of variants")
    assert len(labels) == len(set(labels)) >= 3


GATED = """
import sys
import torch
import torch.nn as nn

CONFIGS = [{{"N": 8}}]

class Model(nn.Module):
    def forward(self, x):
        sys.modules["trace_gate"].{step}()
        return torch.relu(x)

def get_inputs(N=8):
    return [torch.randn(N)]

def get_init_inputs(N=8):
    return []
"""


def test_two_threads_tracing_at_once_leave_torch_nn_unpatched(tmp_path, monkeypatch):
    """torch.fx patches torch.nn.Module.__call__ while it traces: a trace that starts inside another and ends after it
    restores the first one's patch for good, and every later module call in the process fails (a full test run broke
    that way after a threaded batch). The drafter traces one reference at a time."""
    import sys
    import threading
    import types

    from tileagent.drafters.builtin.graph import trace_reference

    a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()
    gate = types.ModuleType("trace_gate")
    gate.a = lambda: (a_inside.set(), b_inside.wait(2))  # the first trace waits (2 s at most) for the second to start
    gate.b = lambda: (b_inside.set(), a_done.wait(2))  # the second ends after the first
    monkeypatch.setitem(sys.modules, "trace_gate", gate)
    (tmp_path / "a.py").write_text(GATED.format(step="a"))
    (tmp_path / "b.py").write_text(GATED.format(step="b"))
    call = torch.nn.Module.__call__
    for name in ("__call__", "__getattr__"):  # put back at teardown even if a patch leaks: later tests need them
        monkeypatch.setattr(torch.nn.Module, name, getattr(torch.nn.Module, name))
    first = threading.Thread(target=trace_reference, args=(tmp_path / "a.py",))
    second = threading.Thread(target=trace_reference, args=(tmp_path / "b.py",))
    first.start()
    assert a_inside.wait(10)
    second.start()  # without the lock it traces inside the first trace, and ends after it
    first.join(30)
    a_done.set()
    second.join(30)
    assert torch.nn.Module.__call__ is call


def test_an_op_without_a_meta_kernel_fails_the_trace_without_printing_a_traceback(capfd):
    """Played LLM 48b: every run of a reference calling torch.bincount began with a raw torch traceback (fx's
    ShapeProp prints it before it raises); the trace's error says what failed, and nothing else is printed."""
    from tileagent.drafters.builtin.graph import TraceError, trace_reference

    with pytest.raises(TraceError, match="torch.fx could not trace Model.forward: RuntimeError: ShapeProp error"):
        trace_reference(REPO / "bench" / "played_llm" / "refs" / "masked_scatter_mean.py")
    assert "Traceback" not in capfd.readouterr().err
