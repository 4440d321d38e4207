"""TileLang's low-level statements under ``tileagent.compat``: hints without effect (``T.set_max_nreg``), block
barriers TileAgent places itself (``T.sync_threads``), and injected CUDA (``T.import_source`` / ``T.call_extern``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from tileagent import compat
from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError


@pytest.fixture
def tilelang():
    compat.install()
    import tilelang as tl

    yield tl
    compat.uninstall()


def _write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_sync_threads_and_set_max_nreg_are_statements_the_compiler_needs_no_help_with(tilelang, tmp_path, target):
    """TileLang's DSA top-k reduce-sum puts T.sync_threads() between T.Parallel phases over shared memory; TileAgent
    places those barriers itself (the SIMT emulator raises on a shared-memory race without one)."""
    ns = load_script(_write(tmp_path, "sync.py", """\
        import tilelang
        import tilelang.language as T


        def reverse_scale(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=64) as bx:
                    T.set_max_nreg(240, 1)
                    s = T.alloc_shared((N,), "float32")
                    for i in T.Parallel(N):
                        s[i] = A[i] * 2.0
                    T.sync_threads()
                    for k in T.serial(2):
                        for i in T.Parallel(N):
                            if i < N - 1 - i:
                                t = s[i]
                                s[i] = s[N - 1 - i] + k
                                s[N - 1 - i] = t + k
                        T.sync_threads()
                    T.copy(s, B)
            return main
        """))
    kernel = tilelang.compile(ns["reverse_scale"](256), out_idx=[1], target=target)
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a * 2 + 1)


def test_named_barrier_is_E701_at_its_line(tilelang, tmp_path):
    ns = load_script(_write(tmp_path, "named.py", """\
        import tilelang
        import tilelang.language as T


        def copy(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=64) as bx:
                    T.sync_threads(3, 32)
                    T.copy(A, B)
            return main
        """))
    with pytest.raises(CompileError) as info:
        tilelang.compile(ns["copy"](64), out_idx=[1], target="cpu")
    assert info.value.code == "E701" and info.value.span.line == 9
    assert info.value.message == ("T.sync_threads(3, 32): named barriers over part of the block are not supported "
                                  "by TileAgent")
