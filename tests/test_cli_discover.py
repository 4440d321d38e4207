"""The CLI's discoverability and output (issue 15): --version, -h, completion, shipped tasks by name from any
directory, `tileagent report RUN_DIR`, `tileagent schema`, logs through rich, no wrapping at 80 columns when piped,
the live progress fed by the worker, the speedup charts. CPU only, no agent runs (fast)."""

import io
import json
import logging
import textwrap

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from tileagent import shipped
from tileagent.cli import app
from tileagent.display import CLIConsole, LiveProgress, setup_logging, speedup_bars

runner = CliRunner()


def test_version_and_help_and_completion():
    for flag in ("--version", "-V"):
        result = runner.invoke(app, [flag])
        assert result.exit_code == 0 and result.output.startswith("tileagent 0.1.0 (exported-module runtime 3;")
    result = runner.invoke(app, ["-h"])
    assert result.exit_code == 0
    for word in ("tasks", "report", "schema", "generate", "--install-completion", "--show-completion"):
        assert word in result.output
    assert runner.invoke(app, ["generate", "-h"]).exit_code == 0


def test_tasks_lists_the_shipped_references_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["tasks"])
    assert result.exit_code == 0, result.output
    names = {p.stem for p in (REPO / "tasks").glob("*.py")}
    assert set(shipped.task_names()) == names and len(names) >= 10
    assert "rmsnorm_silu" in result.output and "Y = SiLU(RMSNorm(X) * gamma)" in result.output
    assert shipped.resolve_reference("rmsnorm_silu") == REPO / "tasks" / "rmsnorm_silu.py"
    assert shipped.resolve_reference("tasks/rmsnorm_silu.py") == REPO / "tasks" / "rmsnorm_silu.py"
    (tmp_path / "rmsnorm_silu.py").write_text("# mine\n")
    assert shipped.resolve_reference("rmsnorm_silu.py").resolve() == tmp_path / "rmsnorm_silu.py"  # files win


def test_an_unknown_reference_names_the_shipped_tasks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["generate", "rmsnorm_silo"])
    assert result.exit_code == 2
    assert "no such file: rmsnorm_silo (and no shipped task of that name; shipped: attention," in result.output
    assert not (tmp_path / "runs").exists()


def _report(timed=True) -> dict:
    from tileagent.report import RunReport

    row = {"evaluated_at": {}, "correct": True, "attempt_id": "t1-c0", "tunables": {"BLOCK_M": 4}, "eager_ms": 0.05,
           "compile_ms": 0.04, "bound": "memory", "max_abs_err": 1e-3, "meets_target": True, "notes": []}
    configs = [{**row, "config": {"M": 16384, "C": c}, "evaluated_at": {"M": 16384, "C": c}, "time_ms": t,
                "speedup_eager": 0.05 / t, "speedup_compiled": 0.04 / t, "roofline_pct": p}
               for c, t, p in ((320, 0.02, 81.0), (640, 0.05, 64.0))]
    return RunReport(command="batch", reference="tasks/rmsnorm_silu.py", task="rmsnorm_silu", device="NVIDIA H200",
                     timed=timed, target=1.0, outcome="correct_not_faster", reason="turn budget", turns=2,
                     attempts=4, tokens=0, cost_usd=0.0, configs=configs, outputs={}).model_dump(mode="json")


def test_report_rerenders_report_md_and_the_chart(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps(_report()))
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "REPORT.md").read_text()
    assert "| M=16384,C=320 | M=16384,C=320 | yes | t1-c0 | BLOCK_M=4 | 0.0200 | 0.0500 | 0.0400 | 2.50 | 2.00 | 81 |" in md
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "No chart: matplotlib is not installed" in md
    else:
        assert "![speedup per config over eager PyTorch and torch.compile](speedup.png)" in md
        assert (tmp_path / "speedup.png").read_bytes()[:4] == b"\x89PNG"
        assert "<svg" in (tmp_path / "speedup.svg").read_text()[:500]
    assert "speedup per config" in result.output and "M=16384,C=640" in result.output  # the terminal bar chart


def test_report_rejects_what_is_not_a_finished_run(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "no report.json (the run has not finished?)" in result.output
    bad = _report()
    del bad["configs"][0]["correct"]
    (tmp_path / "report.json").write_text(json.dumps(bad))
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "report.json: configs.0.correct: Field required" in result.output


def test_schema_command_prints_the_published_json_schemas():
    for what, title in (("report", "RunReport"), ("run", "RunFile"), ("event", "Event")):
        result = runner.invoke(app, ["schema", what])
        assert result.exit_code == 0, result.output
        schema = json.loads(result.output)
        assert schema["title"] == title
        assert json.loads((REPO / "docs" / "schemas" / f"{what}.schema.json").read_text()) == schema, \
            f"docs/schemas/{what}.schema.json is stale: tileagent schema {what} > docs/schemas/{what}.schema.json"
    assert runner.invoke(app, ["schema", "nope"]).exit_code == 2


def test_speedup_bars_scale_to_the_fastest_and_mark_the_target():
    out = io.StringIO()
    CLIConsole(file=out, width=120, soft_wrap=False).print(speedup_bars(_report()["configs"], 1.0, width=20))
    lines = out.getvalue().splitlines()
    row = next(line for line in lines if "M=16384,C=320" in line)
    assert "x eager" in row and "█" * 20 in row and row.rstrip().endswith("81%")  # 2.50: the longest bar
    compile_320 = lines[lines.index(row) + 1]
    assert "x compile" in compile_320 and "█" * 16 in compile_320 and "2.00" in compile_320
    assert speedup_bars([{**r, "speedup_eager": None, "speedup_compiled": None} for r in _report()["configs"]],
                        1.0) is None


def test_piped_output_is_not_wrapped_and_logs_go_through_rich():
    out = io.StringIO()
    console = CLIConsole(file=out)
    assert not console.is_terminal and console.width >= 200
    console.print("word " * 60)
    assert len(out.getvalue().splitlines()) == 1
    setup_logging(console)
    try:
        logging.getLogger("tileagent.test").warning("archive: cannot write %s", "/x")
    finally:
        for h in list(logging.getLogger().handlers):
            if type(h).__name__ == "_Handler":
                logging.getLogger().removeHandler(h)
    text = out.getvalue().splitlines()[-1]
    assert text == "WARNING  archive: cannot write /x"


def test_live_progress_counts_configs_times_candidates_and_tracks_the_best():
    console = CLIConsole(file=io.StringIO())
    with LiveProgress(console, n_configs=3) as live:
        task = live.progress.tasks[0]
        live("drafting", {"turn": 1, "n": 2, "configs": 3})
        live("drafted", {"turn": 1, "n": 2, "tokens": 0})
        assert (task.total, task.completed) == (6, 0)
        live("evaluating", {"attempt_id": "t1-c0", "configs": 3})
        live.worker_progress("phase", {"phase": "check", "index": 0, "config": {"C": 96}})
        assert "t1-c0: checking C=96" in task.description
        live.worker_progress("config", {"index": 0, "result": None})
        live.worker_progress("config", {"index": 1, "result": None})
        assert task.completed == 2
        live("best", {"config": {"C": 96}, "attempt_id": "t1-c0", "time_ms": 0.02, "speedup_compiled": 1.5})
        live("evaluated", {"attempt_id": "t1-c0", "summary": "correct on 2 of 3 configs"})  # stopped early
        assert task.completed == 3
        live("evaluating", {"attempt_id": "t1-c1", "configs": 3})
        live("evaluated", {"attempt_id": "t1-c1", "summary": "compile error"})
        assert task.completed == 6
        live("tuning", {"attempt_id": "t1-c0", "knobs": {"BLOCK_M": [1, 2]}})
        live.worker_progress("config", {"index": 0, "result": None})  # a tuning variant: not a candidate's config
        assert task.completed == 6
        assert live._best_text() == "best x1.50..x1.50 vs torch.compile, 1/3 configs served"
        live("best", {"config": {"B": 2, "C": 320}, "attempt_id": "t1-c0", "time_ms": None,
                      "evaluated_at": {"B": 2, "C": 80}})  # the CPU checked smaller sizes: they are named
        live("best", {"config": {"T": 5, "K": 8}, "attempt_id": "t1-c1", "time_ms": None, "evaluated_at": None,
                      "serves": [{"T": 2048, "K": 8}, {"T": 16, "K": 8}]})  # the GPU configs it serves
    assert "best for B=2,C=320 (checked at B=2,C=80): t1-c0 (correct)" in console.file.getvalue()
    assert "best for T=2048,K=8; T=16,K=8 (checked at T=5,K=8): t1-c1 (correct)" in console.file.getvalue()


FAKE = "tests.evaluator_fakes:fake_evaluate"


def test_the_worker_reports_each_phase_and_config_to_on_progress(tmp_path):
    from tileagent.evaluator.records import EvalRequest
    from tileagent.evaluator.worker import EvalWorker

    (tmp_path / "ref.py").write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                     "        return x + x\n")
    (tmp_path / "cand.py").write_text(textwrap.dedent("""
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return x * 2
    """))
    seen = []
    with EvalWorker("cpu", evaluate_fn=FAKE) as worker:
        worker.on_progress = lambda kind, f: seen.append((kind, f.get("phase"), f.get("index")))
        result = worker.evaluate(EvalRequest(kernel_path=str(tmp_path / "cand.py"),
                                             reference_path=str(tmp_path / "ref.py"), device="cpu",
                                             configs=[{"n": 3}, {"n": 5}]))
    assert result.status == "ok"
    assert seen == [("phase", "load", None), ("phase", "check", 0), ("config", None, 0), ("phase", "check", 1),
                    ("config", None, 1)]


@pytest.fixture(autouse=True)
def _no_rich_handler_left():
    yield
    for h in list(logging.getLogger().handlers):
        if type(h).__name__ == "_Handler":
            logging.getLogger().removeHandler(h)
