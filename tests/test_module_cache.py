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
    loaded, source, _ = module_cache.load(key, again)
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


def test_a_stored_module_reads_back_as_the_same_cuda_in_a_fresh_process(tmp_path, monkeypatch):
    """IR nodes are pickled as (class, field values) (``module_cache.dump``); reading needs nothing the writing
    process set up, hardware indices come back as the module's own objects, and the CUDA is the same text."""
    from tileagent.compiler.ir.visit import walk
    from tileagent.compiler.tir import SPECIAL_VARS

    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path))
    func = _program(160)
    module = lower(func, infer_layouts(func))
    key = module_cache.cache_key(func, "cuda", "sm_90a")
    module_cache.store(key, module, generate(module))
    module_cache._field_names.cache_clear()  # as in a process that never wrote an entry
    monkeypatch.setattr(module_cache, "_REDUCERS", None)
    loaded, source, _ = module_cache.load(key, _program(160))
    assert generate(loaded) == source == generate(module)
    names = {v.name for v in SPECIAL_VARS}
    found = [e for s in walk(loaded.kernels[0].body) for e in _vars(s) if getattr(e, "name", None) in names]
    assert found and all(any(e is v for v in SPECIAL_VARS) for e in found)


def _vars(stmt):
    from tileagent.compiler.ir.expr import Var
    from tileagent.compiler.ir.visit import stmt_exprs

    out, stack = [], list(stmt_exprs(stmt))
    while stack:
        e = stack.pop()
        if isinstance(e, Var):
            out.append(e)
        for name in getattr(type(e), "__slots__", ()):
            child = getattr(e, name, None)
            stack += [c for c in (child if isinstance(child, tuple) else (child,)) if hasattr(c, "dtype")]
    return out
