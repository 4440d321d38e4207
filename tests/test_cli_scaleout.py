"""`tileagent batch` / `generate` with several evaluation workers (`--gpus N`: N CPU interpreters here; on a GPU host
one per GPU): the same results as one worker, the workers' busy time in the report, and a driver SIGKILLed mid-batch
loses no finished attempt on `--resume`."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.test_cli_generate import CANDIDATE, RMSNORM, WRONG, events, invoke, script


@pytest.fixture(autouse=True)
def archive(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_ARCHIVE", str(tmp_path / "archive"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return tmp_path / "archive"


def test_two_workers_give_the_verdicts_of_one_and_report_their_busy_time(tmp_path):
    reports = {}
    for gpus in ("1", "2"):
        result = invoke("batch", RMSNORM, "--grid", "C=96,160", "--device", "cpu", "--seeds", "1", "--candidates", "1",
                        "--no-archive", "--provider", script(tmp_path, [[WRONG], [CANDIDATE]], name=f"s{gpus}.json"),
                        "--gpus", gpus, "--out", tmp_path / f"run{gpus}")
        assert result.exit_code == 0, result.output
        reports[gpus] = json.loads((tmp_path / f"run{gpus}/report.json").read_text())
        statuses = [(e["attempt_id"], e["result"]["status"], [c["correct"] for c in e["result"]["configs"]])
                    for e in events(tmp_path / f"run{gpus}") if e["event"] == "evaluated"]
        assert statuses == [("t1-c0", "mismatch", [False, False]), ("t2-c0", "ok", [True, True])]
    verdicts = lambda rows: [(r["config"], r["correct"], r["attempt_id"], r["meets_target"]) for r in rows]  # noqa
    assert verdicts(reports["1"]["configs"]) == verdicts(reports["2"]["configs"])  # notes and errors: random tails
    assert [r["attempt_id"] for r in reports["2"]["configs"]] == ["t2-c0", "t2-c0"]
    workers = reports["2"]["workers"]["workers"]
    assert [w["worker"] for w in workers] == ["cpu", "cpu#1"]
    assert all(w["busy_s"] > 0 and w["requests"] == 2 for w in workers)  # 2 attempts x 2 configs, one each
    assert [w["requests"] for w in reports["1"]["workers"]["workers"]] == [2]  # one worker: a request per attempt
    assert "## Evaluation workers" in (tmp_path / "run2/REPORT.md").read_text()


def test_bad_gpus_exit_2_and_leave_no_run_behind(tmp_path):
    result = invoke("batch", RMSNORM, "--grid", "C=96", "--device", "cpu", "--gpus", "0,1", "--out", tmp_path / "r")
    assert result.exit_code == 2
    assert "--gpus 0,1: the device is cpu, which has no GPU indices; give a count of CPU workers" in result.text
    result = invoke("batch", RMSNORM, str(REPO / "tasks/softmax.py"), "--device", "cpu", "--gpus", "0",
                    "--out", tmp_path / "b")
    assert result.exit_code == 2 and "--gpus 0: a count must be at least 1" in result.text
    assert not (tmp_path / "r").exists() and not (tmp_path / "b").exists()


def test_ray_without_a_cluster_exits_2_and_says_how_to_start_one(tmp_path):
    pytest.importorskip("ray")
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom tileagent.cli import app\n"
            f"r = CliRunner().invoke(app, ['generate', {RMSNORM!r}, '--device', 'cpu', '--ray', 'auto', "
            f"'--out', {str(tmp_path / 'r')!r}])\nprint(r.exit_code)\nprint(' '.join(r.output.split()))\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(tmp_path / "ray")  # where Ray looks for a running cluster: none (not another test's)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=env)
    code_line, text = done.stdout.splitlines()[:2]
    assert code_line == "2" and "--ray auto: cannot connect to a Ray cluster" in text, done.stdout + done.stderr
    assert "start one with `ray start --head`, or use --ray local" in text and not (tmp_path / "r").exists()


def test_sigkill_of_the_driver_mid_batch_with_two_workers_then_resume_loses_nothing(tmp_path, archive):
    run = tmp_path / "run"
    provider = script(tmp_path, [[WRONG, WRONG.replace("* g[j]", "* 2.0")], [CANDIDATE]], delay_s=1.0)
    env = {**os.environ, "TILEAGENT_ARCHIVE": str(archive)}
    cmd = [sys.executable, "-m", "tileagent", "batch", RMSNORM, "--grid", "C=96,160", "--device", "cpu",
           "--provider", provider, "--seeds", "1", "--candidates", "2", "--gpus", "2"]
    proc = subprocess.Popen([*cmd, "--out", str(run)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (run / "events.jsonl").exists() and any(e["event"] == "evaluated" for e in events(run)):
            break
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = events(run)
    finished = [e["attempt_id"] for e in before if e["event"] == "evaluated"]
    assert finished and "finished" not in [e["event"] for e in before]
    done = subprocess.run([sys.executable, "-m", "tileagent", "batch", "--resume", str(run), "--gpus", "2"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    after = events(run)
    evaluated = [e["attempt_id"] for e in after if e["event"] == "evaluated"]
    assert evaluated == ["t1-c0", "t1-c1", "t2-c0"]  # each once, whichever worker finished it
    assert [e for e in after if e["event"] == "evaluated"][:len(finished)] == \
        [e for e in before if e["event"] == "evaluated"]
    report = json.loads((run / "report.json").read_text())
    assert report["outcome"] == "correct_untimed" and [r["attempt_id"] for r in report["configs"]] == ["t2-c0"] * 2


def test_ray_is_not_imported_without_ray():
    code = ("import sys\nfrom tileagent.pool import open_pool\nfrom tileagent import cli\n"
            "p = open_pool('cpu', '1', None, evaluate_fn='tests.pool_fakes:traced_evaluate')\np.close()\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_batch_of_a_folder_runs_each_reference_on_its_grid_with_one_report_and_a_module_per_op(tmp_path):
    folder = tmp_path / "ops"
    folder.mkdir()
    for name in ("rms_a", "rms_b"):
        (folder / f"{name}.py").write_text((REPO / "tasks/rmsnorm_silu.py").read_text())
    out = tmp_path / "batch"
    result = invoke("batch", folder, "--grid", "rms_a:C=96,160", "--grid", "rms_b:C=320", "--device", "cpu",
                    "--seeds", "1", "--candidates", "1", "--no-archive", "--gpus", "2",
                    "--provider", script(tmp_path, [[WRONG], [CANDIDATE]]), "--out", out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert [(o["task"], [r["config"]["C"] for r in o["configs"]], o["outcome"]) for o in report["ops"]] == [
        ("rms_a", [96, 160], "correct_untimed"), ("rms_b", [320], "correct_untimed")]
    for op in ("rms_a", "rms_b"):
        assert (out / op / f"{op}_tileagent.py").is_file() and (out / op / "REPORT.md").is_file()
        assert [e["attempt_id"] for e in events(out / op) if e["event"] == "evaluated"] == ["t1-c0", "t2-c0"]
    md = (out / "REPORT.md").read_text()
    assert "| rms_a | M=16384,C=96 | M=37,C=96 | correct | t2-c0 |" in md
    assert "| rms_b | correct untimed | 1/1 | 2 |" in md and "## Evaluation workers" in md
    assert sum(w["requests"] for w in report["workers"]["workers"]) == 6  # 2 attempts x 3 configs over 2 workers
    assert report["exit_code"] == 0
    again = invoke("batch", "--resume", out, "--gpus", "2")
    assert again.exit_code == 0, again.output
    assert [e["event"] for e in events(out / "rms_a")].count("evaluated") == 2  # replayed, not evaluated again
    # the only work of the resume: each op's replayed best kernel is checked again before export (issue 18.6)
    reverified = [e for op in ("rms_a", "rms_b") for e in events(out / op) if e["event"] == "reverified"]
    assert len(reverified) == 2
    resumed = json.loads((out / "report.json").read_text())["workers"]["workers"]
    assert sum(w["requests"] for w in resumed) == sum(len(e["configs"]) for e in reverified) == 3  # one per config


@pytest.mark.parametrize("args, message", [
    (["--grid", "nope:C=96"], "--grid nope:C=96: no reference named nope (the references: rmsnorm_silu, softmax)"),
    (["--configs", "C=96"], "--configs selects configs of one reference; with several, use --grid STEM:KEY=v1,v2"),
    (["--grid", "Q=1,2"], "--grid Q=1,2: no reference has the key 'Q'"),
    (["--device", "gpu"], "error: --device must be auto, cpu, cuda or cuda:N, got 'gpu'"),  # ran on device 'gpu' before
])
def test_bad_batch_of_several_references_exits_2(args, message):
    result = invoke("batch", RMSNORM, str(REPO / "tasks/softmax.py"), "--device", "cpu", *args)
    assert result.exit_code == 2 and message in result.text, result.output
