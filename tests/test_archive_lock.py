"""tileagent.archive: the read-compare-replace of ``put`` runs under a file lock per key (concurrent runs)."""

import threading

from filelock import FileLock

from tileagent.archive import Archive, ArchiveEntry


def _entry(time_ms, tag="") -> ArchiveEntry:
    return ArchiveEntry(family="rmsnorm", dtype="float16", arch="sm_90a", config={"M": 16384, "C": 320},
                        task="rmsnorm_silu", time_ms=time_ms, source=f"# kernel {time_ms} {tag}\n")


def _put_many(root, times):
    archive = Archive(root)
    for t in times:
        archive.put(_entry(t))


def test_concurrent_puts_keep_the_fastest_kernel_and_matching_files(tmp_path):
    times = [[0.05 - 0.001 * k - 0.0001 * p for k in range(10)] for p in range(4)]
    threads = [threading.Thread(target=_put_many, args=(tmp_path, ts)) for ts in times]  # flock: one per open file
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    (found,) = Archive(tmp_path).find("rmsnorm")
    fastest = min(min(ts) for ts in times)
    assert found.time_ms == fastest and found.source == f"# kernel {fastest} \n"  # entry.json and candidate.py agree


def test_put_waits_for_the_keys_lock(tmp_path, caplog):
    archive = Archive(tmp_path)
    assert archive.put(_entry(0.05))
    where = archive._dir(_entry(0.05))
    with FileLock(where.parent / f".{where.name}.lock"):  # another run is comparing and replacing
        assert not archive.put(_entry(0.01), lock_timeout_s=0.2)
    assert "archive: cannot write" in caplog.text
    assert archive.put(_entry(0.01)) and archive.find("rmsnorm")[0].time_ms == 0.01
