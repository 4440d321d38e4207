"""The on-disk module cache: same program -> same key; a loaded module runs like a fresh one."""

import torch

from tileagent.compiler import module_cache
from tileagent.compiler.backends import EmulatorBackend
from tileagent.compiler.check import check
from tileagent.compiler.jit import bind_arguments
from tileagent.compiler.layout.infer import infer_layouts
from tileagent.compiler.lower import lower
from tileagent.compiler.targets.cuda import generate
from tests.conftest import REPO, load_module


def _program(C):
    return check(load_module(REPO / "prompts" / "examples" / "rmsnorm_silu.py").rmsnorm_silu.fn(None, C))


def test_key_is_stable_across_parses_and_changes_with_the_program():
    assert module_cache.cache_key(_program(96), "cuda", "sm_90a") == module_cache.cache_key(_program(96), "cuda",
                                                                                             "sm_90a")
    assert module_cache.cache_key(_program(96), "cuda", "sm_90a") != module_cache.cache_key(_program(128), "cuda",
                                                                                             "sm_90a")
    assert module_cache.cache_key(_program(96), "cuda", "sm_90a") != module_cache.cache_key(_program(96), "cuda",
                                                                                             "sm_80")


def test_loaded_module_runs_with_a_new_parse(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path))
    first = _program(96)
    module = lower(first, infer_layouts(first))
    key = module_cache.cache_key(first, "cuda", "sm_90a")
    module_cache.store(key, module, generate(module))
    again = _program(96)
    loaded, source = module_cache.load(key, again)
    assert "rmsnorm" not in source or source.startswith("//")
    x, g = torch.randn(9, 96, dtype=torch.float16), torch.randn(96, dtype=torch.float16)
    y = torch.full_like(x, float("nan"))
    bound, env, _ = bind_arguments(again, (x, g, y), (), "sim")
    EmulatorBackend(loaded, again).run(bound, env)
    ref = load_module(REPO / "prompts" / "examples" / "rmsnorm_silu.py").reference(x, g)
    torch.testing.assert_close(y, ref, rtol=2e-2, atol=2e-2)


def test_corrupt_entry_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path))
    key = module_cache.cache_key(_program(96), "cuda", "sm_90a")
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / f"{key}.pkl").write_bytes(b"not a pickle")
    assert module_cache.load(key, _program(96)) is None


def test_the_key_changes_with_the_compiler_source_not_only_its_version(monkeypatch):
    from tileagent.compiler import module_cache
    from tests.kernels import scale_rows

    func = scale_rows(4, 8)
    before = module_cache.cache_key(func, "cuda", "sm_90a")
    monkeypatch.setattr(module_cache, "compiler_fingerprint", lambda: "other compiler sources")
    assert module_cache.cache_key(func, "cuda", "sm_90a") != before
