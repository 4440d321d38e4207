"""``generate --resume`` against a damaged or forged run log (#18.6), of a finished run, after Ctrl-C; and the file
drafter telling the person where to answer (#15). CPU, the scripted drafter, the real evaluator."""

import json
import os
import signal
import subprocess
import sys
import threading
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


def script(tmp_path: Path, turns, delay_s: float = 0.0) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"turns": turns, "delay_s": delay_s, "tokens": 7}))
    return f"scripted:{path}"


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    result.text = " ".join(result.output.split())
    return result


def events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def test_resume_of_a_finished_run_says_so_and_a_forged_log_exports_nothing(tmp_path, archive, caplog):
    run = tmp_path / "run"
    first = invoke("generate", RMSNORM, "--device", "cpu", "--provider", script(tmp_path, [[WRONG]]), "--configs",
                   "C=96", "--seeds", "1", "--candidates", "1", "--max-turns", "1", "--out", run)
    assert first.exit_code == 4, first.output
    log_before, report_before = (run / "events.jsonl").read_text(), (run / "REPORT.md").read_text()

    # a finished run is not run again, and its report is not rewritten
    again = invoke("generate", "--resume", run)
    assert again.exit_code == 4, again.output
    assert again.text == (f"{run} is finished: no correct kernel (1 turn(s) done; 1 turn(s), 7 tokens); nothing was "
                          f"run again. Its report: {run / 'REPORT.md'} To run more turns: tileagent generate --resume "
                          f"{run} --max-turns 5")
    assert (run / "events.jsonl").read_text() == log_before and (run / "REPORT.md").read_text() == report_before

    # forge the log: the wrong kernel's evaluation says "ok" (its hash kept), a garbage line, the end cut off
    forged = []
    for e in events(run):
        if e["event"] == "evaluated":
            e["result"] = {"status": "ok", "device": "cpu", "configs": [
                {"config": {"M": 37, "C": 96}, "correct": True, "checks": 20, "max_abs_err": 0.0}]}
        if e["event"] != "finished":
            forged.append(json.dumps(e))
    forged.insert(1, "garbage")
    (run / "events.jsonl").write_text("\n".join(forged) + "\n")
    for name in ("best.py", "REPORT.md", "report.json"):
        (run / name).unlink(missing_ok=True)

    resumed = invoke("generate", "--resume", run)
    assert resumed.exit_code == 4, resumed.output  # no traceback, and the forged verdict did not survive
    assert f"{run / 'events.jsonl'}:2: skipping a line that is not an event (a JSON object with 'event'): " \
           f"b'garbage'" in caplog.text
    assert "the recorded result of t1-c0 on M=37,C=96 did not hold when checked again (" in caplog.text
    assert "warning: a recorded result did not hold when checked again: t1-c0 on M=37,C=96: " in resumed.text
    assert not (run / "best.py").exists() and not (run / "rmsnorm_silu_tileagent.py").exists()
    assert not list(archive.rglob("entry.json"))
    lines = (run / "events.jsonl").read_text().splitlines()
    assert lines[1] == "garbage"  # left in place: the log is append-only
    kinds = [json.loads(line)["event"] for line in lines[2:]]
    assert kinds[-3:] == ["run_resumed", "reverified", "finished"]
    report = json.loads((run / "report.json").read_text())
    assert report["outcome"] == "no_correct" and report["turns"] == 1


@pytest.mark.parametrize("wait_s", [0.0, 4.0], ids=["as-the-run-is-created", "in-the-drafters-wait"])
def test_ctrl_c_prints_how_to_resume(tmp_path, archive, wait_s):
    # CI, round 2 session 44: a Ctrl-C while the CPU note or the worker pool was starting (the run already on disk)
    # exited 130 without the message; session 48's full run: one between the first event and the run's announcement
    run = tmp_path / "run"
    env = {**os.environ, "TILEAGENT_ARCHIVE": str(archive)}
    proc = subprocess.Popen([sys.executable, "-m", "tileagent", "generate", RMSNORM, "--device", "cpu",
                             "--provider", script(tmp_path, [[CANDIDATE]], delay_s=600), "--configs", "C=96",
                             "--out", str(run)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (run / "events.jsonl").exists():
        time.sleep(0.05)
    time.sleep(wait_s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # 130, or death by the SIGINT itself after the message (a shell reports both as 130); seen once in a full run
    # on the CPU machine (returncode -2 after the message below), not reproduced alone
    assert proc.returncode in (130, -signal.SIGINT), out + err
    assert f"interrupted: the run so far is saved in {run}; continue it with: tileagent generate --resume {run}" \
        in " ".join(err.split())
    assert "Traceback" not in err
    assert events(run)[0]["event"] == "run_started"


def test_the_file_drafter_prints_where_to_write_each_answer(tmp_path):
    run = tmp_path / "run"
    response = run / "exchange" / "t1-c1.response.md"

    def answer():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not response.with_name("t1-c1.prompt.md").exists():
            time.sleep(0.1)
        response.with_name(response.name + ".tmp").write_text(f"```python\n{CANDIDATE}```\n")
        os.replace(response.with_name(response.name + ".tmp"), response)

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        result = invoke("generate", RMSNORM, "--device", "cpu", "--provider", "file", "--configs", "C=96",
                        "--seeds", "1", "--candidates", "1", "--max-turns", "1", "--out", run)
    finally:
        thread.join()
    assert result.exit_code == 0, result.output
    assert (f"turn 1, candidate 1 of 1: the prompt is {run / 'exchange' / 't1-c1.prompt.md'}; write the answer to "
            f"{response}.tmp, then rename it to t1-c1.response.md") in result.text
    assert "t1-c0 (file:t1-c1.response.md): correct" in result.text  # played LLM, session 22: which file is which


def test_a_run_moved_to_another_checkout_resumes_with_its_reference_given_again(tmp_path):
    """A run directory carried between machines (#19: GPU turns of a played LLM): run.json names the reference where
    the run started. Without it here, --resume says how to give it; with REFERENCE given, the run goes on from there
    (the recorded turn is not evaluated again) and the run_resumed event names the new path."""
    (tmp_path / "a").mkdir()
    first_ref = tmp_path / "a" / "rmsnorm_silu.py"
    first_ref.write_text(Path(RMSNORM).read_text())
    run = tmp_path / "run"
    first = invoke("generate", first_ref, "--device", "cpu", "--provider", script(tmp_path, [[WRONG]]), "--configs",
                   "C=96", "--seeds", "1", "--candidates", "1", "--max-turns", "1", "--out", run)
    assert first.exit_code == 4, first.output
    first_ref.parent.rename(tmp_path / "b")
    moved = tmp_path / "b" / "rmsnorm_silu.py"

    lost = invoke("generate", "--resume", run, "--max-turns", "2")
    assert lost.exit_code == 2, lost.output
    assert lost.text == (f"error: cannot resume {run}: its reference {first_ref} does not exist here (did the run move "
                         f"from another machine?); give it: tileagent generate --resume {run} REFERENCE")

    resumed = invoke("generate", "--resume", run, moved, "--max-turns", "2")
    assert resumed.exit_code == 4, resumed.output
    assert f"resuming {run} (rmsnorm_silu.py; the reference is now {moved}, not {first_ref})" in resumed.text
    kinds = events(run)
    assert [e for e in kinds if e["event"] == "run_resumed"][-1]["reference"] == str(moved)
    evaluated = [e for e in kinds if e["event"] == "evaluated"]
    assert [e["attempt_id"] for e in evaluated] == ["t1-c0", "t2-c0"]  # t1-c0 once: replayed, not evaluated again
    assert evaluated[-1]["feedback"].startswith("This module is identical to t1-c0 (turn 1), which failed")
    assert json.loads((run / "report.json").read_text())["reference"] == str(moved)
