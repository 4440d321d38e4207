"""``T.sync_threads(barrier_id, arrive_count)``: named barriers (``bar.sync id, count``) over the threads of a branch
in per-thread code, as TileLang's DeepSeek top-k selector orders its in-place scan under ``if tx < RADIX:``."""

from __future__ import annotations

import pytest
import torch

from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.errors import KernelFault
from tests.conftest import nvrtc_available, write_source

SCAN = """\
    import tilelang
    import tilelang.language as T


    def scan(n, threads, count, named=True):
        @T.prim_func
        def main(A: T.Tensor((n,), "int32"), B: T.Tensor((n,), "int32")):
            with T.Kernel(1, threads=threads) as bx:
                tx = T.get_thread_binding()
                s = T.alloc_shared((n,), "int32")
                v = T.alloc_var("int32")
                if tx < n:
                    s[tx] = A[tx]
                T.sync_threads()
                if tx < n:
                    for i in T.serial(8):
                        offset = 1 << i
                        if named:
                            T.sync_threads(3, count)
                        if tx >= offset:
                            v = s[tx] + s[tx - offset]
                        if named:
                            T.sync_threads(3, count)
                        if tx >= offset:
                            s[tx] = v
                T.sync_threads()
                if tx < n:
                    B[tx] = s[tx]
        return main
    """


@pytest.fixture
def scan(tilelang, tmp_path):
    return load_script(write_source(tmp_path, "scan.py", SCAN))["scan"]


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_named_barriers_order_a_scan_inside_a_branch_of_half_the_block(tilelang, scan, target):
    kernel = tilelang.compile(scan(256, 512, 256), out_idx=[1], target=target)
    a = torch.randint(-100, 100, (256,), dtype=torch.int32)
    torch.testing.assert_close(kernel(a), torch.cumsum(a, 0).to(torch.int32))


def test_the_emulator_reports_the_race_the_named_barriers_prevent(tilelang, scan):
    kernel = tilelang.compile(scan(256, 512, 256, named=False), out_idx=[1], target="sim")
    with pytest.raises(KernelFault, match="shared-memory race on s"):
        kernel(torch.ones(256, dtype=torch.int32))


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_a_named_barrier_reached_by_other_than_its_count_is_a_fault(tilelang, scan, target):
    kernel = tilelang.compile(scan(256, 512, 128), out_idx=[1], target=target)
    with pytest.raises(KernelFault, match=r"T.sync_threads\(3, 128\) .*reached by 256"):
        kernel(torch.ones(256, dtype=torch.int32))


def test_named_barrier_is_bar_sync_in_cuda_and_compiles(tilelang, scan):
    kernel = tilelang.compile(scan(256, 512, 256), out_idx=[1], target="cuda:sm_90a")
    lines = [ln.strip() for ln in kernel.get_kernel_source().splitlines() if "bar.sync" in ln]
    assert lines == ['asm volatile("bar.sync 3, 256;" ::: "memory");'] * 2
    assert "T.sync_threads(3, 256)" in kernel.get_ir("tile")
    if nvrtc_available():
        assert kernel.cubin("sm_90a")


@pytest.mark.parametrize("args, what", [("0, 256", "barrier id"), ("16, 256", "barrier id"),
                                        ("3, 100", "arrive count"), ("3, 1024", "exceeds the kernel's 512 threads")])
def test_named_barrier_arguments_are_E301_at_the_call(tilelang, tmp_path, args, what):
    with pytest.raises(CompileError) as info:  # the prim_func is parsed where the script defines it
        ns = load_script(write_source(tmp_path, "bad.py", f"""\
        import tilelang
        import tilelang.language as T


        @T.prim_func
        def main(A: T.Tensor((512,), "int32")):
            with T.Kernel(1, threads=512) as bx:
                tx = T.get_thread_binding()
                T.sync_threads({args})
                A[tx] = tx
        """))
        tilelang.compile(ns["main"], target="cpu")
    assert info.value.code == "E301" and info.value.span.line == 9 and what in info.value.message
