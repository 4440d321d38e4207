"""prompts/: the templates render strictly, the DSL guide cites real diagnostics, and every example kernel compiles
and matches its reference on the CPU targets (interpreter and SIMT emulator) and compiles with NVRTC for sm_90a; the
example candidate passes the evaluator."""

import re
import textwrap
from pathlib import Path

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CODES, CompileError
from tileagent.compiler.jit import JITImpl
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec
from tests.conftest import REPO, load_module
from tileagent import prompts

FEEDBACK = ["compile_error", "mismatch", "guard_violation", "guard_violation_init", "candidate_error", "kernel_fault", "worker_error",
            "cpu_timeout", "cpu_timeout_sizes", "timing_row",
            "timing", "resources",
            "malformed_answer", "covered_by_tuning"]
TEMPLATES = ["system", "dsl_guide"] + [f"feedback.{name}" for name in FEEDBACK]

# Per example kernel: sizes for check() on the interpreter; sizes and a small schedule for check() on the emulator
# (kept small: the emulator runs every thread); (factory, args) of a production-sized kernel for NVRTC.
EXAMPLES = {
    "rmsnorm_silu": ({"M": 37, "C": 160}, {"M": 7, "C": 96}, ("rmsnorm_silu", (None, 320))),
    "softmax": ({"M": 5, "N": 512}, {"M": 3, "N": 256}, ("softmax", (None, 2048))),
    "layernorm": ({"M": 37, "N": 160}, {"M": 7, "N": 160}, ("layernorm", (None, 4096))),
    "bias_gelu": ({"M": 37, "N": 1000}, {"M": 9, "N": 96, "block_m": 4, "block_n": 64, "threads": 64},
                  ("bias_gelu", (None, 4096))),
    "gemm_relu": ({"M": 200, "N": 136, "K": 72}, {"M": 40, "N": 48, "K": 64, "block_M": 64, "block_N": 64},
                  ("gemm_relu", (None, 4096, 4096))),
    "sum_dim1": ({"B": 3, "D1": 17, "D2": 20}, {"B": 2, "D1": 17, "D2": 20, "block_k": 8, "block_n": 32,
                                                 "threads": 64}, ("sum_dim1", (None, 4096, 256))),
    "attention": ({"B": 2, "S": 130, "H": 2, "D": 64, "causal": True}, {"B": 1, "S": 40, "H": 1, "D": 64},
                  ("attention", (16, 128, True))),
    "cross_entropy": ({"M": 5, "V": 1000, "block_v": 256, "threads": 64},
                      {"M": 3, "V": 300, "block_v": 128, "threads": 64}, ("cross_entropy", (None, 128256))),
    "add_rmsnorm": ({"M": 37, "C": 160}, {"M": 7, "C": 96}, ("add_rmsnorm", (None, 4096))),
    "bincount": ({"L": 5000, "E": 37}, {"L": 700, "E": 20, "block": 256, "threads": 64}, ("bincount", (256,))),
}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _sample(name: str) -> dict:
    return {field: f"<{field}>" for field in prompts.fields(name)}


# -- templates -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_renders_with_every_field_filled(name):
    values = _sample(name)
    text = prompts.render(name, **values, unused="extra fields are ignored")
    assert text.strip()
    assert "<!--" not in text, "the maintainers' comment is not rendered"
    for field, value in values.items():
        assert value in text, f"field {field} is not in the rendered text"


@pytest.mark.parametrize("name", [n for n in TEMPLATES if prompts.fields(n)])
def test_template_fails_naming_a_missing_field(name):
    values = _sample(name)
    for field in values:
        partial = {k: v for k, v in values.items() if k != field}
        with pytest.raises(KeyError) as info:
            prompts.render(name, **partial)
        assert isinstance(info.value, prompts.MissingField)
        assert f"template {name!r} needs field {field!r}" in str(info.value)


def test_feedback_sections_are_the_documented_templates():
    text = (prompts.prompts_dir() / "feedback.md").read_text()
    comment, body = text.split("-->", 1)
    assert re.findall(r"^## (\S+)$", body, re.MULTILINE) == FEEDBACK
    for name in FEEDBACK:
        assert re.search(rf"^{name}\s", comment, re.MULTILINE), f"feedback.md does not document {name}'s fields"
        for field in prompts.fields(f"feedback.{name}"):
            assert field in comment, f"feedback.md does not document field {field} of {name}"


def test_unknown_template_names_the_ones_there_are():
    with pytest.raises(KeyError, match="compile_error"):
        prompts.template("feedback.nonexistent")
    with pytest.raises(FileNotFoundError):
        prompts.template("nonexistent")


def test_compile_error_template_renders_a_real_diagnostic():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(64, 32):
                x[i, j] = x[i, j] * 2
            T.copy(x, Y)

    with pytest.raises(CompileError) as info:
        tileagent.compile(main, target="sim")
    diag = info.value.to_dict()
    notes = "\n".join(f"  note: {n}" for n in diag["notes"])
    text = prompts.render("feedback.compile_error", **{**diag, "notes": notes, "where": "",
                                                        "hint": f"  hint: {diag['hint']}"})
    assert text.startswith("Your module did not compile:\n")
    assert f"error[L001]: {diag['message']}" in text and "x[i, j] = x[i, j] * 2" in text
    assert f"  hint: {diag['hint']}" in text and "The DSL guide's error table explains L001" in text

    # through the loop's renderer: a diagnostic without a hint gets no empty "hint:" line (played LLM session 35)
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    for hint, line in ((diag["hint"], f"  hint: {diag['hint']}"), ("", None)):
        fed = render_feedback(EvalResult(status="compile_error", message="m",
                                         failure={"diagnostic": {**diag, "hint": hint}}))
        assert (line in fed) if line else "hint:" not in fed
    # a compile error at one config names it (played LLM 47: E506 at C=150, where C=19 had compiled)
    fed = render_feedback(EvalResult(status="compile_error", message="m",
                                     failure={"diagnostic": diag, "config": {"C": 150, "HW": 64}}))
    assert fed.startswith("Your module did not compile at config C=150, HW=64:\n"), fed


def test_timing_template_takes_rendered_rows():
    row = {"config": {"M": 16384, "C": 320}, "time_ms": "0.0097", "eager_ms": "0.0917", "compile_ms": "0.0128",
           "speedup_eager": "9.45", "speedup_compiled": "1.32", "roofline_pct": "94.7", "bound": "memory"}
    rows = "\n".join(prompts.render("feedback.timing_row", **row) for _ in range(2))
    text = prompts.render("feedback.timing", device="one NVIDIA H200", rows=rows, verdict="V", target="1.0")
    assert text.count("- {'M': 16384, 'C': 320}: 0.0097 ms; eager 0.0917 ms (speedup 9.45x)") == 2
    assert "\n\n- {'M'" in text and "memory-bound roofline\n- {'M'" in text


# -- the DSL guide and the system prompt -----------------------------------------------------------------------------


def test_dsl_guide_cites_real_codes_and_covers_the_frequent_ones():
    guide = prompts.render("dsl_guide")
    cited = set(re.findall(r"`([EL]\d{3})`", guide))
    assert cited <= set(CODES), f"the guide cites unknown codes: {sorted(cited - set(CODES))}"
    frequent = {"E401", "E402", "E403", "E501", "E502", "E503", "E504", "E506", "L001", "L002", "L004", "L005", "E602"}
    assert frequent <= cited, f"the guide's error table lacks {sorted(frequent - cited)}"


def test_dsl_guide_quotes_the_compiler_verbatim():
    guide = prompts.render("dsl_guide")

    @T.prim_func
    def copy_kernel(A: T.Tensor((128, 128), "float16"), Y: T.Tensor((128, 128), "float16")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 64), "float16")
            for k in T.serial(2):
                T.copy(A[by * 64:(by + 1) * 64, k * 32:(k + 1) * 32], A_s)
            T.copy(A_s, Y[by * 64, bx * 64])

    @T.prim_func
    def half_loop(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(64, 32):
                x[i, j] = x[i, j] * 2
            T.copy(x, Y)

    for func, code in ((copy_kernel, "E402"), (half_loop, "L001")):
        with pytest.raises(CompileError) as info:
            tileagent.compile(func, target="sim")
        err = info.value
        assert err.code == code
        message = re.sub(r"line \d+", "line N", err.message)
        assert message in re.sub(r"line \d+", "line N", guide), f"the guide misquotes {code}"
        assert f"hint: {err.hint}" in guide
        for note in err.notes:
            assert f"note: {note}" in guide


def test_dsl_guide_opening_example_computes_softmax(tmp_path):
    block = re.findall(r"```python\n(.*?)```", prompts.render("dsl_guide"), re.DOTALL)[0]
    path = tmp_path / "guide_softmax.py"
    path.write_text("import torch\nx = torch.randn(7, 4096, dtype=torch.float16) * 3\n" + block)
    module = load_module(path)
    torch.testing.assert_close(module.y, torch.softmax(module.x.float(), -1).half(), rtol=1e-2, atol=1e-3)


def test_system_prompt_example_passes_the_evaluator(tmp_path):
    system = prompts.render("system", device="the CPU", **prompts.evaluator_facts())
    blocks = re.findall(r"```python\n(.*?)```", system, re.DOTALL)
    candidate = next(b for b in blocks if "class ModelNew" in b)
    (tmp_path / "candidate.py").write_text(candidate)
    (tmp_path / "ref.py").write_text(textwrap.dedent('''
        import torch
        import torch.nn as nn

        CONFIGS = [{"M": 9, "N": 96}]
        FREE_DIMS = ["M"]

        class Model(nn.Module):
            def __init__(self, N):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(N, dtype=torch.float16))

            def forward(self, x):
                return (x.float() * self.weight.float()).to(x.dtype)

        def get_inputs(M=9, N=96):
            return [torch.randn(M, N, dtype=torch.float16)]

        def get_init_inputs(M=9, N=96):
            return [N]
    '''))
    spec = load_spec(tmp_path / "ref.py")
    results = check_candidate(spec, tmp_path / "candidate.py", device="cpu", configs=[{"M": 9, "N": 96}], seeds=1,
                              distributions=["normal"])
    assert all(r.correct for r in results)


# -- example kernels -------------------------------------------------------------------------------------------------


def _example(name: str):
    return load_module(REPO / "prompts" / "examples" / f"{name}.py")  # a fresh module: its own kernel caches


def test_every_example_file_is_checked_here():
    names = {p.stem for p in prompts.example_kernels()}
    kernels = {n for n in names if not n.startswith("candidate_")}
    assert kernels == set(EXAMPLES), "add new example kernels to EXAMPLES in this file"
    assert 4 <= len(kernels) <= 12
    for name in kernels:
        module = _example(name)
        assert module.__doc__ and callable(module.reference) and callable(module.check), name
        assert any(isinstance(v, JITImpl) for v in vars(module).values()), f"{name} has no @tileagent.jit factory"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_matches_its_reference_in_the_interpreter(name):
    cpu_sizes = EXAMPLES[name][0]
    kernel = _example(name).check(device="cpu", **cpu_sizes)
    assert kernel.target.kind == "cpu"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_lowers_correctly_and_compiles_for_sm90a(name):
    """The same check() with the kernels built for the emulator: the lowered per-thread program is what runs; then
    NVRTC compiles its CUDA source, and the CUDA source of the production-sized kernel."""
    module = _example(name)
    for factory in (v for v in vars(module).values() if isinstance(v, JITImpl)):
        factory.target = "sim"
    kernel = module.check(device="cpu", **EXAMPLES[name][1])
    assert kernel.target.kind == "sim"
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"
    factory_name, args = EXAMPLES[name][2]
    factory = getattr(module, factory_name)
    big = tileagent.compile(factory.fn(*args), out_idx=factory.out_idx, target="sim",
                            pass_configs=factory.pass_configs)
    assert big.cubin("sm_90a")[:4] == b"\x7fELF"


@pytest.mark.parametrize("block_m", [1, 4])
def test_cross_entropy_example_loads_its_rows_in_128_bit_vectors(block_m):
    """Played-LLM session 3 (issue 19): the label fragment, filled by T.copy from the int64 labels, gave the row
    tile's loop 8-byte vectors, so X was loaded 2 halves (32 bits) at a time; the example now stages the labels
    through shared memory and X loads are 8 halves wide (the compiler now keeps them wide either way:
    tests/test_guide_claims.py). The pattern that still narrows accesses is stated in the guide."""
    module = _example("cross_entropy")
    source = tileagent.compile(module.cross_entropy.fn(None, 32000, block_m=block_m), out_idx=[2],
                               target="cuda:sm_90a").get_kernel_source()
    widths = set(re.findall(r"copy (\d+) x half -> float", source))
    assert widths == {"8"}, widths
    guide = (prompts.prompts_dir() / "dsl_guide.md").read_text()
    assert "One pattern still narrows global accesses" in guide and "`Mask[b, k * block_k + j]`" in guide


def test_candidate_passes_the_evaluator():
    spec = load_spec(REPO / "tasks" / "rmsnorm_silu.py")
    path = REPO / "prompts" / "examples" / "candidate_rmsnorm_silu.py"
    results = check_candidate(spec, path, device="cpu", configs=[spec.module.SMALL_CONFIG], seeds=1)
    assert [r.correct for r in results] == [True]
    assert results[0].checks > 0


# -- what the model is told ------------------------------------------------------------------------------------------


def test_system_prompt_states_the_evaluators_own_rules():
    from tileagent.evaluator import guards, spec

    text = prompts.render("system", device="one GPU", **prompts.evaluator_facts())
    for module in guards.ALLOWED_IMPORTS:
        assert f"`{module}`" in text, f"allowed import {module} is not in the system prompt"
    for dtype, tol in spec.DEFAULT_TOLERANCES.items():
        if dtype != torch.float64:
            assert f"{str(dtype).removeprefix('torch.')}" in text and f"atol {tol.atol:g}" in text
    for name, (_, words) in spec.PUBLIC_DISTRIBUTIONS.items():
        assert f"- {name}: {words}" in text
    for hidden in spec.HIDDEN:
        assert f"- {hidden}:" not in text, "a hidden distribution leaked into the prompt"


def test_a_changed_evaluator_constant_changes_the_prompt(monkeypatch):
    from tileagent.evaluator import guards

    monkeypatch.setattr(guards, "ALLOWED_IMPORTS", guards.ALLOWED_IMPORTS | {"einops"})
    assert "`einops`" in prompts.render("system", device="one GPU", **prompts.evaluator_facts())


OUTSIDE_TASKS = {  # references that tasks/ does not ship -> the examples their prompt must carry
    "cross_entropy": ("""
        import torch.nn as nn
        import torch.nn.functional as F
        class Model(nn.Module):
            def forward(self, logits, labels):
                return F.cross_entropy(logits.float(), labels)
        """, {"cross_entropy"}),
    "residual_rmsnorm": ("""
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self, C):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(C))
            def forward(self, x, residual):
                h = x + residual
                y = h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)
                return (y * self.weight).to(x.dtype), h
        """, {"add_rmsnorm"}),
    "group_norm": ("""
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self, G, C):
                super().__init__()
                self.gn = nn.GroupNorm(G, C)
            def forward(self, x):
                return self.gn(x)
        """, {"layernorm"}),
    "patch_embed": ("""
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self, D, P):
                super().__init__()
                self.proj = nn.Conv2d(3, D, kernel_size=P, stride=P)
            def forward(self, x):
                return self.proj(x).flatten(2).transpose(1, 2)
        """, {"gemm_relu"}),
    "gqa_decode": ("""
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, q, k, v):
                p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5, dim=-1)
                return torch.matmul(p, v)
        """, {"attention"}),
}


@pytest.mark.parametrize("name", sorted(OUTSIDE_TASKS))
def test_prompt_of_a_task_outside_tasks_carries_the_examples_of_its_idioms(name, tmp_path):
    from tileagent.context import FORMAT_EXAMPLE, build_messages, pick_examples

    source, wanted = OUTSIDE_TASKS[name]
    source = textwrap.dedent(source)
    examples = pick_examples(name, reference_source=source)
    stems = {title.removeprefix("prompts/examples/").removesuffix(".py") for title, _ in examples}
    assert wanted <= stems and FORMAT_EXAMPLE in stems
    messages = build_messages(device="cpu", reference_path=f"{name}.py", reference_source=source,
                              configs=[{"M": 5}], turn=1, n=1, history=[], best=None, examples=examples,
                              config_note="")
    user = messages[1]["content"]
    for title, _ in examples:
        assert f"### {title}" in user
    assert "{" not in messages[0]["content"].split("## Tunable")[0].replace("{{", ""), "an unrendered field"


def test_archived_kernels_come_first_and_the_format_example_last():
    from tileagent.context import FORMAT_EXAMPLE, pick_examples

    archived = [("verified softmax kernel (softmax, N=4096, sm_90a)", "SRC")]
    examples = pick_examples("softmax", archived, limit=3, reference_source="import torch\ntorch.softmax(x, -1)")
    assert [t for t, _ in examples] == [archived[0][0], "prompts/examples/softmax.py",
                                        f"prompts/examples/{FORMAT_EXAMPLE}.py"]
    # played LLM session 41: three archived kernels (other ops') took every place; they leave two now
    many = [(f"verified fusion kernel (op{k}, N=8, cpu)", "SRC") for k in range(3)]
    examples = pick_examples("softmax", many, limit=3, reference_source="import torch\ntorch.softmax(x, -1)")
    assert [t for t, _ in examples] == [many[0][0], "prompts/examples/softmax.py",
                                        f"prompts/examples/{FORMAT_EXAMPLE}.py"]



def test_system_prompt_says_how_torch_divides_by_a_python_number_on_cuda():
    """Played LLM, GPU turn 1 (issue 19): an int8 quantization that divides by max|x| / 127 exactly was correct on the
    CPU and off by one at 163 ties on the H200, where torch computes `amax / 127.0` as `amax * (1 / 127.0)`. The rule
    a model needs to match it is in the system prompt."""
    text = prompts.render("system", device="one GPU", **prompts.evaluator_facts())
    assert "a multiplication by the float32 reciprocal" in text
    assert "multiply by `1.0 / c` as torch does" in text


def test_the_fusion_familys_archive_fills_only_the_places_curated_examples_leave():
    """Played LLM session 42: a segmented sum (family "fusion", whose archive holds every op that family drafts) got
    an RMSNorm's archived kernel and lost the column-sum example its reduction needed."""
    from tileagent.context import FORMAT_EXAMPLE, pick_examples

    archived = [("verified fusion kernel (add_rmsnorm_fp8_quant, N=8, cpu)", "SRC")]
    source = (Path(__file__).resolve().parents[1] / "bench/played_llm/refs/segment_sum.py").read_text()
    examples = [t for t, _ in pick_examples("fusion", archived, limit=3, reference_source=source)]
    assert examples == ["prompts/examples/cross_entropy.py", "prompts/examples/sum_dim1.py",
                        f"prompts/examples/{FORMAT_EXAMPLE}.py"]
    examples = [t for t, _ in pick_examples("fusion", archived, limit=3, reference_source="import torch\nx + y")]
    assert examples == ["prompts/examples/bias_gelu.py", archived[0][0], f"prompts/examples/{FORMAT_EXAMPLE}.py"]


def test_a_histogram_reference_gets_the_counts_example_and_its_inputs_drawing_shows_no_idiom():
    """Played LLM session 43: tokens-per-expert counts got cross_entropy and softmax as examples (its get_inputs
    draws the router's choices with topk) and no example of atomic counting."""
    from tileagent.context import FORMAT_EXAMPLE, idioms_of, pick_examples

    source = (Path(__file__).resolve().parents[1] / "bench/played_llm/refs/moe_expert_count.py").read_text()
    assert idioms_of(source) == ["counts"]
    assert [t for t, _ in pick_examples("fusion", [], limit=3, reference_source=source)] == \
        ["prompts/examples/bincount.py", f"prompts/examples/{FORMAT_EXAMPLE}.py"]
    assert idioms_of("def get_inputs():\n    return [torch.randn(4).topk(2).indices]\nclass Model:\n"
                     "    def forward(self, x):\n        return torch.cosine_similarity(x, x, dim=-1)\n") == \
        ["rms", "broadcast"]
    depthwise = (Path(__file__).resolve().parents[1] / "bench/played_llm/refs/causal_conv1d_prefill.py").read_text()
    assert "groups=D" in depthwise and idioms_of(depthwise) == ["broadcast"]  # a window a channel: not a GEMM
    assert idioms_of("class Model:\n    def forward(self, x):\n        return F.conv2d(x, self.w)\n") == ["gemm"]
    assert "dim_reduction" in idioms_of((REPO / "bench" / "played_llm" / "refs" / "smooth_l1_loss.py").read_text())
