"""``tileagent batch --ray``: the CLI on a local Ray cluster with two fake GPUs gives the report of local workers.

Its own module (and cluster): the actors of tests/test_ray_backend.py's module-wide pool hold both fake GPUs until that
module ends, so the CLI's actors could not be placed there."""

import json

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: 2 CPUs, 2 fake GPUs, nothing else placed on it."""
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def verdicts(report: dict) -> list[tuple]:
    """What a batch report decides per config; errors and tail sizes come from fresh random inputs on every run."""
    return [(c["config"], c["evaluated_at"], c["attempt_id"], c["correct"], c["meets_target"]) for c in report["configs"]]


def test_cli_batch_on_ray_gives_the_report_of_local_workers(tmp_path, monkeypatch, cluster):
    from tests.test_cli_generate import CANDIDATE, RMSNORM, WRONG, events, invoke, script

    monkeypatch.setenv("TILEAGENT_ARCHIVE", str(tmp_path / "archive"))
    reports = {}
    for how in (["--gpus", "1"], ["--ray", "auto"]):
        run = tmp_path / how[0].strip("-")
        result = invoke("batch", RMSNORM, "--grid", "C=96,160", "--device", "cpu", "--seeds", "1", "--no-archive",
                        "--candidates", "1", "--provider", script(tmp_path, [[WRONG], [CANDIDATE]], name=f"{how[0]}.j"),
                        *how, "--out", run)
        assert result.exit_code == 0, result.output
        reports[how[0]] = json.loads((run / "report.json").read_text())
        evaluated = [e for e in events(run) if e["event"] == "evaluated"]
        assert [e["result"]["status"] for e in evaluated] == ["mismatch", "ok"]
    assert verdicts(reports["--gpus"]) == verdicts(reports["--ray"])
    workers = reports["--ray"]["workers"]["workers"]
    assert sorted(w["worker"].rsplit(":", 1)[1] for w in workers) == ["gpu0", "gpu1"]
    assert sum(w["requests"] for w in workers) == 4  # two attempts x two configs
