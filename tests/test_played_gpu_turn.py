"""bench/played_llm/gpu_turn.py (a GPU turn of the played LLM, issue 19) without running a loop: the seed answers agree
with run_gpu.sh, an op's state is read from its run directory, a run is stopped cleanly, the table and the tarball."""

import importlib.util
import json
import re
import signal
import subprocess
import sys
import tarfile
import time

from tests.conftest import REPO
from tileagent.answers import parse_answer

spec = importlib.util.spec_from_file_location("gpu_turn", REPO / "bench/played_llm/gpu_turn.py")
gpu_turn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_turn)


def test_seed_answers_are_run_gpu_sh_all_list_and_parse_as_one_python_block():
    text = (REPO / "bench/played_llm/run_gpu.sh").read_text()
    arrays = {name: re.findall(r'"([a-z0-9_]+):(answers/[^"]+)"', body)
              for name, body in re.findall(r"^(\w+)=\(\n(.*?)\n\)", text, re.S | re.M)}
    all_list = dict(arrays["ALL"] + arrays["SESSION3"])  # ALL ends with "${SESSION3[@]}"
    assert gpu_turn.SEEDS == all_list and len(all_list) == 12
    for op, rel in gpu_turn.SEEDS.items():
        assert (REPO / "bench/played_llm/refs" / f"{op}.py").is_file()
        parsed = parse_answer(gpu_turn.seed_response(op))
        assert parsed.problem is None and parsed.source.strip() == (REPO / "bench/played_llm" / rel).read_text().strip()


def _event(run, **e):
    with open(run / "events.jsonl", "a") as f:
        f.write(json.dumps({"t": 0.0, **e}) + "\n")


def _result(xs, status="ok", message=""):
    return {"status": status, "message": message, "configs": [
        {"config": {"N": n}, "correct": status == "ok", "speedup_compiled": x} for n, x in zip((64, 128), xs)]}


def test_the_state_of_a_run_directory_and_the_table(tmp_path):
    run = tmp_path / "swiglu"
    assert gpu_turn.state_before(run, 6) == ("new", "new")
    (run / "exchange").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"format_version": 1, "options": {"loop": {"max_turns": 6}}}))
    _event(run, event="run_started")
    _event(run, event="drafted", turn=1, drafts=[])
    _event(run, event="evaluated", attempt_id="t1-c0", result=_result([None, None], "mismatch", "output 0 differs"))
    assert gpu_turn.state_before(run, 6) == ("resume", "resume")  # killed before the next prompt
    (run / "exchange/t2-c1.prompt.md").write_text("prompt")
    assert gpu_turn.waiting_turn(run) is None  # the .json is written after the .md: not complete yet
    (run / "exchange/t2-c1.prompt.json").write_text("{}")
    assert gpu_turn.state_before(run, 6) == ("skip", "waiting for turn 2")
    (run / "exchange/t2-c1.response.md").write_text("answer")
    assert gpu_turn.state_before(run, 6) == ("resume", "resume")
    _event(run, event="drafted", turn=2, drafts=[])
    _event(run, event="evaluated", attempt_id="t2-c0", result=_result([0.96, 1.3]))
    _event(run, event="variant_evaluated", attempt_id="t2-c0", phase="full", result=_result([1.05, 1.2]))
    _event(run, event="finished", outcome="correct_not_faster", reason="6 turn(s) done")
    assert gpu_turn.state_before(run, 6) == ("skip", "ended: correct_not_faster (6 turn(s) done)")
    assert gpu_turn.state_before(run, 8) == ("resume", "resume")  # more turns than the run had: it goes on
    _event(run, event="run_resumed")
    assert gpu_turn.state_before(run, 6)[0] == "skip"
    text = gpu_turn.table(tmp_path, ["swiglu", "rotary"], {"swiglu": "waiting for turn 3", "rotary": "not reached"})
    assert text.splitlines()[1:] == [
        "swiglu                2  waiting for turn 3",
        "                           t1-c0: mismatch: output 0 differs",
        "                           t2-c0: ok (2/2) min 0.96x compile [0.96 1.30]",
        "                           best so far (x compile, tuned included): N=64:1.05 N=128:1.30",
        "rotary                0  not reached"]
    _event(run, event="finished", outcome="target_met", reason="every config meets the target")
    assert gpu_turn.state_before(run, 8) == ("skip", "target met")


def test_pack_leaves_out_temporary_files_and_unpacks_in_place(tmp_path):
    runs = tmp_path / "runs"
    (runs / "op/exchange").mkdir(parents=True)
    (runs / "op/exchange/t2-c1.prompt.md").write_text("prompt")
    (runs / "op/exchange/t2-c1.prompt.md.tmp").write_text("half")
    (runs / "op/.events.jsonl.abc.tmp").write_text("half")
    tgz = gpu_turn.pack(runs, tmp_path / "out")
    with tarfile.open(tgz) as tar:
        assert sorted(tar.getnames()) == ["op", "op/exchange", "op/exchange/t2-c1.prompt.md"]
        tar.extractall(tmp_path / "local", filter="data")
    assert (tmp_path / "local/op/exchange/t2-c1.prompt.md").read_text() == "prompt"


def test_stop_interrupts_the_run_and_kills_its_group_if_it_lingers():
    """The polite child says it is ready inside its try (an interrupt between the two, on a loaded machine, ended it
    with -2 and left both children for a later test's garbage collection to warn about)."""
    polite = subprocess.Popen([sys.executable, "-c", "import time\ntry:\n    print('ready', flush=True)\n"
                               "    time.sleep(60)\nexcept KeyboardInterrupt:\n    raise SystemExit(130)"],
                              start_new_session=True, stdout=subprocess.PIPE)
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                 "signal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                                 "time.sleep(60)"], start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert polite.stdout.readline() == b"ready\n" and stubborn.stdout.readline() == b"ready\n"
        t0 = time.monotonic()
        assert gpu_turn.stop(polite, grace=10) == 130 and time.monotonic() - t0 < 5
        assert gpu_turn.stop(stubborn, grace=0.5) == -signal.SIGTERM
    finally:
        for child in (polite, stubborn):
            if child.poll() is None:
                child.kill()
            child.wait()
            child.stdout.close()


def test_a_replayed_run_starts_with_every_recorded_answer_and_a_new_one_with_the_seed(tmp_path):
    recorded = sorted(p.name for p in (REPO / "bench/played_llm/answers/l2norm/gpu_turns").iterdir())
    assert recorded == [f"t{k}-c1.response.md" for k in range(1, 6)]
    assert gpu_turn.seed_exchange("l2norm", tmp_path / "a", replay=True) == recorded
    assert ((tmp_path / "a/exchange/t3-c1.response.md").read_text()
            == (REPO / "bench/played_llm/answers/l2norm/gpu_turns/t3-c1.response.md").read_text())
    assert gpu_turn.seed_exchange("l2norm", tmp_path / "b", replay=False) == ["t1-c1.response.md"]
    assert (tmp_path / "b/exchange/t1-c1.response.md").read_text() == gpu_turn.seed_response("l2norm")
