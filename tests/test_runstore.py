"""The run store: an append-only event log that survives kills, atomic files, clear errors for unusable runs."""

import json

import pytest

from tileagent.runstore import RunStore, RunStoreError, config_key, write_atomic


def test_events_round_trip_in_order(tmp_path):
    store = RunStore.create(tmp_path / "run", {"reference": "x.py"})
    store.append("drafted", turn=1, drafts=[{"source": "a"}])
    store.append("evaluated", attempt_id="t1-c0", result=None)
    events = store.events()
    assert [e["event"] for e in events] == ["drafted", "evaluated"]
    assert events[0]["drafts"] == [{"source": "a"}] and isinstance(events[0]["t"], float)
    assert RunStore.open(tmp_path / "run").options == {"reference": "x.py"}


def test_a_torn_last_line_is_ignored_and_cut_by_the_next_append(tmp_path):
    store = RunStore.create(tmp_path / "run", {})
    store.append("drafted", turn=1)
    with open(store.events_path, "a") as f:
        f.write('{"event": "evaluated", "attempt_id": "t1-')  # a kill in the middle of a write
    assert [e["event"] for e in store.events()] == ["drafted"]
    store.append("evaluated", attempt_id="t1-c0")
    lines = store.events_path.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["drafted", "evaluated"]


def test_a_complete_object_without_its_newline_counts_as_torn(tmp_path):
    store = RunStore.create(tmp_path / "run", {})
    store.append("drafted", turn=1)
    with open(store.events_path, "a") as f:
        f.write('{"event": "evaluated"}')
    assert [e["event"] for e in store.events()] == ["drafted"]


def test_a_corrupt_line_in_the_middle_is_skipped_with_a_warning_naming_the_line(tmp_path, caplog):
    store = RunStore.create(tmp_path / "run", {})
    store.append("drafted", turn=1)
    with open(store.events_path, "a") as f:
        f.write("garbage\n[1, 2]\n{\"event\": 3}\n")
    store.append("evaluated", attempt_id="t1-c0")
    assert [e["event"] for e in store.events()] == ["drafted", "evaluated"]
    warned = [r.getMessage() for r in caplog.records if r.name == "tileagent.runstore"]
    assert warned == [f"{store.events_path}:{n}: skipping a line that is not an event (a JSON object with 'event'): "
                      f"{text!r}" for n, text in ((2, b"garbage"), (3, b"[1, 2]"), (4, b'{"event": 3}'))]


def test_create_refuses_an_existing_run_and_open_refuses_a_non_run(tmp_path):
    RunStore.create(tmp_path / "run", {})
    with pytest.raises(RunStoreError, match=r"already holds a run; continue it with --resume"):
        RunStore.create(tmp_path / "run", {})
    with pytest.raises(RunStoreError, match=r"is not a run directory \(no run.json\)"):
        RunStore.open(tmp_path)


def test_open_refuses_another_format_version(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"format_version": 99, "options": {}}))
    with pytest.raises(RunStoreError, match=r"run format version 99; this tileagent reads version 1"):
        RunStore.open(tmp_path)


def test_write_atomic_replaces_whole_files_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "a" / "b.txt"
    write_atomic(path, "one")
    write_atomic(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["b.txt"]


def test_config_key_keeps_the_config_order():
    assert config_key({"M": 37, "C": 96}) == "M=37,C=96"
    assert config_key({}) == "default"
