"""The CLI's input checks (#15, #18.7): bad input ends in exit 2 with one line before any work and before a run
directory exists; a reference's own failures (hang, exit, out of memory, not UTF-8, config keys it ignores) are
reported as the reference's. Also the renamed flags and their deprecated spellings."""

import json
import re
import socket
import textwrap

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from tileagent.cli import app

RMSNORM = str(REPO / "tasks/rmsnorm_silu.py")
CANDIDATE = REPO / "prompts/examples/candidate_rmsnorm_silu.py"
GOOD_REF = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""


@pytest.fixture(autouse=True)
def clean_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_ARCHIVE", str(tmp_path / "archive"))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TILEAGENT_MODEL"):
        monkeypatch.delenv(name, raising=False)


def invoke(*args):
    """Run the CLI in this process; ``.text`` is its output with line wrapping undone."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    result.text = " ".join(result.output.split())
    return result


@pytest.fixture
def in_process_probe(monkeypatch):
    """The reference probe without its subprocess (for tests of what the CLI does with a good reference)."""
    from tileagent.evaluator import probe

    def fake(path, timeout_s=probe.REFERENCE_TIMEOUT_S):
        answer = probe._probe(probe.Path(path))
        if not answer["ok"]:
            raise probe.SpecError(answer["message"])
        return probe.ReferenceSummary(path=probe.Path(path), configs=answer["configs"],
                                      has_grid=answer["has_grid"], free_dims=tuple(answer["free_dims"]),
                                      small_config=answer["small_config"],
                                      accepts=frozenset(answer["accepts"]) if answer["accepts"] is not None else None)

    monkeypatch.setattr(probe, "probe_reference", fake)


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- flags: exit 2 before any work -------------------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["generate", RMSNORM, "--device", "cuda"], "error: --device cuda: no CUDA GPU is visible to torch "
     "(torch.cuda.is_available() is False); use --device cpu or --device auto"),
    (["batch", RMSNORM, "--grid", "C=96", "--device", "cuda:1"], "error: --device cuda:1: no CUDA GPU is visible"),
    (["generate", RMSNORM, "--device", "gpu"], "error: --device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    (["generate", RMSNORM, "--base-url", "http://localhost:8000/v1"], "error: --base-url needs --model (the model "
     "name the endpoint serves; or set $TILEAGENT_MODEL); without an endpoint, leave --base-url out to use the "
     "built-in drafter"),
    (["generate", RMSNORM, "--api-key-env", "MY_KEY"], "error: --api-key-env needs --model"),
    (["generate", RMSNORM, "--provider", "openai", "--model", "gpt-4.1"], "error: --provider openai needs an API "
     "key (set OPENAI_API_KEY, or name the variable with --api-key-env) or the --base-url of a server that needs "
     "none"),
    (["generate", RMSNORM, "--provider", "openai", "--model", "m", "--base-url", "localhost:8000"],
     "error: --base-url localhost:8000: not an http(s) URL (e.g. http://localhost:8000/v1)"),
    (["batch", RMSNORM, "--grid", "C"], "error: --grid expects KEY=v1,v2 (e.g. C=96,320), got 'C'"),
])
def test_bad_flags_exit_2_with_one_line_and_no_run_directory(tmp_path, no_gpu, args, message):
    result = invoke(*args, "--out", tmp_path / "run")
    assert result.exit_code == 2 and message in result.text, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "run").exists()


def test_a_local_endpoint_that_refuses_connections_is_refused_before_the_run(tmp_path):
    port = free_port()
    result = invoke("generate", RMSNORM, "--provider", "openai", "--model", "m", "--base-url",
                    f"http://127.0.0.1:{port}/v1", "--out", tmp_path / "run")
    assert result.exit_code == 2 and result.text == (f"error: --base-url http://127.0.0.1:{port}/v1: connection "
                                                     f"refused at 127.0.0.1:{port}; is the server running?")
    assert not (tmp_path / "run").exists()


def test_eval_bad_device_and_json_folder_exit_2_before_the_run(tmp_path, no_gpu):
    result = invoke("eval", CANDIDATE, RMSNORM, "--device", "cuda")
    assert result.exit_code == 2 and "error: --device cuda: no CUDA GPU is visible to torch" in result.text
    (tmp_path / "file.txt").write_text("")
    target = tmp_path / "file.txt" / "out.json"
    result = invoke("eval", CANDIDATE, RMSNORM, "--device", "cpu", "--json", target)
    assert result.exit_code == 2 and result.text == (f"error: --json {target}: cannot create the folder "
                                                     f"{tmp_path / 'file.txt'} (File exists)")
    result = invoke("eval", CANDIDATE, RMSNORM, "--device", "cpu", "--json", tmp_path)
    assert result.exit_code == 2 and result.text == f"error: --json {tmp_path}: is a folder; give a file name"


@pytest.mark.parametrize("args, message", [
    (["batch", RMSNORM, "--grid", "N=abc"], "error: --grid N=abc: the reference has no config key 'N' "
     "(get_inputs() and get_init_inputs() take: C, M)"),
    (["batch", RMSNORM, "--grid", "C=96,abc"], "error: --grid C=96,abc: C takes integers (the reference's configs "
     "have C=96), got 'abc'"),
    (["eval", CANDIDATE, RMSNORM, "--grid", "M=1.5"], "error: --grid M=1.5: M takes integers (the reference's "
     "configs have M=16384), got 1.5"),
    (["eval", CANDIDATE, RMSNORM, "--configs", "C=97"], "error: --configs C=97: no config of the grid has C in "
     "[97]"),
])
def test_config_keys_and_values_are_checked_against_the_reference(tmp_path, in_process_probe, args, message):
    result = invoke(*args, "--device", "cpu", *(["--out", tmp_path / "run"] if args[0] == "batch" else []))
    assert result.exit_code == 2 and message in result.text, result.output
    assert not (tmp_path / "run").exists()


# -- the reference's own failures ----------------------------------------------------------------------------------

FAILING = {
    "sleeps": ("import time\ntime.sleep(600)\n", "the reference sleeps.py did not finish loading within 4 s "
               "(importing it and running it once on its SMALL_CONFIG): it hangs, sleeps or is too slow"),
    "exits": ("import os\nos._exit(3)\n", "the reference exits.py exited with code 3 while loading (os._exit or a "
              "crash); a reference must not exit"),
    "sysexit": ("import sys\nsys.exit(0)\n", "sysexit.py: importing it called sys.exit(0); a module must not exit"),
    "hungry": ("import torch\nWEIGHTS = torch.empty(1 << 60, dtype=torch.uint8)\n", "the reference hungry.py ran "
               "out of memory while loading ("),
    "labels": ("CONFIGS = [{'M': 1024, 'N': 4096}]\n", "labels.py: CONFIGS[0] {'M': 1024, 'N': 4096}: key 'M' is not "
               "a parameter of get_inputs() or get_init_inputs() (they take: no keys); the config would run without "
               "it"),
}


def _failing_reference(tmp_path, name):
    path = tmp_path / f"{name}.py"
    path.write_text(FAILING[name][0] + textwrap.dedent(GOOD_REF))
    return path


@pytest.mark.parametrize("name", list(FAILING))
def test_generate_reports_a_failing_reference_as_the_references_with_exit_2(tmp_path, monkeypatch, name):
    from tileagent.evaluator import probe

    monkeypatch.setattr(probe, "REFERENCE_TIMEOUT_S", 4.0)  # from the end of the probe's start-up (torch)
    path = _failing_reference(tmp_path, name)
    result = invoke("generate", path, "--device", "cpu", "--out", tmp_path / "run")
    assert result.exit_code == 2 and result.text.startswith(f"error: {path}: {FAILING[name][1]}"), result.output
    assert not (tmp_path / "run").exists()


def test_a_reference_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "latin1.py"
    path.write_bytes(GOOD_REF.encode() + b"# caf\xe9\n")
    result = invoke("generate", path, "--device", "cpu", "--out", tmp_path / "run")
    assert result.exit_code == 2 and result.text == (f"error: {path}: latin1.py: not UTF-8 text (byte 0xe9 at offset "
                                                     f"{len(GOOD_REF) + 5}); save it as UTF-8")


@pytest.mark.parametrize("name", ["sleeps", "exits"])
def test_eval_reports_a_failing_reference_with_exit_2_before_a_worker(tmp_path, name):
    path = _failing_reference(tmp_path, name)
    result = invoke("eval", CANDIDATE, path, "--device", "cpu", "--compile-timeout", "4")
    assert result.exit_code == 2 and result.text == f"error: {path}: {FAILING[name][1]}", result.output


# -- eval on the CPU -----------------------------------------------------------------------------------------------


def test_eval_on_the_cpu_shrinks_free_dims_and_creates_the_json_folder(tmp_path):
    out = tmp_path / "new" / "folder" / "record.json"
    result = invoke("eval", CANDIDATE, RMSNORM, "--device", "cpu", "--configs", "C=96", "--seeds", "1", "--json", out)
    assert result.exit_code == 0, result.output
    assert "evaluating candidate_rmsnorm_silu.py against rmsnorm_silu.py: 1 config(s) on cpu" in result.text
    assert "CPU: checked at smaller sizes (M=16384 C=96 -> M=37 C=96); not timed" in result.text
    record = json.loads(out.read_text())
    assert record["status"] == "ok" and [c["config"] for c in record["configs"]] == [{"M": 37, "C": 96}]
    # played LLM, session 26: the table named the CPU's sizes only and showed a failed config's errors as 0.00e+00;
    # session 39: a config is named as the reference states it, the sizes checked beside it
    assert "M=16384 C=96 (checked at M=37 C=96)" in result.text and "rel L2 err" in result.text
    # played LLM 46b on an H100: an evaluation stopped at 130 s printed nothing after its first line; off a terminal
    # each phase is a line with the seconds so far
    assert re.search(r" \d+\.\d s checking M=37 C=96 \d+\.\d s running at larger sizes M=16384 C=96 ", result.text)


# -- renamed flags ---------------------------------------------------------------------------------------------------


def test_compile_target_is_now_backend_and_the_old_spelling_still_works():
    program = REPO / "prompts/examples/softmax.py"
    new = invoke("compile", program, "-p", "M=4", "-p", "N=64", "--backend", "sim")
    old = invoke("compile", program, "-p", "M=4", "-p", "N=64", "--target", "sim")
    assert new.exit_code == 0 and old.exit_code == 0, new.output + old.output
    assert "note: compile --target is deprecated; use --backend (same meaning)" in old.text
    assert old.output.endswith(new.output)


def test_the_cpu_note_names_the_size_the_interpreter_checks(monkeypatch):
    """Played LLM, session 22: the CLI line showed only the free-dim step (one config of gptj_rope's two, and not
    the size checked); it now shows each config's size after the interpreter's rule too."""
    from tileagent import cli
    from tileagent.configs import reduce_for_device
    from tileagent.evaluator.spec import load_spec

    ref = REPO / "bench" / "played_llm" / "refs" / "alibi_softmax.py"
    spec = load_spec(ref, check=False)
    lines = []
    monkeypatch.setattr(cli.console, "print", lambda text, **kw: lines.append(text))
    cli._cpu_note(reduce_for_device(spec, spec.configs, "cpu"), "cpu", ref)
    assert lines[0] == "  CPU: checked at smaller sizes (B=4 H=32 S=1024 -> B=1 H=4 S=128; B=1 H=16 S=2048 -> " \
                       "B=1 H=2 S=256); not timed"
    cli._cpu_note(reduce_for_device(spec, spec.configs, "cuda"), "cuda", ref)
    assert len(lines) == 2  # nothing on CUDA


def test_the_cpu_prompt_names_the_sizes_beyond_the_free_dims_that_the_interpreter_changes():
    """Played LLM, session 47: a conv's Cin (not a free dim) was checked at 160 for 1280, and the prompt's list of
    configs did not say so. Each stated config now names the other sizes the interpreter changes."""
    from tileagent.configs import reduce_for_device
    from tileagent.cpu_note import stated_configs
    from tileagent.evaluator.spec import load_spec

    ref = REPO / "bench" / "played_llm" / "refs" / "linear_bias_gelu.py"
    spec = load_spec(ref, check=False)
    assert stated_configs(reduce_for_device(spec, spec.configs, "cpu"), ref).splitlines() == [
        "- M=4096, K=2048, N=8192 (on the CPU also K=128, N=512: not free dims, smaller to fit the interpreter)",
        "- M=256, K=4096, N=16384 (on the CPU also K=128, N=512: not free dims, smaller to fit the interpreter)"]
    swiglu = REPO / "bench" / "played_llm" / "refs" / "swiglu.py"  # its free dim M alone changes
    swiglu_spec = load_spec(swiglu, check=False)
    assert stated_configs(reduce_for_device(swiglu_spec, swiglu_spec.configs[:2], "cpu"), swiglu).splitlines() == [
        "- M=8192, N=11008", "- M=8192, N=14336"]


def test_the_cpu_note_warns_of_a_reference_unsized_on_the_meta_device_or_checked_too_large(tmp_path, monkeypatch):
    """Played LLM session 44c: a varlen reference reading its drawn total in get_inputs (``int(lens.sum())``) was
    never run at its configs' own sizes, said only in the first attempt's feedback after a 90 s check."""
    from tileagent import cli
    from tileagent.configs import reduce_for_device
    from tileagent.evaluator.spec import load_spec

    ref = tmp_path / "varlen.py"
    ref.write_text("import torch\nCONFIGS = [{'B': 4}]\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                   "        return x * 2\n\ndef get_inputs(B=4):\n    lens = torch.randint(1, 9, (B,))\n"
                   "    return [torch.randn(int(lens.sum()), 8)]\n\ndef get_init_inputs(B=4):\n    return []\n")
    lines = []
    monkeypatch.setattr(cli.console, "print", lambda text, **kw: lines.append(text))
    cli._cpu_note(reduce_for_device(load_spec(ref, check=False), [{"B": 4}], "cpu"), "cpu", ref)
    assert lines[-1].startswith("  CPU: warning: the reference cannot be sized on the meta device (get_inputs needs "
                                "real values (")
    lines.clear()
    alibi = REPO / "bench" / "played_llm" / "refs" / "alibi_softmax.py"
    spec = load_spec(alibi, check=False)
    cli._cpu_note(reduce_for_device(spec, spec.configs, "cpu"), "cpu", alibi)
    assert not any("warning" in line for line in lines)
    # no SMALL_CONFIG and a large config: checked as stated, said up front and not only by a timeout
    big = tmp_path / "big.py"
    big.write_text("import torch\nCONFIGS = [{'M': 4096, 'N': 512}, {'M': 8, 'N': 512}]\n\n"
                   "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n"
                   "def get_inputs(M=4096, N=512):\n    return [torch.randn(M, N)]\n\n"
                   "def get_init_inputs(M=4096, N=512):\n    return []\n")
    spec = load_spec(big, check=False)
    cli._cpu_note(reduce_for_device(spec, spec.configs, "cpu"), "cpu", big)
    assert [line for line in lines if "warning" in line] == [
        "  CPU: warning: checked at M=4096 N=512, its inputs and model tensors hold 2,097,152 elements and its outputs "
        "hold 2,097,152 elements, more than the 262,144 the interpreter checks in time: its checks may time out; "
        "give the reference a SMALL_CONFIG with smaller sizes, or check on a GPU"]


def test_compile_params_parse_ints_floats_booleans_and_text():
    """Played LLM session 26: ``-p z_coef=1e-4`` reached the factory as the text '0.0001' (E309)."""
    from tileagent.cli import _parse_params

    assert _parse_params(["M=4", "z_coef=1e-4", "on_cuda=True", "dtype=float16"]) == \
        {"M": 4, "z_coef": 1e-4, "on_cuda": True, "dtype": "float16"}


# -- diagnostics printed as written ----------------------------------------------------------------------------------

BAD_INDEX = '''
import torch
import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def copy_rows(M, N):
    @T.prim_func
    def main(x: T.Tensor((M, N), "float32"), y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(M, N):
                y[i, j] = x[i, j, 0]

    return main


def check(device="cpu"):
    return copy_rows(4, 8)(torch.randn(4, 8))
'''


def test_a_compile_error_prints_its_source_line_with_the_subscripts(tmp_path):
    """Rich reads ``[i, j]`` as a markup tag: printed through it, the excerpt read ``y = x`` and the hint ``write x``
    (played LLM, session 39: an L001 on ``y[i, j] = x[i, k]`` showed ``22 | y = x``)."""
    program = tmp_path / "bad_index.py"
    program.write_text(BAD_INDEX)
    result = invoke("run", program)
    assert result.exit_code == 2, result.output
    assert "13 | y[i, j] = x[i, j, 0]" in result.text
    assert "hint: write x[i0, i1]" in result.text


def test_the_progress_lines_print_a_summary_with_subscripts_as_written():
    import io

    from rich.console import Console

    from tileagent.display import LiveProgress

    out = io.StringIO()
    with LiveProgress(Console(file=out, width=200), n_configs=1) as live:
        live("drafting", {"turn": 1, "n": 1, "configs": 1})
        live("evaluated", {"attempt_id": "t1-c0", "summary": "mismatch at out[i, k]: expected 1, got 2"})
    assert "t1-c0: mismatch at out[i, k]: expected 1, got 2" in out.getvalue()
