"""`tileagent generate` and `tileagent batch` end to end on the CPU: outputs on disk, exit codes, bad input, resume
after SIGKILL, and reuse of archived kernels across configs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from tileagent.cli import app

CANDIDATE = (REPO / "prompts/examples/candidate_rmsnorm_silu.py").read_text()
WRONG = CANDIDATE.replace("v / (1.0 + T.exp2(v * -LOG2E))", "v")  # forgets the SiLU
RMSNORM = str(REPO / "tasks/rmsnorm_silu.py")


@pytest.fixture(autouse=True)
def archive(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_ARCHIVE", str(tmp_path / "archive"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return tmp_path / "archive"


def script(tmp_path: Path, turns, delay_s: float = 0.0, name: str = "script.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"turns": turns, "delay_s": delay_s, "tokens": 7}))
    return f"scripted:{path}"


def invoke(*args):
    """Run the CLI in this process; ``.text`` is its output with line wrapping undone."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    result.text = " ".join(result.output.split())
    return result


def events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def test_generate_on_cpu_writes_the_run_the_best_kernel_the_module_and_the_report(tmp_path):
    run = tmp_path / "run"
    result = invoke("generate", RMSNORM, "--device", "cpu", "--provider", script(tmp_path, [[WRONG], [CANDIDATE]]),
                    "--configs", "C=96,320", "--seeds", "1", "--candidates", "1", "--out", run)
    assert result.exit_code == 0, result.output
    assert "correct on every config; not timed (CPU)" in result.text
    assert "M=16384 C=96 -> M=37 C=96" in result.text  # the CPU evaluates free dims at SMALL_CONFIG sizes
    for name in ("attempts/t1-c0/prompt.json", "attempts/t1-c0/response.md", "attempts/t1-c0/candidate.py",
                 "attempts/t1-c0/eval.json", "attempts/t2-c0/eval.json", "best.py", "best/M=37,C=96.py",
                 "REPORT.md", "report.json", "rmsnorm_silu_tileagent.py"):
        assert (run / name).is_file(), name
    assert json.loads((run / "attempts/t1-c0/eval.json").read_text())["status"] == "mismatch"
    report = json.loads((run / "report.json").read_text())
    assert report["outcome"] == "correct_untimed" and report["turns"] == 2 and report["tokens"] == 14
    assert [(r["config"], r["evaluated_at"], r["correct"], r["attempt_id"]) for r in report["configs"]] == [
        ({"M": 16384, "C": 96}, {"M": 37, "C": 96}, True, "t2-c0"),
        ({"M": 16384, "C": 320}, {"M": 37, "C": 320}, True, "t2-c0")]
    assert "| M=16384,C=96 | M=37,C=96 | yes | t2-c0 |" in (run / "REPORT.md").read_text()
    # what a GPU would give the serving kernel at the configs' own sizes (played LLM session 37: none was shown)
    launch = report["configs"][0]["launches"][0]
    assert launch["blocks"] > 0 and launch["registers"] > 0 and 0 < launch["occupancy_pct"] <= 100
    assert "\n## GPU resources of the serving kernels\n\n- M=16384,C=96: " in (run / "REPORT.md").read_text()


def test_no_correct_kernel_exits_4(tmp_path):
    result = invoke("generate", RMSNORM, "--device", "cpu", "--provider", script(tmp_path, [[WRONG]]),
                    "--configs", "C=96", "--seeds", "1", "--max-turns", "1", "--out", tmp_path / "run")
    assert result.exit_code == 4, result.output
    assert "no correct kernel" in result.text


@pytest.mark.parametrize("args, message", [
    (["generate", "nope.py"], "error: no such file: nope.py"),
    (["generate", RMSNORM, "--configs", "C=97"], "--configs C=97: no config of the grid has C in [97]"),
    (["generate", RMSNORM, "--provider", "openai"], "--provider openai needs --model"),
    (["generate", RMSNORM, "--provider", "gpt"], "unknown drafter provider 'gpt'; known: builtin, openai, file"),
    (["batch", RMSNORM], "batch needs at least one --grid KEY=v1,v2"),
    (["batch", RMSNORM, "--grid", "C"], "--grid expects KEY=v1,v2 (e.g. C=96,320), got 'C'"),
    (["generate"], "generate needs a REFERENCE file (or --resume RUN_DIR)"),
    (["generate", RMSNORM, "--price", "2.5"],
     "--price expects IN,OUT in USD per million input and output tokens (e.g. 2.5,10), got '2.5'"),
    (["batch", RMSNORM, "--grid", "C=96", "--price", "1,-2"], "--price: prices must be finite and >= 0, got '1,-2'"),
])
def test_bad_arguments_exit_2_with_a_message(args, message):
    result = invoke(*args)
    assert result.exit_code == 2 and message in result.text, result.output


def test_bad_reference_files_exit_2_with_the_spec_message(tmp_path):
    (tmp_path / "nomodel.py").write_text("import torch\n\ndef get_inputs():\n    return []\n")
    (tmp_path / "broken.py").write_text("class Model(:\n")
    result = invoke("generate", tmp_path / "nomodel.py", "--device", "cpu")
    assert result.exit_code == 2 and "nomodel.py defines no class Model (KernelBench format" in result.text
    result = invoke("generate", tmp_path / "broken.py", "--device", "cpu")
    assert result.exit_code == 2 and "broken.py:1: syntax error" in result.text


def test_resume_of_a_directory_without_a_run_exits_2(tmp_path):
    result = invoke("generate", "--resume", tmp_path)
    assert result.exit_code == 2 and "is not a run directory (no run.json)" in result.text


def test_sigkill_mid_run_loses_no_finished_attempt_and_resume_completes(tmp_path, archive):
    run = tmp_path / "run"
    provider = script(tmp_path, [[WRONG], [WRONG.replace("* g[j]", "* 2.0")], [CANDIDATE]], delay_s=1.5)
    env = {**os.environ, "TILEAGENT_ARCHIVE": str(archive)}
    cmd = [sys.executable, "-m", "tileagent", "generate", RMSNORM, "--device", "cpu", "--provider", provider,
           "--configs", "C=96", "--seeds", "1", "--candidates", "1"]
    proc = subprocess.Popen([*cmd, "--out", str(run)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if (run / "events.jsonl").exists() and any(e["event"] == "evaluated" for e in events(run)):
            break
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = events(run)
    finished = [e["attempt_id"] for e in before if e["event"] == "evaluated"]
    assert finished and "finished" not in [e["event"] for e in before]
    for aid in finished:
        assert (run / "attempts" / aid / "eval.json").is_file() and (run / "attempts" / aid / "candidate.py").is_file()
    done = subprocess.run([sys.executable, "-m", "tileagent", "generate", "--resume", str(run)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    after = events(run)
    evaluated = [e["attempt_id"] for e in after if e["event"] == "evaluated"]
    assert evaluated == ["t1-c0", "t2-c0", "t3-c0"]  # each once: finished attempts were not evaluated again
    assert [e["event"] for e in after].count("run_resumed") == 1 and after[-1]["outcome"] == "correct_untimed"
    assert [e["turn"] for e in after if e["event"] == "drafted"] == [1, 2, 3]


def test_batch_covers_the_grid_with_one_module_and_reuses_archived_kernels(tmp_path):
    first = invoke("batch", RMSNORM, "--grid", "C=96,160", "--device", "cpu", "--seeds", "1", "--candidates", "1",
                   "--provider", script(tmp_path, [[CANDIDATE]]), "--out", tmp_path / "one")
    assert first.exit_code == 0, first.output
    report = json.loads((tmp_path / "one/report.json").read_text())
    assert [r["config"]["C"] for r in report["configs"]] == [96, 160] and report["command"] == "batch"
    assert (tmp_path / "one/rmsnorm_silu_tileagent.py").is_file()
    second = invoke("batch", RMSNORM, "--grid", "C=96,160,320", "--device", "cpu", "--seeds", "1",
                    "--provider", script(tmp_path, [[WRONG]], name="wrong.json"), "--out", tmp_path / "two")
    assert second.exit_code == 0, second.output
    rows = json.loads((tmp_path / "two/report.json").read_text())["configs"]
    assert [(r["config"]["C"], r["attempt_id"]) for r in rows] == [(96, "t0-c0"), (160, "t0-c0"), (320, "t0-c0")]
    assert not (tmp_path / "two/attempts/t1-c0").exists()  # the archived kernel served every config: no drafting
    said = " ".join(second.output.split())
    assert "turn 0: 1 kernel(s) of this op verified by earlier runs, tried first (archive: " in said
    assert "--no-archive skips them" in said


def test_generate_with_the_builtin_drafter_on_cpu(tmp_path):
    pytest.importorskip("tileagent.drafters.builtin", exc_type=ImportError)
    from tileagent.drafters import builtin

    if not hasattr(builtin, "BuiltinDrafter"):
        pytest.skip("the built-in drafter is not built yet")
    run = tmp_path / "run"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tileagent", "generate", "tasks/rmsnorm_silu.py", "--device", "cpu",
                           "--configs", "C=96,320", "--seeds", "2", "--out", str(run)], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - start < 120
    report = json.loads((run / "report.json").read_text())
    assert report["outcome"] == "correct_untimed" and all(r["correct"] for r in report["configs"])


def test_generate_against_the_fake_server_fixes_a_compile_error_a_layout_diagnostic_and_a_mismatch(tmp_path,
                                                                                                  monkeypatch):
    from tests.fake_openai import FakeOpenAI, answer

    broken = CANDIDATE.replace("T.reduce_sum(sq, rinv, dim=1)", "T.reduce_sum(sq, rinv, dim=3)")
    shifted = CANDIDATE.replace("rinv[i] * g[j]", "rinv[i] * g[C - 1 - j]")  # runs on the CPU; no GPU layout
    script = [answer(f"```python\n{src}```") for src in (broken, shifted, WRONG, CANDIDATE)]
    monkeypatch.setenv("FAKE_KEY", "k")
    with FakeOpenAI(script, api_key="k") as server:
        result = invoke("generate", RMSNORM, "--device", "cpu", "--provider", "openai", "--model", "fake-model",
                        "--base-url", server.base_url, "--api-key-env", "FAKE_KEY", "--configs", "C=96",
                        "--seeds", "1", "--candidates", "1", "--price", "1000,1000", "--out", tmp_path / "run")
        sent = [r.messages for r in server.requests if r.path.endswith("/chat/completions")]
    assert result.exit_code == 0, result.output
    assert len(sent) == 4
    assert "error[E404]: T.reduce_sum: dim 3 is out of range" in sent[1][1]["content"]
    assert "error[L004]: fragment 'g' is indexed by an expression of the loop variables" in sent[2][1]["content"]
    assert "Your kernel ran but computed wrong values." in sent[3][1]["content"]
    report = json.loads((tmp_path / "run/report.json").read_text())
    assert report["tokens"] == 600 and report["configs"][0]["attempt_id"] == "t4-c0"
    assert report["cost_usd"] == pytest.approx(600 * 1000 / 1e6)  # --price 1000,1000 USD per million tokens
    assert "$0.6000" in (tmp_path / "run/REPORT.md").read_text()


def test_a_reference_failing_inside_the_evaluation_exits_2_and_the_attempt_is_not_counted(tmp_path, monkeypatch):
    """The reference passes its load-time check (config n=3) and raises on n=5 inside the worker (the isolation
    layer's fake evaluator, which runs Model and ModelNew in the worker): exit 2 with the reference's file:line, a
    "reference_failed" event, and no evaluation of the attempt in the run log."""
    from tileagent import pool

    real = pool.open_pool
    monkeypatch.setattr(pool, "open_pool", lambda device, gpus="all", ray=None: real(
        device, gpus, ray, evaluate_fn="tests.evaluator_fakes:fake_evaluate"))
    reference = tmp_path / "doubling.py"
    reference.write_text("import torch\nCONFIGS = [{'n': 3}, {'n': 5}]\nclass Model(torch.nn.Module):\n"
                         "    def forward(self, x):\n        if x.numel() == 5:\n"
                         "            raise RuntimeError('boom')\n        return x * 2\n"
                         "def get_inputs(n=3):\n    return [torch.arange(float(n))]\n"
                         "def get_init_inputs(n=3):\n    return []\n")
    honest = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n"
    run = tmp_path / "run"
    result = invoke("generate", reference, "--device", "cpu", "--provider", script(tmp_path, [[honest]]),
                    "--candidates", "1", "--max-turns", "1", "--no-archive", "--out", run)
    assert result.exit_code == 2, result.output
    assert ("error: the reference failed, not the candidate (t1-c0 is not counted): the reference doubling.py raised "
            "RuntimeError: boom at doubling.py:6 Fix doubling.py and continue the run with: tileagent generate "
            f"--resume {run}") in result.text
    kinds = [e["event"] for e in events(run)]
    assert kinds[-1] == "reference_failed" and "evaluated" not in kinds


def test_configs_checked_alike_on_the_cpu_list_only_their_own_launches_in_the_report():
    """Played LLM session 39: T=4096 and T=16384 were checked alike on the CPU, share a Best, and the report gave each
    row both configs' launches. Each row now lists the launches at its own sizes."""
    from types import SimpleNamespace

    from tileagent import report
    from tileagent.evaluator.records import ConfigResult
    from tileagent.loop import Best
    from tileagent.runstore import config_key

    small, big = {"T": 4096, "I": 64}, {"T": 16384, "I": 64}
    checked = {"T": 8, "I": 64}
    best = Best(attempt_id="t1-c0", source="", result=ConfigResult(config=checked, correct=True),
                launches=[{"kernel": "main_kernel", "blocks": n, "config": c}
                          for n, c in ((3072, small), (12288, big))])
    options = SimpleNamespace(configs=[SimpleNamespace(spec=small, eval=checked),
                                       SimpleNamespace(spec=big, eval=checked)])
    rows = report.rows(options, SimpleNamespace(best={config_key(checked): best}), lambda b: True)
    assert [[x["blocks"] for x in r["launches"]] for r in rows] == [[3072], [12288]]


def test_a_cpu_run_names_the_spills_the_gpu_estimate_finds():
    """Played LLM session 40: a CPU run stops at the first correct turn, and a patch embedding ended at 255 registers
    with spills that only REPORT.md showed. The run's last lines name kernels with local memory, each once."""
    from tileagent import report

    spill = {"kernel": "main_kernel", "registers": 255, "frame_bytes": 32, "occupancy_pct": 12}
    table = [{"config": {"B": 32}, "launches": [spill]}, {"config": {"B": 64}, "launches": [spill]},
             {"config": {"B": 8}, "launches": [{"kernel": "gemm", "registers": 168, "frame_bytes": 0,
                                                 "occupancy_pct": 12}]}]
    assert report.gpu_flags(table) == ["main_kernel (255 registers/thread, 32 B local memory/thread: spills or local "
                                       "arrays) at B=32 and 1 more config(s)"]
    gemv = {"kernel": "gemv", "config": {"M": 16}, "blocks": 32, "sms": 132, "bytes": 32 << 20, "frame_bytes": 0}
    assert report.gpu_flags([{"config": {"M": 16}, "launches": [gemv]}]) == [
        "gemv at M=16 (32 block(s) on 132 SMs, 1024 KiB of the inputs each: most SMs idle)"]
