"""Scale-out on one host: several evaluation workers (CPU interpreters here, one per GPU on a GPU host) give the
same results as one, spread the configs, survive a killed worker, and `--gpus` is checked."""

import os
import signal
import textwrap
import threading
import time

import pytest

from tests.pool_fakes import pids, without_pids
from tileagent.evaluator.records import ConfigResult, EvalRequest, EvalResult
from tileagent.pool import GpuSelectionError, Pool, SlotDead, local_slots, merge, physical_gpu, resolve_gpus

TRACED = "tests.pool_fakes:traced_evaluate"
REFERENCE = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
"""
CANDIDATES = {
    "honest": "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n",
    # wrong only for n = 5 and 7
    "wrong_5_7": "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                 "        return x + x + (1 if x.numel() in (5, 7) else 0)\n",
    # kills its worker the first time it sees n = 5 (a marker file in the test's folder says it did), then is fine
    "dies_once": """
        import os, signal
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                marker = MARKER
                if x.numel() == 5 and not os.path.exists(marker):
                    open(marker, "w").close()
                    os.kill(os.getpid(), signal.SIGKILL)
                return x + x
    """,
}


@pytest.fixture
def files(tmp_path):
    (tmp_path / "ref.py").write_text(REFERENCE)
    for name, text in CANDIDATES.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text).replace("MARKER", repr(str(tmp_path / "died"))))
    return tmp_path


def request(files, candidate, configs, **kw):
    return EvalRequest(kernel_path=str(files / f"{candidate}.py"), reference_path=str(files / "ref.py"),
                       device="cpu", configs=configs, compile_timeout_s=30, run_timeout_s=10, **kw)


@pytest.fixture(scope="module")
def pools():
    """One worker and three workers (CPU interpreters), shared by the tests of this module."""
    with Pool(local_slots(["cpu"], TRACED)) as one, Pool(local_slots(["cpu"] * 3, TRACED)) as three:
        yield one, three


def test_three_workers_give_the_results_of_one_and_spread_the_configs(files, pools):
    one, three = pools
    configs = [{"n": n, "sleep": 0.1} for n in (2, 3, 4, 6, 8, 9)]
    cases = [("honest", {}), ("wrong_5_7", {"keep_going": True}), ("wrong_5_7", {})]
    for candidate, kw in cases:
        cfgs = configs + [{"n": 5}, {"n": 10}, {"n": 7}] if candidate == "wrong_5_7" else configs
        single, multi = one.evaluate(request(files, candidate, cfgs, **kw)), \
            three.evaluate(request(files, candidate, cfgs, **kw))
        assert without_pids(multi) == without_pids(single), (candidate, kw)
    honest = three.evaluate(request(files, "honest", configs))
    assert honest.status == "ok" and [c.config["n"] for c in honest.configs] == [2, 3, 4, 6, 8, 9]
    assert len(set(pids(honest))) == 3  # every worker ran some config
    kept = three.evaluate(request(files, "wrong_5_7", configs + [{"n": 5}, {"n": 10}, {"n": 7}], keep_going=True))
    assert kept.status == "mismatch" and "config {'n': 5}" in kept.message
    assert [c.correct for c in kept.configs] == [True] * 6 + [False, True, False]
    stopped = three.evaluate(request(files, "wrong_5_7", [{"n": 2}, {"n": 5}, {"n": 3}, {"n": 7}]))
    assert stopped.status == "mismatch" and [c.config["n"] for c in stopped.configs] == [2, 5]
    usage = three.report()["workers"]
    assert [u["worker"] for u in usage] == ["cpu", "cpu#1", "cpu#2"] and all(u["busy_s"] > 0 for u in usage)


def test_requests_from_several_threads_at_once_run_side_by_side(files, pools):
    _, three = pools
    requests = [request(files, "honest", [{"n": 2, "sleep": 1.0}]) for _ in range(3)]
    start = time.monotonic()
    results = three.evaluate_many(requests)
    assert all(r.status == "ok" for r in results) and len({pids(r)[0] for r in results}) == 3
    assert time.monotonic() - start < 2.5  # three 1 s requests on three workers, not 3 s in a row


def test_a_killed_worker_is_restarted_and_its_request_retried_on_another(files, pools):
    _, three = pools
    before = [u["retried"] for u in three.report()["workers"]]
    result = three.evaluate(request(files, "dies_once", [{"n": 2}, {"n": 5}, {"n": 3}]))
    assert result.status == "ok", result.message
    assert [c.config["n"] for c in result.configs] == [2, 5, 3] and all(c.correct for c in result.configs)
    after = three.report()["workers"]
    crashed = [k for k, u in enumerate(after) if u["retried"] > before[k]]
    assert len(crashed) == 1 and sum(s.restarts for s in three.slots) >= 1
    # one worker: the same worker restarts and runs it again
    (files / "died").unlink()
    one = pools[0]
    again = one.evaluate(request(files, "dies_once", [{"n": 2}, {"n": 5}]))
    assert again.status == "ok" and one.report()["workers"][0]["retried"] == 1


def test_a_request_that_crashes_twice_reports_the_crash(files, pools):
    (files / "always.py").write_text("import os, signal\nimport torch\nclass ModelNew(torch.nn.Module):\n"
                                     "    def forward(self, x):\n        os.kill(os.getpid(), signal.SIGKILL)\n")
    _, three = pools
    result = three.evaluate(request(files, "always", [{"n": 2}]))
    assert result.status == "crash" and "SIGKILL" in result.message


class Flaky:
    """A slot that is lost for good after its first part (as a Ray actor past its restarts)."""

    def __init__(self, name):
        self.name, self.calls = name, 0

    def evaluate(self, request):
        self.calls += 1
        if self.name == "lost":
            raise SlotDead("the actor died")
        time.sleep(0.05)
        return EvalResult(status="ok", configs=[ConfigResult(config=c, correct=True) for c in request.configs],
                          device=self.name)

    def close(self):
        pass


def test_a_slot_lost_for_good_leaves_the_pool_and_its_part_runs_elsewhere():
    with Pool([Flaky("lost"), Flaky("fine")]) as pool:
        req = EvalRequest(kernel_path="/x/attempts/t1-c0/candidate.py", reference_path="/x/ref.py",
                          configs=[{"n": k} for k in range(6)])
        result = pool.evaluate(req)
        assert result.status == "ok" and [c.config["n"] for c in result.configs] == list(range(6))
        assert [u["alive"] for u in pool.report()["workers"]] == [False, True]
    with Pool([Flaky("lost")]) as pool:
        result = pool.evaluate(EvalRequest(kernel_path="k.py", reference_path="r.py", configs=[{"n": 1}]))
        assert result.status == "internal_error" and "SlotDead: the actor died" in result.message


def test_merge_keeps_the_single_worker_semantics():
    ok = lambda n: EvalResult(status="ok", configs=[ConfigResult(config={"n": n}, correct=True)], device="cpu")  # noqa
    bad = EvalResult(status="timeout", message="hung", configs=[], device="cpu")
    req = EvalRequest(kernel_path="k", reference_path="r", keep_going=True)
    merged = merge(req, [ok(1), bad, ok(3)])
    assert merged.status == "timeout" and [c.config["n"] for c in merged.configs] == [1]  # a timeout ends it


@pytest.mark.parametrize("gpus, device, count, want", [
    ("all", "cuda", 3, ["cuda:0", "cuda:1", "cuda:2"]),
    ("2", "cuda", 3, ["cuda:0", "cuda:1"]),
    ("0,2", "cuda", 3, ["cuda:0", "cuda:2"]),
    ("2,", "cuda", 3, ["cuda:2"]),
    ("all", "cuda:1", 3, ["cuda:1"]),
    ("all", "cpu", 0, ["cpu"]),
    ("3", "cpu", 0, ["cpu", "cpu", "cpu"]),
])
def test_gpus_selects_the_workers(gpus, device, count, want):
    assert resolve_gpus(gpus, device, count=count) == want


@pytest.mark.parametrize("gpus, device, count, message", [
    ("4", "cuda", 3, "--gpus 4: this host has 3 visible GPU(s)"),
    ("0,3", "cuda", 3, "--gpus 0,3: GPU 3 does not exist; this host has 3 visible GPU(s) (0 to 2)"),
    ("1,1", "cuda", 3, "--gpus 1,1: a GPU is named twice (one worker per GPU)"),
    ("0", "cuda", 3, "--gpus 0: a count must be at least 1 (one GPU by index: '0,' or --device cuda:0)"),
    ("two", "cuda", 3, "--gpus expects all, a count N or a list of GPU indices such as 0,2,5; got 'two'"),
    ("0,1", "cpu", 0, "--gpus 0,1: the device is cpu, which has no GPU indices; give a count of CPU workers"),
    ("2", "cuda:1", 3, "--gpus 2 with --device cuda:1: pick the GPUs with one of them"),
    ("all", "cuda", 0, "no GPU is visible (torch.cuda.device_count() is 0); use --device cpu"),
])
def test_bad_gpus_say_what_is_wrong(gpus, device, count, message):
    with pytest.raises(GpuSelectionError) as e:
        resolve_gpus(gpus, device, count=count)
    assert message in str(e.value)


def test_each_worker_sees_only_its_own_gpu():
    assert physical_gpu("cuda:1", visible="") == "1"
    assert physical_gpu("cuda:1", visible="4,6,7") == "6"  # the parent's own CUDA_VISIBLE_DEVICES is respected
    assert physical_gpu("cuda:0", visible="GPU-abc,GPU-def") == "GPU-abc"


def test_eight_gpu_workers_each_alone_on_its_gpu(monkeypatch):
    """Issue 17's path on the CPU: 8 workers for cuda:0..7 (the evaluate function touches no GPU). Each sees only its
    own GPU, mapped through the parent's CUDA_VISIBLE_DEVICES; no worker runs two configs at once; all take part."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(str(10 + k) for k in range(8)))
    devices = resolve_gpus("all", "cuda", count=8)
    with Pool(local_slots(devices, "tests.pool_fakes:gpu_evaluate")) as pool:
        assert [s.name for s in pool.slots] == [f"cuda:{k}" for k in range(8)]
        req = EvalRequest(kernel_path="/run/attempts/t1-c0/candidate.py", reference_path="/ref.py", device="cuda",
                          configs=[{"C": c, "sleep": 0.3} for c in range(24)])
        result = pool.evaluate(req)
        assert result.status == "ok" and [c.config["C"] for c in result.configs] == list(range(24))
        notes = [dict(n.split(" ", 1) for n in c.notes if not n.startswith("ran in")) for c in result.configs]
        gpu_of_pid = {}
        for c, n in zip(result.configs, notes):
            gpu_of_pid.setdefault(pids(EvalResult(status="ok", configs=[c]))[0], set()).add(n["gpu"])
            assert n["device"] == "cuda"
        assert all(len(g) == 1 for g in gpu_of_pid.values())  # a worker keeps its GPU
        assert sorted(g.pop() for g in gpu_of_pid.values()) == [str(10 + k) for k in range(8)]  # one worker per GPU
        by_pid = {}
        for c, n in zip(result.configs, notes):
            start, end = map(float, n["ran"].split())
            by_pid.setdefault(pids(EvalResult(status="ok", configs=[c]))[0], []).append((start, end))
        for spans in by_pid.values():
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # one config at a time per worker / GPU
        usage = pool.report()["workers"]
        assert all(u["requests"] >= 1 for u in usage) and sum(u["requests"] for u in usage) == 24


def test_autotuning_with_several_workers_screens_variants_at_once_and_picks_the_same(tmp_path):
    from tests.test_loop import FakeWorker, cand, run

    class Parallel(FakeWorker):
        parallel = 4

        def __init__(self):
            super().__init__()
            self.lock, self.running, self.most = threading.Lock(), 0, 0

        def evaluate(self, request):
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            time.sleep(0.05)
            try:
                return super().evaluate(request)
            finally:
                with self.lock:
                    self.running -= 1

    script = [[cand("ok", 2.0, tunables=[None, 1, 2, 4, 8])]]
    one_loop, one, _, _ = run(tmp_path / "one", script, max_turns=1)
    many_loop, many, _, worker = run(tmp_path / "many", script, worker=Parallel(), max_turns=1)
    assert worker.most == 4  # four variants screened at once
    assert {k: (b.attempt_id, b.tunables) for k, b in many.best.items()} == \
        {k: (b.attempt_id, b.tunables) for k, b in one.best.items()}
    assert many.best["M=16384,C=96"].tunables == {"BLOCK": 2}
    kinds = lambda loop: sorted((e["event"], e.get("variant"), e.get("phase"))  # noqa: E731
                                for e in loop.store.events() if e["event"] in ("variant_evaluated", "tuned"))
    assert kinds(many_loop) == kinds(one_loop)
