"""The agent loop with a scripted drafter and a fake worker: feedback, best per config, autotune, stops, resume."""

import ast
import json
from pathlib import Path

import pytest

from tileagent.evaluator.records import ConfigResult, EvalRequest, EvalResult, Timing
from tileagent.archive import Archive, ArchiveEntry
from tileagent.autotune import assign, current_values, tunables_of
from tileagent.configs import ConfigSelectionError, RunConfig, grid, reduce_for_device, select
from tileagent.context import build_messages
from tileagent.drafters import make_drafter
from tileagent.drafters.base import AttemptSummary, DrafterUnavailable
from tileagent.drafters.scripted import ScriptedDrafter
from tileagent.feedback import render_feedback
from tileagent.loop import EXIT_CODES, Loop, LoopOptions, ReferenceFailed
from tileagent.runstore import RunStore

REFERENCE = "tasks/rmsnorm_silu.py"
DIAGNOSTIC = {"code": "E404", "kind": "CheckError", "message": "T.reduce_sum: dim 3 is out of range", "file": "k.py",
              "line": 48, "col": 13, "excerpt": "T.reduce_sum(sq, rinv, dim=3)\n^", "hint": "use dim=1",
              "notes": ["the buffer is 2-d"]}
LAYOUT = {"code": "L003", "kind": "LayoutError", "message": "a copy between fragments x and y with different layouts",
          "file": "k.py", "line": 51, "col": 13, "excerpt": "T.copy(x, y)\n^", "hint": "copy through shared memory",
          "notes": ["x: Fragment(...)", "y: Fragment(...)"]}
MISMATCH = {"kind": "Mismatch", "message": "output 0 differs", "config": {"M": 37, "C": 96}, "seed": 0,
            "distribution": "outliers", "hidden": True, "output": 0, "index": [27, 59], "expected": -0.00718,
            "got": -6.86, "mismatched": 3435, "total": 3552, "atol": 0.01, "rtol": 0.01, "max_abs_err": 6.85,
            "rel_l2": 0.98}


def cand(kind: str, ms: float = 1.0, tunables: list | None = None) -> str:
    """A fake candidate: the fake worker reads its outcome from the first line."""
    knobs = f"BLOCK = None\nTUNABLES = {{'BLOCK': {tunables!r}}}\n" if tunables else ""
    return f"# FAKE {kind} {ms}\n{knobs}class ModelNew:\n    pass\n"


class FakeWorker:
    """Outcome from the candidate's first line; time = ms * C / 100, scaled by BLOCK: best 2 at C=96, 4 at C=320."""

    def __init__(self):
        self.requests: list[EvalRequest] = []

    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.requests.append(request)
        source = Path(request.kernel_path).read_text()
        _, _, kind, ms = source.splitlines()[0].split()
        if kind in ("compile_error", "layout_error"):
            diagnostic = DIAGNOSTIC if kind == "compile_error" else LAYOUT
            return EvalResult(status="compile_error", message="did not compile",
                              failure={"kind": "CompileFailed", "message": "did not compile", "diagnostic": diagnostic})
        if kind == "mismatch":
            return EvalResult(status="mismatch", message="output 0 differs", failure=MISMATCH)
        if kind == "reference_fails" and not getattr(self, "reference_fixed", False):
            message = "Model.forward raised RuntimeError: boom (config {'M': 16384, 'C': 320}) at rmsnorm_silu.py:12"
            return EvalResult(status="spec_error", message=message, failure={"kind": "SpecError", "message": message,
                                                                             "reference": REFERENCE, "line": 12})
        block = current_values(source, tunables_of(source) or {}).get("BLOCK")
        configs = []
        for cfg in request.configs:
            best = 2 if cfg["C"] == 96 else 4
            t = float(ms) * cfg["C"] / 100 * (1.0 if block is None else 0.5 + 0.1 * abs(block - best))
            eager, compiled = cfg["C"] / 100, 1.1 * cfg["C"] / 100
            timing = Timing(median_ms=t, iqr_ms=0.0, trials=request.timing_trials or 50)
            configs.append(ConfigResult(config=cfg, correct=True, candidate=timing,
                                        eager=Timing(median_ms=eager, iqr_ms=0, trials=50),
                                        compiled=Timing(median_ms=compiled, iqr_ms=0, trials=50),
                                        speedup_eager=eager / t, speedup_compiled=compiled / t, roofline_pct=50.0,
                                        bound="memory"))
        return EvalResult(status="ok", configs=configs, device=request.device, timing_available=True)


def slow_worker(monkeypatch):
    """A FakeWorker class each of whose evaluations takes 10 s of the autotuner's clock (patched here)."""
    import types

    from tileagent import autotune as autotune_module

    now = [0.0]
    monkeypatch.setattr(autotune_module, "time", types.SimpleNamespace(monotonic=lambda: now[0]))

    class Slow(FakeWorker):
        def evaluate(self, request):
            now[0] += 10.0
            return super().evaluate(request)

    return Slow


def options(device="cuda", **kw) -> LoopOptions:
    configs = [RunConfig(spec={"M": 16384, "C": c}, eval={"M": 16384, "C": c}) for c in (96, 320)]
    return LoopOptions(**{"reference": REFERENCE, "configs": configs, "device": device, "max_turns": 4,
                          "candidates": 2, **kw})


def run(tmp_path, turns, worker=None, **kw):
    store = RunStore(tmp_path / "run") if (tmp_path / "run" / "run.json").exists() else \
        RunStore.create(tmp_path / "run", {})
    drafter = ScriptedDrafter(turns, tokens=kw.pop("tokens", 0))
    worker = worker or FakeWorker()
    loop = Loop(options(**kw), store, drafter, worker)
    return loop, loop.run(), drafter, worker


def test_feedback_of_each_failure_reaches_the_next_turn(tmp_path):
    loop, outcome, drafter, _ = run(tmp_path, [[cand("compile_error"), None], [cand("mismatch")], [cand("ok", 0.5)]])
    assert outcome.outcome == "target_met" and outcome.turns == 3
    second, third = drafter.calls[1], drafter.calls[2]
    fb = {a.attempt_id: a.feedback for a in third.history}
    assert "k.py:48:13: error[E404]: T.reduce_sum: dim 3 is out of range" in fb["t1-c0"]
    assert "  note: the buffer is 2-d" in fb["t1-c0"] and "hint: use dim=1" in fb["t1-c0"]
    assert "no python code block" in fb["t1-c1"]
    assert "input distribution a hidden distribution" in fb["t2-c0"] and "(27, 59)" in fb["t2-c0"]
    user = third.messages[1]["content"]
    assert "## Your candidates of turn 2 and their feedback" in user and "error[E404]" in user
    assert second.turn == 2 and third.turn == 3


def test_best_per_config_and_autotune_picks_the_fastest_knob_per_config(tmp_path):
    loop, outcome, _, worker = run(tmp_path, [[cand("ok", 2.0, tunables=[None, 1, 2, 4, 8])]], max_turns=1)
    assert outcome.best["M=16384,C=96"].tunables == {"BLOCK": 2}
    assert outcome.best["M=16384,C=320"].tunables == {"BLOCK": 4}
    screens = [r for r in worker.requests if "/tune/" in r.kernel_path and r.seeds == 1]
    assert len(screens) == 4 and all(r.distributions == ["normal"] and r.timing_trials == 20 and r.keep_going
                                     for r in screens)
    fulls = [r for r in worker.requests if "/tune/" in r.kernel_path and r.seeds == 5]
    assert sorted(r.configs[0]["C"] for r in fulls) == [96, 320]
    events = [e["event"] for e in loop.store.events()]
    assert events.count("variant_evaluated") == 6 and "tuned" in events
    assert (tmp_path / "run/attempts/t1-c0/tune/BLOCK=4.py").read_text().count("BLOCK = 4  # tuned") == 1


def test_the_best_kernel_shows_what_it_gained_and_what_changed(tmp_path):
    """Turn 1's kernel is correct and slow; turn 2's replaces it on both configs: turn 3's prompt shows the per-config
    times before and after and the diff between the two kernels."""
    _, _, drafter, _ = run(tmp_path, [[cand("ok", 3.0)], [cand("ok", 2.0)], [cand("ok", 3.0)]], max_turns=3,
                           candidates=1)
    second, third = drafter.calls[1], drafter.calls[2]
    assert "What it gained" not in second.messages[1]["content"]  # turn 1's kernel replaced nothing
    user = third.messages[1]["content"]
    assert "## Best kernel so far: t2-c0" in user
    assert "Its module is t2-c0's, below." in user and user.count("\n# FAKE ok 2.0\n") == 1  # printed once (played
    # LLM, session 23: a 54 KB turn-2 prompt held turn 1's module twice)
    assert "- M=16384,C=96: 2.88 ms (t1-c0) -> 1.92 ms, x1.50" in user
    assert "- M=16384,C=320: 9.6 ms (t1-c0) -> 6.4 ms, x1.50" in user
    assert ("What changed since t1-c0:\n```diff\n--- t1-c0\n+++ t2-c0\n@@ -1,2 +1,2 @@\n-# FAKE ok 3.0\n"
            "+# FAKE ok 2.0") in user


def test_a_module_identical_to_one_that_failed_is_not_evaluated_again(tmp_path):
    """Played LLM, session 2: a resubmitted module cost a full CPU timeout per turn. Turn 2 resends turn 1's failing
    module unchanged: no evaluation, the same verdict, feedback that says so; a changed module is evaluated."""
    _, outcome, drafter, worker = run(tmp_path, [[cand("mismatch")], [cand("mismatch")], [cand("ok", 0.5)]],
                                      candidates=1)
    assert outcome.outcome == "target_met" and len(worker.requests) == 2  # turns 1 and 3
    fb = {a.attempt_id: a for a in drafter.calls[2].history}
    assert fb["t2-c0"].status == "mismatch" and fb["t2-c0"].feedback.startswith(
        "This module is identical to t1-c0 (turn 1), which failed on these configs, so it was not evaluated again. "
        "What that evaluation said:\n\nYour kernel ran but computed wrong values.")


def test_a_module_that_differs_from_a_tuned_one_only_in_knob_values_is_not_evaluated(tmp_path):
    """On the H200 (session 16) the built-in drafter's four schedule variants of one template were each evaluated and
    autotuned over the same TUNABLES space, finding the same winners: a rotary embedding's run took over 3 minutes.
    A module equal to a tuned one up to its knobs' values (and the order of its TUNABLES lists) is not evaluated; the
    feedback says why; a module that changes anything else is evaluated and tuned; without tuning nothing is skipped."""
    first = cand("ok", 3.0, tunables=[None, 1, 2, 4, 8])
    other_values = assign(first, {"BLOCK": 4}).replace("[None, 1, 2, 4, 8]", "[4, None, 1, 2, 8]")
    outside = assign(first, {"BLOCK": 16})  # its own value is not in its list: a variant the tuning never screened
    changed = cand("ok", 2.5, tunables=[None, 1, 2, 4, 8])
    loop, outcome, drafter, worker = run(tmp_path, [[first, other_values], [outside, changed]], max_turns=2)
    evaluated = sorted({Path(r.kernel_path).parent.name for r in worker.requests if "/tune/" not in r.kernel_path})
    assert evaluated == ["t1-c0", "t2-c0", "t2-c1"]
    tuned = sorted({Path(r.kernel_path).parent.parent.name for r in worker.requests if "/tune/" in r.kernel_path})
    assert tuned == ["t1-c0", "t2-c0", "t2-c1"]
    skipped = {a.attempt_id: a for a in drafter.calls[1].history}["t1-c1"]
    assert skipped.status == "covered" and " ".join(skipped.feedback.split()).startswith(
        "This module is t1-c0's (turn 1) with other values of its TUNABLES (BLOCK), and t1-c0's autotuning already "
        "screened that space (4 variants), so it was not evaluated")
    logged = [e for e in loop.store.events() if e["event"] == "evaluated" and e["attempt_id"] == "t1-c1"]
    assert logged[0]["covered_by"] == "t1-c0" and logged[0]["result"] is None
    _, _, _, worker = run(tmp_path / "untuned", [[first, other_values]], tune=False, max_turns=1)
    assert len(worker.requests) == 2  # --no-tune: no space was searched


def test_after_a_tuning_cut_short_only_the_values_it_screened_are_covered(tmp_path, monkeypatch):
    """A tuning its time budget cut short (BLOCK=1 and 2 screened of 1, 2, 4, 8) covers a module whose knob values it
    screened (BLOCK=2), and says the search was cut short; a module with values it never reached (BLOCK=8) is
    evaluated (with --tune-seconds 0 nothing would be covered) but its space is not searched a second time (on the
    H200, session 17: a GEMM's second tuning of the one SCHEDULE space took generate past 3 minutes)."""
    first = cand("ok", 3.0, tunables=[None, 1, 2, 4, 8])
    _, _, drafter, worker = run(tmp_path, [[first, assign(first, {"BLOCK": 2})], [assign(first, {"BLOCK": 8})],
                                           [cand("ok", 3.1)]],
                                worker=slow_worker(monkeypatch)(), max_turns=3, candidates=2, tune_seconds=15)
    history = {a.attempt_id: a for a in drafter.calls[2].history}
    assert history["t1-c1"].status == "covered" and "screened that space (2 variants; its search was cut short, but " \
        "it screened each of these values)" in " ".join(history["t1-c1"].feedback.split())
    assert history["t2-c0"].status == "ok"
    assert any(r.kernel_path.endswith("attempts/t2-c0/candidate.py") for r in worker.requests)
    assert any("/attempts/t1-c0/tune/" in r.kernel_path for r in worker.requests)
    assert not any("/attempts/t2-c0/tune/" in r.kernel_path for r in worker.requests)


def test_a_tuning_cut_short_covers_a_module_each_of_whose_values_it_screened(tmp_path, monkeypatch):
    """Cut short after screening (BLOCK=None, WARPS=2) and (BLOCK=1, WARPS=1): a module with BLOCK=1, WARPS=2 (each
    value screened, not together) is covered; one with BLOCK=2 (never screened) is evaluated."""
    first = cand("ok", 3.0).replace("class ModelNew", "BLOCK = None\nWARPS = 1\n"
                                    "TUNABLES = {'BLOCK': [None, 1, 2], 'WARPS': [1, 2]}\nclass ModelNew")
    _, _, drafter, worker = run(tmp_path, [[first, assign(first, {"BLOCK": 1, "WARPS": 2})],
                                           [assign(first, {"BLOCK": 2})], [cand("ok", 3.1)]],
                                worker=slow_worker(monkeypatch)(), max_turns=3, candidates=2, tune_seconds=15)
    screened = [Path(r.kernel_path).name for r in worker.requests if "/attempts/t1-c0/tune/" in r.kernel_path]
    assert screened[:2] == ["BLOCK=None,WARPS=2.py", "BLOCK=1,WARPS=1.py"] and "BLOCK=1,WARPS=2.py" not in screened
    history = {a.attempt_id: a for a in drafter.calls[2].history}
    assert history["t1-c1"].status == "covered" and history["t2-c0"].status == "ok"


def test_correct_but_slower_than_the_target_exits_3(tmp_path):
    _, outcome, _, _ = run(tmp_path, [[cand("ok", 3.0)]], max_turns=2, candidates=1)
    assert outcome.outcome == "correct_not_faster" and EXIT_CODES[outcome.outcome] == 3
    assert outcome.turns == 2


def test_target_met_skips_the_remaining_candidates(tmp_path):
    _, outcome, _, worker = run(tmp_path, [[cand("ok", 0.5), cand("ok", 0.4)]])
    assert outcome.outcome == "target_met" and len(worker.requests) == 1


def test_no_correct_kernel_exits_4_and_the_token_budget_stops(tmp_path):
    _, outcome, drafter, _ = run(tmp_path, [[cand("mismatch")]], tokens=60, budget_tokens=100, candidates=1)
    assert outcome.outcome == "no_correct" and EXIT_CODES[outcome.outcome] == 4
    assert len(drafter.calls) == 2 and "token budget spent (120 > 100)" in outcome.reason


def test_cpu_runs_stop_once_every_config_is_correct(tmp_path):
    _, outcome, _, _ = run(tmp_path, [[cand("ok", 9.0, tunables=[None, 1])]], device="cpu")
    assert outcome.outcome == "correct_untimed" and EXIT_CODES["correct_untimed"] == 0 and outcome.turns == 1


class CpuWorker(FakeWorker):
    """As on the CPU: correct, untimed; a candidate whose first line says "spills" has kernels that keep 2352 B a
    thread in local memory at the GPU's sizes (EvalResult.plans), one that says "idle" runs 16 blocks for 64 MiB, one
    that says "narrow" reads x 16 bits at a time (a run-time row length; so is the small w's, in every kernel)."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.requests.append(request)
        word = Path(request.kernel_path).read_text().splitlines()[0].split()[2]
        spills, idle, narrow = word == "spills", word == "idle", word == "narrow"
        launch = {"kernel": "main_kernel", "blocks": 16 if idle else 128, "threads": 256,
                  "registers": 255 if spills else 64,
                  "frame_bytes": 2352 if spills else 0, "shared_bytes": 0, "blocks_per_sm": 1, "occupancy_pct": 12,
                  "limited_by": "registers", "waves": 0.97, "access_bytes": {"x": 2 if narrow else 16, "w": 2},
                  "runtime_rows": ["x", "w"] if narrow else [], "small": ["w"], "arch": "sm_90a", "sms": 132,
                  "sm_source": "device"}
        return EvalResult(status="ok", configs=[ConfigResult(config=c, correct=True) for c in request.configs],
                          plans=[{"config": c, "launches": [launch], "bytes": 64 << 20} for c in request.configs],
                          device="cpu")


def test_cpu_runs_go_on_while_the_best_kernel_spills_and_keep_the_one_that_does_not(tmp_path):
    """Played LLM session 36: a correct kernel keeping 2352 B a thread in local memory at the GPU's sizes ended the
    CPU loop as done. It is fed back as what will make it slow, the loop goes on, and a later correct kernel without
    local memory serves the configs."""
    loop, outcome, drafter, _ = run(tmp_path, [[cand("spills", 1.0)], [cand("ok", 1.0)]], worker=CpuWorker(),
                                    device="cpu", candidates=1)
    assert outcome.outcome == "correct_untimed" and outcome.turns == 2 and outcome.reason == "every config meets " \
        "the target"
    assert {b.attempt_id for b in outcome.best.values()} == {"t2-c0"}
    (first,) = drafter.calls[1].history
    assert "Timing is unavailable on cpu, but one thing is sure to make it slow on the GPU: main_kernel at M=16384, " \
           "C=96 keeps 2352 B a thread in local memory (255 registers a thread; spilled registers or a local array)" \
        in first.feedback


def test_cpu_runs_go_on_while_the_best_kernel_leaves_most_sms_idle(tmp_path):
    """Played LLM sessions 43b and 44b: a decode GEMM of 32 blocks (0.12 waves) ended the CPU loop as done. A correct
    kernel whose launch has blocks for fewer than a quarter of the SMs, each streaming 256 KiB or more, is fed back as
    what will make it slow; a later one with enough blocks serves the configs."""
    from tileagent.feedback import idle_launch

    loop, outcome, drafter, _ = run(tmp_path, [[cand("idle", 1.0)], [cand("ok", 1.0)]], worker=CpuWorker(),
                                    device="cpu", candidates=1)
    assert outcome.outcome == "correct_untimed" and outcome.turns == 2
    assert {b.attempt_id for b in outcome.best.values()} == {"t2-c0"}
    (first,) = drafter.calls[1].history
    assert "Timing is unavailable on cpu, but one thing is sure to make it slow on the GPU: at M=16384, C=96, " \
           "main_kernel runs 16 block(s) on the GPU's 132 SMs, each streaming 4096 KiB of the 64 MiB of inputs: most " \
           "SMs stay idle while a few move the data." in " ".join(first.feedback.split())
    launch = {"kernel": "k", "config": {"M": 1}, "sms": 132, "blocks": 32, "bytes": 32 << 20}
    assert idle_launch([launch]) == launch  # 32 blocks of 1 MiB
    assert idle_launch([{**launch, "blocks": 33}]) is None  # a quarter of the SMs
    assert idle_launch([{**launch, "bytes": 4 << 20}]) is None  # 128 KiB a block: a small op's latency
    assert idle_launch([launch, {**launch, "kernel": "split", "blocks": 264}]) is None  # its busiest launch counts


def test_cpu_runs_go_on_while_the_best_kernel_reads_a_large_tensor_an_element_at_a_time(tmp_path):
    """Played LLM sessions 45 and 47: a `T.dynamic` row length (16-bit accesses; a maxpool at 0.31-0.40x
    torch.compile on the GPU) ended the CPU loop as done. A correct kernel reading a tensor of more than 64 KiB an
    element at a time for that reason is fed back as what will make it slow; a small tensor (a norm's weight) read so
    does not count, and a later kernel without it serves the configs."""
    from tileagent import report

    loop, outcome, drafter, _ = run(tmp_path, [[cand("narrow", 1.0)], [cand("ok", 1.0)]], worker=CpuWorker(),
                                    device="cpu", candidates=1)
    assert outcome.outcome == "correct_untimed" and outcome.turns == 2
    assert {b.attempt_id for b in outcome.best.values()} == {"t2-c0"}
    (first,) = drafter.calls[1].history
    assert "one thing is sure to make it slow on the GPU: at M=16384, C=96, main_kernel reads or writes x 16 bits at " \
           "a time, because its last dim is a run-time size" in " ".join(first.feedback.split())
    narrow = {**loop.attempts["t1-c0"].result.plans[0]["launches"][0], "config": {"M": 16}}  # as Best.launches
    table = [{"config": {"M": 16}, "launches": [narrow]}]
    assert report.gpu_flags(table) == ["main_kernel at M=16 (x 16 bits at a time: a run-time row length)"]
    assert report.gpu_flags([{"config": {"M": 16}, "launches": [{**narrow, "small": ["w", "x"]}]}]) == []


class FailsAtTheSecond(CpuWorker):
    """As on the CPU: the first config passes its check, the second raises the block race a "race" candidate has or
    differs for a "mismatch" one; any other candidate is correct on both."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        result = super().evaluate(request)
        kind = Path(request.kernel_path).read_text().splitlines()[0].split()[2]
        if kind not in ("race", "mismatch"):
            return result
        message = "ModelNew.forward raised RaceFault: k.py:25:17: thread blocks race on 'Out'" if kind == "race" \
            else "output 0 differs"
        failure = {"kind": "RunFailed", "message": message, "exception": "RaceFault", "config": request.configs[1]} \
            if kind == "race" else {**MISMATCH, "config": request.configs[1]}
        return result.model_copy(update={
            "status": "candidate_error" if kind == "race" else "mismatch", "message": message, "failure": failure,
            "configs": [result.configs[0], ConfigResult(config=request.configs[1], correct=False)]})


@pytest.mark.parametrize("kind, own_sizes", [("race", True), ("mismatch", False), ("mismatch", True)])
def test_a_candidate_that_failed_at_one_config_serves_none_it_did_not_run_at_its_sizes(tmp_path, kind, own_sizes):
    """Played LLM 48: a kernel that zeroes its output in the launch that adds into it atomically raced at one
    config, and passed another checked in one block; it stayed the best kernel there and was exported to serve it on
    6300 blocks, never run at its sizes (a failure elsewhere skips those runs). A race is the kernel's structure, not
    its sizes: such a candidate serves no config. Another failure leaves it the configs checked at their own sizes."""
    configs = [RunConfig(spec={"M": 16384, "C": c}, eval={"M": 16384 if own_sizes else 37, "C": c}) for c in (96, 320)]
    loop, outcome, drafter, _ = run(tmp_path, [[cand(kind, 1.0)], [cand("ok", 1.0)]], worker=FailsAtTheSecond(),
                                    device="cpu", candidates=1, configs=configs)
    if kind == "mismatch" and own_sizes:  # C=96 checked as stated: served by t1-c0 until t2-c0 took it over
        assert len(drafter.calls[1].configs) == 1 and outcome.turns == 2
        return
    assert outcome.outcome == "correct_untimed" and outcome.turns == 2
    assert {b.attempt_id for b in outcome.best.values()} == {"t2-c0"}
    assert len(drafter.calls[1].configs) == 2  # both configs drafted again at turn 2
    assert "Best kernel so far" not in drafter.calls[1].messages[-1]["content"]


class GivesUp:
    name = "giving-up"

    def draft(self, task):
        raise DrafterUnavailable("no template for this op")


def test_a_drafter_that_gives_up_ends_the_run_with_its_reason(tmp_path):
    loop = Loop(options(), RunStore.create(tmp_path / "run", {}), GivesUp(), FakeWorker())
    outcome = loop.run()
    assert outcome.outcome == "not_drafted" and "no template for this op" in outcome.reason
    assert EXIT_CODES["not_drafted"] == 5 and EXIT_CODES["no_correct"] == 4


class Dies(FakeWorker):
    def __init__(self, after: int):
        super().__init__()
        self.after = after

    def evaluate(self, request):
        if len(self.requests) >= self.after:
            raise KeyboardInterrupt  # the process is killed here
        return super().evaluate(request)


def test_resume_replays_finished_attempts_and_continues_the_turns(tmp_path):
    # turn 2's module differs from t1-c1's (an identical one would not be evaluated again, and not reach the kill)
    turns = [[cand("compile_error"), cand("mismatch")], [cand("mismatch", 2.0)], [cand("ok", 0.5)]]
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, turns, worker=Dies(after=2))
    events = RunStore(tmp_path / "run").events()
    assert [e.get("attempt_id") for e in events if e["event"] == "evaluated"] == ["t1-c0", "t1-c1"]
    loop, outcome, drafter, worker = run(tmp_path, turns)
    assert outcome.outcome == "target_met" and outcome.turns == 3
    assert [c.turn for c in drafter.calls] == [3]  # turns 1 and 2 were drafted before the kill: not drafted again
    assert [r.kernel_path.split("/")[-2] for r in worker.requests] == ["t2-c0", "t3-c0"]
    evaluated = [e["attempt_id"] for e in loop.store.events() if e["event"] == "evaluated"]
    assert evaluated == ["t1-c0", "t1-c1", "t2-c0", "t3-c0"]


def test_context_stays_bounded_with_a_long_history():
    history = [AttemptSummary(attempt_id=f"t{t}-c0", turn=t, source="x = 1\n" * 5000, status="mismatch",
                              feedback="wrong " * 2000) for t in range(1, 30)]
    messages = build_messages(device="cpu", reference_path=REFERENCE, reference_source=Path(REFERENCE).read_text(),
                              configs=[{"M": 37, "C": 96}], turn=30, n=1, history=history, best=None,
                              examples=[("e", "y = 2\n")], max_tokens=20_000)
    assert messages[0]["role"] == "system" and "The TileAgent tile DSL" in messages[0]["content"]
    user = messages[1]["content"]
    assert (len(messages[0]["content"]) + len(user)) / 4 <= 20_000
    assert "class Model(nn.Module)" in user and "## Turn 30" in user and "t29-c0" in user and "t1-c0" not in user


def test_a_long_feedback_paragraph_is_printed_once_a_prompt():
    """Played LLM, session 24: a turn-3 prompt repeated the mismatch's 14-line "Reading it" paragraph for every
    failed attempt. The first stays whole; later copies point to it; short lines and the attempts' own lines stay."""
    guide = "Reading it: " + "NaN where the reference is finite is an element never written. " * 8
    history = [AttemptSummary(attempt_id=f"t{t}-c0", turn=t, source=f"x = {t}\n", status="mismatch",
                              feedback=f"Output 0 differs at index ({t},).\n\n{guide}") for t in (1, 2, 2)]
    user = build_messages(device="cpu", reference_path=REFERENCE, reference_source=Path(REFERENCE).read_text(),
                          configs=[{"M": 37, "C": 96}], turn=3, n=1, history=history, best=None, examples=[])[1]["content"]
    assert user.count(guide) == 1
    assert user.count("(Reading it: NaN ...: the same paragraph as in the feedback above.)") == 2
    assert all(f"Output 0 differs at index ({t},)." in user for t in (1, 2))


def test_feedback_for_an_untimed_correct_candidate_and_a_guard_violation():
    ok = EvalResult(status="ok", configs=[ConfigResult(config={"C": 96}, correct=True)])
    assert "correct on every config (1 checked)" in render_feedback(ok, device="the CPU")
    alike = EvalResult(status="ok", configs=[ConfigResult(config={"B": 1, "V": 9}, correct=True), ConfigResult(
        config={"B": 3, "V": 9}, evaluated_at={"B": 1, "V": 9}, correct=True)])  # one check for both
    assert "correct on every config (1 checked)" in render_feedback(alike, device="the CPU")
    guard = EvalResult(status="guard_violation", message="line 3: torch.exp [rule torch-compute]",
                       failure={"kind": "GuardViolation", "rule": "torch-compute"})
    assert "broke the evaluation rule `torch-compute`:\nline 3: torch.exp" in render_feedback(guard)


def test_a_kernel_fault_is_fed_back_as_the_kernels_line_not_as_a_broken_module():
    """A race between T.Parallel iterations (played LLM, session 26) came back under "Check the imports, the
    ModelNew constructor ...": the advice for a module that cannot load."""
    message = ("ModelNew.forward raised KernelFault: k.py:38:25: T.Parallel iterations race on Y: iteration (j=0) "
               "reads Y[0, 3] that iteration (j=2) writes at line 39 in the same loop")
    fault = EvalResult(status="candidate_error", message=message,
                       failure={"kind": "RunFailed", "exception": "KernelFault", "message": message})
    text = render_feedback(fault)
    assert text.startswith(f"Your kernel faulted on the CPU interpreter:\n{message}\n")
    assert "Check the imports" not in text and "Fix that line" in text
    other = EvalResult(status="candidate_error", message="x", failure={"kind": "RunFailed", "exception": "TypeError"})
    assert "Check the imports" in render_feedback(other)


def test_autotune_assign_replaces_only_the_module_level_knob():
    source = "BLOCK = None\nTUNABLES = {'BLOCK': [None, 2]}\ndef f():\n    BLOCK = 7\n"
    out = assign(source, {"BLOCK": 2})
    assert out.splitlines()[0] == "BLOCK = 2  # tuned" and "    BLOCK = 7" in out
    assert current_values(out, tunables_of(out)) == {"BLOCK": 2}
    assert tunables_of("TUNABLES = {'X': [1, 2]}\n") is None  # X is never assigned: nothing to tune
    ast.parse(out)


def test_config_selection_by_key_and_index_with_clear_errors():
    grid_ = [{"M": 16384, "C": c} for c in (96, 160, 320)]
    assert select(grid_, ["C=96,320"]) == [grid_[0], grid_[2]]
    assert select(grid_, ["1"]) == [grid_[1]]
    with pytest.raises(ConfigSelectionError, match=r"no config of the grid has C in \[97\] \(its values: 96, 160, "
                                                   r"320\)"):
        select(grid_, ["C=97"])
    with pytest.raises(ConfigSelectionError, match=r"the grid has no key 'N' \(its keys: C, M\)"):
        select(grid_, ["N=1"])
    with pytest.raises(ConfigSelectionError, match=r"index 5 is out of range: the grid has 3 configs"):
        select(grid_, ["0,5"])
    assert grid({"M": 16384, "C": 96}, ["C=160,256", "M=8,16"])[1] == {"M": 16, "C": 160}


def test_cpu_evaluates_free_dims_at_their_small_config_size():
    from tileagent.evaluator.spec import load_spec

    spec = load_spec(REFERENCE, check=False)
    cpu = reduce_for_device(spec, spec.configs[:2], "cpu")
    assert [(rc.spec, rc.eval) for rc in cpu][0] == ({"M": 16384, "C": 96}, {"M": 37, "C": 96})
    assert reduce_for_device(spec, spec.configs[:2], "cuda")[1].eval == {"M": 16384, "C": 160}


def test_archive_keeps_the_fastest_kernel_per_key(tmp_path):
    archive = Archive(tmp_path)
    entry = ArchiveEntry(family="rmsnorm", dtype="float16", arch="sm_90a", config={"C": 96}, task="t", time_ms=2.0,
                         source="A")
    assert archive.put(entry)
    assert not archive.put(entry.model_copy(update={"time_ms": 3.0, "source": "B"}))
    assert archive.put(entry.model_copy(update={"time_ms": 1.0, "source": "C"}))
    assert [e.source for e in archive.find("rmsnorm")] == ["C"] and archive.find("softmax") == []


def test_archive_keeps_ops_of_one_family_apart_and_reuses_only_the_same_op(tmp_path):
    """Two ops of one family (ELU and LeakyReLU are both ``elementwise``) at one config are two entries; turn 0
    offers only the same op's kernels, a grid that grew keeping the op (on the H200, generate of one suite op tried
    up to three other ops' kernels first, each failing at ModelNew's signature: 6-16 s a run)."""
    from tileagent.archive import op_digest

    elu = "import torch\nCONFIGS = [{'M': 8}]\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n" \
          "        return torch.nn.functional.elu(x)\n"
    grown = elu.replace("[{'M': 8}]", "[{'M': 8}, {'M': 16}]  # a new size") + "SMALL_CONFIG = {'M': 2}\n"
    leaky = elu.replace("elu(x)", "leaky_relu(x)")
    assert op_digest(elu) == op_digest(grown) != op_digest(leaky)
    archive = Archive(tmp_path)
    entry = ArchiveEntry(family="elementwise", dtype="float32", arch="cpu", config={"M": 8}, task="t",
                         time_ms=1.0, op=op_digest(elu), source=cand("ok", 0.5))
    assert archive.put(entry)
    assert archive.put(entry.model_copy(update={"time_ms": 2.0, "op": op_digest(leaky), "source": cand("ok", 0.7)}))
    assert sorted(e.time_ms for e in archive.find("elementwise")) == [1.0, 2.0]
    assert [e.time_ms for e in archive.find("elementwise", op=op_digest(grown))] == [1.0]
    reference = tmp_path / "leaky.py"
    reference.write_text(leaky)
    loop = Loop(options(device="cpu", reference=str(reference)), RunStore.create(tmp_path / "run", {}),
                ScriptedDrafter([[cand("ok")]]), FakeWorker(), archive=archive)
    loop.family = "elementwise"
    loop._turn_zero()
    assert [d["source"] for d in loop.memo_drafts[0]] == [cand("ok", 0.7)]


def test_make_drafter_names_the_known_providers():
    with pytest.raises(ValueError, match=r"unknown drafter provider 'gpt'; known: builtin, openai, file"):
        make_drafter("gpt")
    with pytest.raises(ValueError, match=r"--provider openai needs --model"):
        make_drafter("openai")


def test_scripted_drafter_reads_its_script(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"turns": [["a"]], "tokens": 5}))
    drafter = make_drafter(f"scripted:{tmp_path / 's.json'}")
    assert drafter.turns == [["a"]] and drafter.tokens == 5


def test_against_the_fake_server_the_loop_feeds_back_each_failure_until_correct(tmp_path):
    from tests.fake_openai import FakeOpenAI, answer
    from tileagent.drafters.openai_drafter import OpenAIDrafter

    script = [answer(f"Try this.\n```python\n{cand(kind)}```") for kind in
              ("compile_error", "layout_error", "mismatch")] + [answer(f"```python\n{cand('ok', 0.5)}```")]
    with FakeOpenAI(script) as server:
        drafter = OpenAIDrafter(model="fake-model", base_url=server.base_url, api_key="k", max_retries=0)
        loop = Loop(options(candidates=1, max_turns=6), RunStore.create(tmp_path / "run", {}), drafter, FakeWorker())
        outcome = loop.run()
        sent = [r.messages for r in server.requests if r.path.endswith("/chat/completions")]
    assert outcome.outcome == "target_met" and outcome.turns == 4 and outcome.tokens == 4 * 150
    assert len(sent) == 4 and sent[0][0]["role"] == "system" and "## Turn 1" in sent[0][1]["content"]
    assert "k.py:48:13: error[E404]" in sent[1][1]["content"]
    assert "k.py:51:13: error[L003]: a copy between fragments x and y" in sent[2][1]["content"]
    assert "  note: x: Fragment(...)" in sent[2][1]["content"]
    assert "differs from the reference at index (27, 59)" in sent[3][1]["content"]
    assert (tmp_path / "run/attempts/t2-c0/response.md").read_text().startswith("Try this.")


@pytest.mark.parametrize("reuse", [True, False])
def test_archived_kernels_reach_the_prompt_only_when_archive_reuse_is_on(tmp_path, reuse):
    archive = Archive(tmp_path / "archive")
    archive.put(ArchiveEntry(family="rmsnorm", dtype="float16", arch="sm_90a", config={"C": 96}, task="t",
                             time_ms=1.0, source="# ARCHIVED KERNEL\n"))
    loop = Loop(options(reuse_archive=reuse), RunStore.create(tmp_path / "run", {}), ScriptedDrafter([[cand("ok")]]),
                FakeWorker(), archive=archive)
    loop.family = "rmsnorm"
    prompt = loop.task(1).messages[1]["content"]
    assert ("# ARCHIVED KERNEL" in prompt) == reuse


def test_the_fusion_familys_cpu_checked_kernels_of_other_ops_are_no_examples(tmp_path):
    """Played LLM session 44: a merge of attention states, CPU-checked three minutes earlier, was a rotary embedding's
    second example. Other ops' kernels of the fusion family serve as examples only GPU-verified; the same op's do."""
    archive = Archive(tmp_path / "archive")
    this = tmp_path / "ref.py"
    this.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n")
    loop = Loop(options(reuse_archive=True, reference=str(this)), RunStore.create(tmp_path / "run", {}),
                ScriptedDrafter([[cand("ok")]]), FakeWorker(), archive=archive)
    loop.family = "fusion"
    shown = []
    for op, arch, mark in (("other", "cpu", "CPU OTHER"), (loop.op, "cpu", "CPU SAME"), ("other", "sm_90a", "GPU")):
        archive.put(ArchiveEntry(family="fusion", dtype="float16", arch=arch, config={"C": 96}, task=mark, op=op,
                                 time_ms=None if arch == "cpu" else 1.0, source=f"# {mark}\n"))
        shown.append([t.split("(")[1].split(",")[0] for t, _ in loop.examples() if t.startswith("verified")])
    assert shown == [[], ["CPU SAME"], ["GPU"]]  # one place for an archived kernel here: GPU-verified first


def test_a_cpu_run_tells_the_model_the_real_configs_too(tmp_path):
    configs = [RunConfig(spec={"M": 16384, "C": 96}, eval={"M": 37, "C": 96})]
    loop = Loop(options(device="cpu", configs=configs), RunStore.create(tmp_path / "run", {}), ScriptedDrafter([[cand("ok")]]),
                FakeWorker())
    prompt = loop.task(1).messages[1]["content"]
    assert "- M=37, C=96" in prompt and "(which a GPU checks and times):\n- M=16384, C=96" in prompt


def test_cpu_runs_shrink_free_dims_even_without_a_small_config():
    from types import SimpleNamespace

    from tileagent.configs import AUTO_SMALL

    spec = SimpleNamespace(small_config=None, free_dims=("S",))
    rcs = reduce_for_device(spec, [{"B": 1, "S": 8192, "D": 128}, {"B": 1, "S": 16, "D": 128}], "cpu")
    assert [rc.eval for rc in rcs] == [{"B": 1, "S": AUTO_SMALL, "D": 128}, {"B": 1, "S": 16, "D": 128}]
    assert reduce_for_device(spec, [{"B": 1, "S": 8192, "D": 128}], "cuda")[0].eval["S"] == 8192


def test_a_cpu_timeout_is_not_blamed_on_the_kernel_alone():
    result = EvalResult(status="timeout", message="no result after 420 s at config S=8192",
                        failure={"kind": "timeout"})
    cpu = render_feedback(result, device="cpu")
    assert "CPU interpreter" in cpu and "a large config can time out\nwith a correct kernel" in cpu
    assert "far too large" in render_feedback(result, device="cuda")
    assert "Checked correct before" not in cpu


def test_a_cpu_timeout_after_a_passing_config_names_it_and_does_not_ask_for_larger_tiles():
    """A kernel correct on V=32000 timed out on V=50257: the feedback says which config passed, and that tiles made
    larger for the interpreter only slow the GPU kernel down (played-LLM stuck points 3 and 7)."""
    result = EvalResult(status="timeout", message="checking config {'M': 5, 'V': 50257} did not finish within 300 s",
                        failure={"kind": "Timeout"},
                        configs=[ConfigResult(config={"M": 5, "V": 32000}, correct=True)])
    cpu = render_feedback(result, device="cpu")
    assert "(checking config {'M': 5, 'V': 50257} did not finish within 300 s).\nChecked correct before the timeout: " \
           "M=5, V=32000.\n" in cpu
    assert "Do not make tiles larger only to please the interpreter: that\nslows the GPU kernel." in cpu
    assert "fewer, larger tiles" not in cpu
    # played LLM, session 23: "keep the schedule" and "the same module meets the same limit" left no move; the move
    # that got a correct causal conv1d through (a schedule sized from the call's sizes) is named
    assert "choose the schedule from the sizes forward is called with" in cpu
    # played LLM, session 20: the same module sent again timed out again; a passing config's time is a yardstick
    result.configs[0].seconds = {"check": 153.8}
    cpu = render_feedback(result, device="cpu")
    assert "Checked correct before the timeout: M=5, V=32000 in 154 s.\n" in cpu
    assert "the same module sent again meets the same limit" in cpu


def test_a_long_failure_is_summarized_at_a_words_end():
    """Played LLM, session 20: the log's line for a mismatch ended mid-word ("... max abs e"); it now ends at a word
    and says it was cut (the feedback has the whole message)."""
    from tileagent.feedback import summary

    message = ("output 0 differs from the reference at index (0, 2557): expected -320, got -288; 143 of 20480 "
               "elements outside atol=0.0001 + rtol=0.0001 * |expected|; max abs error 32, relative L2 error 0.01114")
    line = summary(EvalResult(status="mismatch", message=message))
    assert line == ("mismatch: output 0 differs from the reference at index (0, 2557): expected -320, got -288; 143 "
                    "of 20480 elements outside atol=0.0001 + rtol=0.0001 * |expected|; max abs ...")
    assert summary(EvalResult(status="mismatch", message="short")) == "mismatch: short"


def test_timing_feedback_names_the_configs_that_miss_the_target_slowest_first():
    t = lambda ms: Timing(median_ms=ms, iqr_ms=0.0, trials=50)  # noqa: E731
    rows = [ConfigResult(config={"C": c}, correct=True, candidate=t(ours), eager=t(2.0), compiled=t(comp),
                         speedup_eager=2.0 / ours, speedup_compiled=comp / ours, roofline_pct=pct, bound="memory")
            for c, ours, comp, pct in ((96, 1.0, 1.2, 60.0), (320, 1.0, 0.8, 70.0), (1024, 1.0, 0.9, 80.0))]
    text = render_feedback(EvalResult(status="ok", configs=rows, timing_available=True), device="cuda")
    assert ("2 of 3 configs miss the target, slowest first:\n"
            "- C=320: 0.8x torch.compile (25% slower than it), 70% of its memory-bound roofline\n"
            "- C=1024: 0.9x torch.compile (11% slower than it), 80% of its memory-bound roofline") in text
    rows[1].speedup_compiled = rows[2].speedup_compiled = 1.5
    text = render_feedback(EvalResult(status="ok", configs=rows, timing_available=True), device="cuda")
    assert "Every config meets the target of 1x." in text


def _rewrite_events(run_dir: Path, edit) -> None:
    path = run_dir / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(e) + "\n" for e in edit(events)))


def _forge_ok(events: list[dict], source_sha256=None) -> list[dict]:
    """Turn t1-c0's recorded mismatch into a correct, fast result (the hash kept, or replaced) and drop the end."""
    out = []
    for e in events:
        if e["event"] == "finished":
            continue
        if e["event"] == "evaluated" and e["attempt_id"] == "t1-c0":
            timing = {"median_ms": 0.1, "iqr_ms": 0.0, "trials": 50}
            e["result"] = {"status": "ok", "device": "cuda", "timing_available": True, "configs": [
                {"config": {"M": 16384, "C": c}, "correct": True, "candidate": timing, "eager": timing,
                 "compiled": timing, "speedup_eager": 10.0, "speedup_compiled": 10.0} for c in (96, 320)]}
            if source_sha256 is not None:
                e["source_sha256"] = source_sha256
        out.append(e)
    return out


def test_a_forged_correct_result_is_checked_again_before_it_can_serve_a_config(tmp_path, caplog):
    run(tmp_path, [[cand("mismatch")]], max_turns=1, candidates=1)
    _rewrite_events(tmp_path / "run", _forge_ok)  # the hash still names the wrong kernel's text
    loop, outcome, drafter, worker = run(tmp_path, [[cand("mismatch")]], max_turns=1, candidates=1)
    assert drafter.calls == []  # the forged verdict was replayed: every config looked served
    assert outcome.outcome == "no_correct" and outcome.best == {}  # ... until the kernel was checked again
    assert [Path(r.kernel_path).parent.name for r in worker.requests] == ["reverify"]
    assert loop.reverify_failed == [f"t1-c0 on M=16384,C={c}: output 0 differs" for c in (96, 320)]
    assert "the recorded result of t1-c0 on M=16384,C=96 did not hold when checked again (output 0 differs): it " \
           "serves no config and is not exported" in caplog.text
    assert [e["event"] for e in loop.store.events()][-2:] == ["reverified", "finished"]


def test_a_recorded_result_counts_only_for_the_kernel_text_whose_hash_it_names(tmp_path, caplog):
    run(tmp_path, [[cand("mismatch")]], max_turns=1, candidates=1)
    _rewrite_events(tmp_path / "run", lambda events: _forge_ok(events, source_sha256="0" * 64))
    loop, outcome, _, worker = run(tmp_path, [[cand("mismatch")]], max_turns=1, candidates=1)
    assert outcome.outcome == "no_correct"
    assert [Path(r.kernel_path).parent.name for r in worker.requests] == ["t1-c0"]  # evaluated again, not trusted
    assert "the recorded evaluation of t1-c0 names kernel text sha256 000000000000..., but its text is " in caplog.text


def test_an_honest_replayed_best_is_rechecked_and_keeps_serving(tmp_path):
    turns = [[cand("mismatch")], [cand("ok", 0.5)]]
    run(tmp_path, turns, candidates=1)
    _rewrite_events(tmp_path / "run", lambda events: events[:-1])  # killed before "finished" was written
    loop, outcome, drafter, worker = run(tmp_path, turns, candidates=1)
    assert outcome.outcome == "target_met" and outcome.turns == 2 and drafter.calls == []
    assert [Path(r.kernel_path).parent.name for r in worker.requests] == ["reverify"]
    assert outcome.best["M=16384,C=96"].attempt_id == "t2-c0" and loop.reverify_failed == []


def test_malformed_events_are_skipped_with_a_warning(tmp_path, caplog):
    run(tmp_path, [[cand("mismatch")]], max_turns=1, candidates=1)

    def damage(events):
        events = [e for e in events if e["event"] != "finished"]
        return events + [{"event": "evaluated"}, {"event": "drafted", "turn": "x", "drafts": []},
                         {"event": "variant_evaluated", "attempt_id": "t1-c0", "variant": "v", "phase": "full",
                          "configs_key": "[]", "result": {"status": "fine"}}]

    _rewrite_events(tmp_path / "run", damage)
    loop, outcome, _, _ = run(tmp_path, [[cand("mismatch")]], max_turns=1, candidates=1)
    assert outcome.outcome == "no_correct" and outcome.turns == 1
    skipped = [r.getMessage() for r in caplog.records if "skipping a malformed" in r.getMessage()]
    assert [m.split(": skipping ")[1].split(" (")[0] for m in skipped] == [
        "a malformed 'evaluated' event", "a malformed 'drafted' event", "a malformed 'variant_evaluated' event"]
    assert skipped[0].endswith("(KeyError: 'attempt_id')") and skipped[1].endswith("(ValueError: turn 'x' is not a "
                                                                                   "turn number)")
    assert skipped[2].endswith("(ValidationError: 1 validation error for EvalResult)")


def test_a_failing_reference_stops_the_loop_without_counting_the_attempt_and_resume_evaluates_it_again(tmp_path):
    """A spec_error from the worker is the reference's fault: the loop raises ReferenceFailed with the message, records
    "reference_failed" (no "evaluated" event, no feedback for the drafter), and a resume after the fix evaluates the
    same draft again without drafting it anew."""
    worker = FakeWorker()
    with pytest.raises(ReferenceFailed) as info:
        run(tmp_path, [[cand("reference_fails", 0.5)]], worker=worker, max_turns=1, candidates=1)
    assert info.value.attempt_id == "t1-c0" and info.value.message.endswith("at rmsnorm_silu.py:12")
    store = RunStore(tmp_path / "run")
    kinds = [e["event"] for e in store.events()]
    assert "evaluated" not in kinds and kinds[-1] == "reference_failed"
    assert store.events()[-1]["message"] == info.value.message
    assert not (tmp_path / "run/attempts/t1-c0/feedback.md").exists()
    worker.reference_fixed = True
    loop, outcome, drafter, _ = run(tmp_path, [[cand("mismatch")]], worker=worker, max_turns=1, candidates=1)
    assert drafter.calls == [] and outcome.outcome == "target_met"  # the recorded draft, evaluated this time
    assert [e["attempt_id"] for e in loop.store.events() if e["event"] == "evaluated"] == ["t1-c0"]


def test_autotune_coordinate_search_under_a_variant_cap_chooses_among_screened_variants():
    """Three knobs of four values (64 > PRODUCT_LIMIT: coordinate search) with room for three variants: the
    search must pick among the variants that ran (it raised KeyError on an unscreened one on the H200)."""
    from tileagent.autotune import autotune

    source = ("A = None\nB = None\nC = None\nTUNABLES = {'A': [None, 1, 2, 3], 'B': [None, 1, 2, 3], "
              "'C': [None, 1, 2, 3]}\n")
    configs = [{"M": 64}]

    def result(ms):
        timing = Timing(median_ms=ms, iqr_ms=0.0, trials=5)
        return EvalResult(status="ok", device="cuda", timing_available=True, configs=[
            ConfigResult(config=configs[0], correct=True, candidate=timing, eager=timing, compiled=timing)])

    def evaluate(values, mode, cfgs):
        return result(1.0 - 0.1 * (values["A"] or 0))  # A=3 fastest; B and C do not matter

    tuned = autotune(source, configs, result(1.0), evaluate, max_variants=2)
    assert tuned.screened == 2  # A=1 and A=2 beside the default; the cap left A=3 and every B, C unscreened
    winner = tuned.winners["M=64"]
    assert winner.values["A"] == 2 and winner.result.candidate.median_ms == 0.8


def test_configs_with_one_cpu_size_are_all_kept_and_that_size_is_checked_once(tmp_path):
    """Issue 19, stuck point S3-1: two configs whose free dims come down to the same CPU size both stay in the run
    (prompt, report), and the evaluator is asked for that size once; on the CPU the prompt says how sizes are
    reduced even where no free dim shrank (S3-2)."""
    from types import SimpleNamespace

    from tileagent.configs import unique_evals
    from tileagent.report import rows

    spec = SimpleNamespace(free_dims=("M",), small_config={"M": 37})
    chosen = reduce_for_device(spec, [{"M": 16384, "C": 96}, {"M": 8192, "C": 96}, {"M": 16384, "C": 320}], "cpu")
    assert [rc.spec for rc in chosen] == [{"M": 16384, "C": 96}, {"M": 8192, "C": 96}, {"M": 16384, "C": 320}]
    assert unique_evals(chosen) == [{"M": 37, "C": 96}, {"M": 37, "C": 320}]

    store = RunStore.create(tmp_path / "run", {})
    worker, drafter = FakeWorker(), ScriptedDrafter([[cand("ok", 0.5)]])
    loop = Loop(options(device="cpu", configs=chosen, candidates=1), store, drafter, worker)
    outcome = loop.run()
    assert worker.requests[0].configs == [{"M": 37, "C": 96}, {"M": 37, "C": 320}]
    assert worker.requests[0].plan_configs == [rc.spec for rc in chosen]
    assert [r["config"] for r in rows(loop.o, outcome, lambda b: True) if r["correct"]] == [rc.spec for rc in chosen]
    user = drafter.calls[0].messages[1]["content"]
    assert "more than 2**18 elements with the free dims (FREE_DIMS) halved until the inputs and model tensors fit, " \
           "and the outputs too, other sizes as stated; where that is not enough, the sizes SMALL_CONFIG states " \
           "halved toward it until they fit, the first it states alone first, then with the next (a config's last " \
           "dims, its rows and planes, stay as stated where that fits, unless two configs would then be checked " \
           "alike); else SMALL_CONFIG's sizes" in user
    assert "- M=8192, C=96" in user


def test_cpu_prompt_names_the_size_the_interpreter_checks_a_large_config_at(tmp_path):
    """Played LLM, session 19: the prompt listed "M=3, V=256000" among the configs checked, but the interpreter
    checked V=1000 (the inputs held more than 2**18 elements) and only the feedback said so, after the turn."""
    from tileagent.evaluator.spec import load_spec

    ref = tmp_path / "wide_softmax.py"
    ref.write_text("import torch\nimport torch.nn as nn\n\nCONFIGS = [{'M': 8, 'C': 256000}, {'M': 8, 'C': 512}]\n"
                   "SMALL_CONFIG = {'M': 3, 'C': 1000}\nFREE_DIMS = ['M']\n\n\nclass Model(nn.Module):\n"
                   "    def forward(self, x):\n        return torch.softmax(x, -1)\n\n\n"
                   "def get_inputs(M=8, C=256000):\n    return [torch.randn(M, C)]\n\n\n"
                   "def get_init_inputs(M=8, C=256000):\n    return []\n")
    spec = load_spec(ref)
    chosen = reduce_for_device(spec, spec.configs, "cpu")
    drafter = ScriptedDrafter([[cand("ok", 0.5)]])
    Loop(options(device="cpu", reference=str(ref), configs=chosen, candidates=1), RunStore.create(tmp_path / "run", {}),
         drafter, FakeWorker()).run()
    user = drafter.calls[0].messages[1]["content"]
    assert "else SMALL_CONFIG's sizes; once the checks pass, each config also runs once at its own sizes, or as near " \
           "them as the interpreter finishes a call in 20 s (the free dims cut to two thirds one at a time, to " \
           "odd sizes, in FREE_DIMS order, a dim that holds little of the memory waiting while the inputs " \
           "exceed 2**26 elements; where none fits, the last size the check shrank as stated and the others " \
           "halved toward 1), compared with the reference as every check is: a path your kernel takes only at " \
           "large sizes runs. Each config" in user, user
    # session 23: a correct causal conv1d timed out on its empty blocks; the prompt now says what a check costs
    assert "Each config is checked on 5 seeds x 11 input distributions and again at tail sizes of its free dims, a " \
           "few hundred runs, and the interpreter runs a launch's blocks one after another" in user
    # session 22: the list read as the sizes checked; on the CPU it says what it is and where the others are
    # session 23: a config listed with its free dims at SMALL_CONFIG's sizes and again, in the note, at the
    # interpreter's: the list now holds the interpreter's sizes alone
    assert "Configs your kernel is checked on, at the CPU interpreter's sizes (the note below gives its rule and the " \
           "configs a GPU runs):\n- M=1, C=256000\n- M=3, C=512\n\n" in user
    assert "M=3, C=256000" not in user


def test_resume_replays_a_finished_autotuning_as_it_ran_without_screening_more_variants(tmp_path, monkeypatch):
    """A tuning cut by its time budget (two of four variants screened) is replayed on resume with those two only:
    replayed results take no time, so a new search under the budget would evaluate the variants it had no time for
    (on the GPU turns of #19, every resume of turn 1 would tune turn 1's kernel further)."""
    Slow = slow_worker(monkeypatch)
    turns = [[cand("ok", 2.0, tunables=[None, 1, 2, 4, 8])], [cand("ok", 0.5)]]
    _, first, _, worker = run(tmp_path, turns, worker=Slow(), max_turns=1, candidates=1, tune_seconds=15)
    screens = [Path(r.kernel_path).name for r in worker.requests if "/tune/" in r.kernel_path and r.seeds == 1]
    assert screens == ["BLOCK=1.py", "BLOCK=2.py"]  # cut by the budget
    assert first.outcome == "correct_not_faster" and first.best["M=16384,C=96"].tunables == {"BLOCK": 2}

    loop, outcome, drafter, worker = run(tmp_path, turns, worker=Slow(), max_turns=2, candidates=1, tune_seconds=15)
    assert [c.turn for c in drafter.calls] == [2]
    paths = [r.kernel_path for r in worker.requests]
    assert not [p for p in paths if "/attempts/t1-c0/" in p], paths  # turn 1 and its tuning: replayed only
    assert any("/attempts/t2-c0/" in p for p in paths) and outcome.outcome == "target_met"
    kinds = [e["event"] for e in loop.store.events()]
    assert kinds.count("variant_evaluated") == 3 and kinds.count("tuned") == 1  # 2 screens, 1 full check: once


class _SlowAtC320(FakeWorker):
    """FakeWorker whose kernels are 3x slower at C=320: that config misses the target, C=96 meets it."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        result = super().evaluate(request)
        for c in result.configs:
            if c.config["C"] == 320 and c.candidate is not None:
                t = 3 * c.candidate.median_ms
                c.candidate = Timing(median_ms=t, iqr_ms=0.0, trials=c.candidate.trials)
                c.speedup_eager, c.speedup_compiled = c.eager.median_ms / t, c.compiled.median_ms / t
        return result


class WrongAt320(FakeWorker):
    """A "partial" candidate is correct at C=96 and computes wrong values at C=320 (checking stops there)."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        result = super().evaluate(request)
        if Path(request.kernel_path).read_text().split()[2] != "partial" or len(request.configs) < 2:
            return result
        return EvalResult(status="mismatch", message="output 0 differs", configs=result.configs[:1],
                          failure={**MISMATCH, "config": request.configs[1]})


def test_a_kernel_correct_everywhere_takes_over_configs_served_by_one_that_was_wrong_elsewhere(tmp_path):
    """Played LLM 46b: turn 2's float32 batchnorm passed config 1 and computed wrong values on config 2, turn 3 was
    drafted and checked for the configs left only, and the export kept turn 2's kernel for config 1."""
    worker = WrongAt320()
    loop, outcome, _, _ = run(tmp_path, [[cand("partial", 0.5)], [cand("ok", 2.0)]], worker=worker, candidates=1,
                              device="cpu", max_turns=2)
    checked = [(Path(r.kernel_path).parent.name, [c["C"] for c in r.configs]) for r in worker.requests]
    assert checked == [("t1-c0", [96, 320]), ("t2-c0", [320]), ("t2-c0", [96])]
    assert {k: b.attempt_id for k, b in loop.best.items()} == {"M=16384,C=96": "t2-c0", "M=16384,C=320": "t2-c0"}


def test_a_turn_after_a_partial_success_says_which_configs_it_checks_and_which_keep_their_kernel(tmp_path):
    """Played LLM, GPU turn 2 (issue 19): the prompt listed 3 of 5 configs as "checked on" while the timings covered
    all 5, and the player could not tell why; the turn now says that the others keep the kernel that met them."""
    loop = Loop(options(candidates=1, max_turns=1), RunStore.create(tmp_path / "run", {}),
                ScriptedDrafter([[cand("ok")]]), _SlowAtC320())
    loop.run()
    prompt = loop.task(2).messages[1]["content"]
    assert "Configs your kernel is checked on:\n- M=16384, C=320\n" in prompt
    assert ("This turn checks your module (at these configs and their tail sizes) and times it on the 1 config(s) "
            "above, the ones that still miss the target; the other 1 keep the earlier kernel that met it "
            "(M=16384, C=96)") in prompt


def test_the_last_turns_feedback_reaches_the_prompt_whole_and_older_feedback_is_cut_at_a_line():
    """Played LLM, GPU turn 2: the cost lines of the slowest config were cut mid-token ("X 128-b ... [647 characters
    cut]"). The last turn's feedback now comes whole; older feedback is cut at a line boundary."""
    lines = [f"- M=16384, N={n}: main_kernel: 8192 blocks x 128 threads, 64 registers/thread; global accesses: X "
             f"128-bit, R 128-bit" + " ..." * 10 for n in range(100, 140)]
    feedback = "\n".join(lines)
    history = [AttemptSummary(attempt_id=f"t{t}-c0", turn=t, source="x = 1\n", status="ok", feedback=feedback)
               for t in (1, 2)]
    messages = build_messages(device="cuda", reference_path=REFERENCE, reference_source=Path(REFERENCE).read_text(),
                              configs=[{"M": 37, "C": 96}], turn=3, n=1, history=history, best=None, examples=[])
    user = messages[1]["content"]
    recent = user.split("## Your candidates of turn 2")[1]
    assert lines[-1] in recent and "cut]" not in recent
    older = user.split("## Earlier attempts (feedback only)")[1].split("## Your candidates")[0]
    kept = older.split("... [")[0].rstrip("\n").splitlines()[-1]
    assert kept in lines and "more line(s)" in older


def test_the_next_turn_says_what_the_autotuning_found_per_config(tmp_path):
    """Played LLM, GPU turn 2 (issue 19): nothing said whether TUNABLES were swept or which values won, so the model
    could not tell the timings of the module as written from the tuned ones."""
    loop = Loop(options(candidates=1, max_turns=1), RunStore.create(tmp_path / "run", {}),
                ScriptedDrafter([[cand("ok", 2.0, tunables=[None, 1, 2, 4, 8])]]), FakeWorker())
    loop.run()
    prompt = loop.task(2).messages[1]["content"]
    assert "Autotuning of TUNABLES: 4 variant(s) screened; the fastest fully checked variant per config:" in prompt
    assert "- M=16384,C=96: BLOCK=2, " in prompt and "- M=16384,C=320: BLOCK=4, " in prompt
    # the fake worker's BLOCK=2 at C=96 takes 0.5 of the module's time (BLOCK=None): a gain of x2 over it
    assert "x2.000 over the module as written" in prompt.split("- M=16384,C=96: BLOCK=2, ")[1].splitlines()[0]


class SlowerWhenCheckedAgain(FakeWorker):
    """Re-checks of logged results time 3x slower, as a noisy short kernel can."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        result = super().evaluate(request)
        if Path(request.kernel_path).parent.name == "reverify":
            for c in result.configs:
                c.candidate = c.candidate.model_copy(update={"median_ms": c.candidate.median_ms * 3})
                c.speedup_eager, c.speedup_compiled = c.speedup_eager / 3, c.speedup_compiled / 3
        return result


def test_a_resumed_run_drafts_on_when_a_logged_timing_does_not_hold(tmp_path):
    turns = [[cand("ok", 0.5)], [cand("ok", 0.4)]]
    run(tmp_path, turns, candidates=1)
    _rewrite_events(tmp_path / "run", lambda events: events[:-1])  # cut before "finished"
    loop, outcome, drafter, worker = run(tmp_path, turns, worker=SlowerWhenCheckedAgain(), candidates=1)
    assert [Path(r.kernel_path).parent.name for r in worker.requests][:1] == ["reverify"]
    assert [c.turn for c in drafter.calls] == [2]  # 2.2x logged, 0.73x checked again: turn 2 is drafted
    assert outcome.outcome == "target_met" and outcome.turns == 2
    assert {b.attempt_id for b in outcome.best.values()} == {"t2-c0"}
