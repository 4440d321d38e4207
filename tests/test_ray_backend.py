"""Evaluation on Ray: a local cluster with two fake GPUs (``ray.init(num_cpus=2, num_gpus=2)``), one actor per GPU,
each running a CPU interpreter worker. The same results as one local worker; Ray places one actor per GPU; a crashed
evaluator inside an actor is retried; a killed actor is restarted by Ray and its call run again; tileagent never
imports Ray unless --ray is given."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO
from tests.pool_fakes import pids, without_pids
from tests.test_pool import REFERENCE, TRACED, request  # noqa: F401 - the files fixture's candidates
from tests.test_pool import files  # noqa: F401 - fixture
from tileagent.pool import GpuSelectionError, Pool, local_slots

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: 2 CPUs, 2 fake GPUs."""
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def pools(cluster):
    from tileagent.ray_backend import ray_slots

    slots, done = ray_slots("auto", "cpu", "all", evaluate_fn=TRACED)
    with Pool(local_slots(["cpu"], TRACED)) as one, Pool(slots, on_close=done) as on_ray:
        yield one, on_ray


def test_one_actor_per_fake_gpu_gives_the_results_of_one_local_worker(files, pools):  # noqa: F811
    one, on_ray = pools
    assert sorted(s.name.rsplit(":", 1)[1] for s in on_ray.slots) == ["gpu0", "gpu1"]  # Ray placed one per GPU
    configs = [{"n": n, "sleep": 0.2} for n in (2, 3, 4, 6)]
    for candidate, kw in [("honest", {}), ("wrong_5_7", {"keep_going": True}), ("wrong_5_7", {})]:
        cfgs = configs + [{"n": 5}, {"n": 7}] if candidate == "wrong_5_7" else configs
        local, remote = one.evaluate(request(files, candidate, cfgs, **kw)), \
            on_ray.evaluate(request(files, candidate, cfgs, **kw))
        assert without_pids(remote) == without_pids(local), (candidate, kw)
    result = on_ray.evaluate(request(files, "honest", configs))
    assert len(set(pids(result))) == 2  # both actors' workers ran configs


def test_paths_in_results_name_the_drivers_files(files, pools):  # noqa: F811
    (files / "broken.py").write_text("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                                     "        raise ValueError('nope')\n")
    _, on_ray = pools
    result = on_ray.evaluate(request(files, "broken", [{"n": 2}]))
    assert result.status == "candidate_error" and "tileagent-ray-" not in result.message
    assert "the candidate raised ValueError: nope (line 4" in result.message
    (files / "ref.py").write_text(REFERENCE.replace("return x * 2", "return x * 2 + undefined_name"))
    result = on_ray.evaluate(request(files, "honest", [{"n": 2}]))
    assert result.status == "internal_error" and f"{files / 'ref.py'}:5" in result.message, result.message
    (files / "ref.py").write_text(REFERENCE)


def test_a_crashed_evaluator_inside_an_actor_is_retried(files, pools):  # noqa: F811
    _, on_ray = pools
    result = on_ray.evaluate(request(files, "dies_once", [{"n": 2}, {"n": 5}]))
    assert result.status == "ok" and all(c.correct for c in result.configs)
    assert sum(u["retried"] for u in on_ray.report()["workers"]) == 1


def test_a_killed_actor_is_restarted_by_ray_and_its_call_run_again(files, pools):  # noqa: F811
    _, on_ray = pools
    slot = on_ray.slots[0]
    pid = ray.get(slot.actor.where.remote())["pid"]
    out = {}
    thread = threading.Thread(target=lambda: out.update(r=slot.evaluate(request(files, "honest",
                                                                                [{"n": 3, "sleep": 4}]))))
    thread.start()
    time.sleep(1.5)
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=180)
    assert out["r"].status == "ok" and out["r"].configs[0].correct
    assert ray.get(slot.actor.where.remote())["pid"] != pid  # a fresh actor process


def test_asking_for_more_gpus_than_the_cluster_has_is_refused(cluster):
    from tileagent.ray_backend import ray_slots

    with pytest.raises(GpuSelectionError, match=r"--gpus 3: the Ray cluster has 2 GPU\(s\)"):
        ray_slots("auto", "cpu", "3")
    with pytest.raises(GpuSelectionError, match=r"--gpus 0,1: on Ray, --gpus takes all or a count N"):
        ray_slots("auto", "cpu", "0,1")
