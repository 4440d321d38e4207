

def test_the_archive_lives_in_the_cache_directory_unless_placed_apart(tmp_path, monkeypatch):
    """Played LLM 48: with TILEAGENT_CACHE_DIR set for a session, runs still shared ~/.cache/tileagent/archive, and
    a probe started with an earlier run's kernel."""
    from pathlib import Path

    from tileagent.archive import default_root

    monkeypatch.delenv("TILEAGENT_ARCHIVE", raising=False)
    monkeypatch.delenv("TILEAGENT_CACHE_DIR", raising=False)
    assert default_root() == Path.home() / ".cache" / "tileagent" / "archive"
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache"))
    assert default_root() == tmp_path / "cache" / "archive"
    monkeypatch.setenv("TILEAGENT_ARCHIVE", str(tmp_path / "kept"))
    assert default_root() == tmp_path / "kept"
