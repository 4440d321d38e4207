"""Shared reads forwarded from the registers a copy went through (compiler.lower.forward_shared): a T.copy of a global
tile into shared memory followed by a T.Parallel reading each thread's own elements reads them from registers, as
NVVM forwards TileLang's stores; nothing is forwarded where another write of the tile comes between, where the read
is not the thread's own run, or past the register budget. Numbers through the SIMT emulator."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.lower.forward_shared import BUDGET_BYTES


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _scale_rows(M, N, rewrite_between=False, dtype="float16"):
    """Y = X * 2 + 1 through a shared row tile read back by a T.Parallel (the layer norm's pattern); with
    ``rewrite_between`` the tile is overwritten (by a second copy from X's next rows) before it is read."""

    @T.prim_func
    def k(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(M // 2, threads=128) as bx:
            S = T.alloc_shared((1, N), dtype)
            f = T.alloc_fragment((1, N), "float32")
            T.copy(X[bx * 2, 0], S)
            if rewrite_between:
                T.copy(X[bx * 2 + 1, 0], S)
            for i, j in T.Parallel(1, N):
                f[i, j] = S[i, j] * 2 + 1
            T.copy(f, Y[bx * 2, 0])
            T.copy(f, Y[bx * 2 + 1, 0])
    return k


@pytest.mark.parametrize("N,lines", [
    (1024, ["float16 S_fwd1[8]",  # 1024 halves over 128 threads: one 16-byte run a thread, no loop
            "S_fwd1[0:+8] = X[tid % 128 * 8 + bx * 2 * 1024:+8]", "S[tid % 128 * 8:+8] = S_fwd1[0:+8]",
            "S_run1[0:+8] = S_fwd1[0:+8]"]),
    (4096, ["float16 S_fwd1[32]",  # four runs a thread: the loops' variables pair up
            "S_fwd1[r1 * 8:+8] = X[tid % 128 * 8 + r1 * 1024 + bx * 2 * 4096:+8]",
            "S[tid % 128 * 8 + r1 * 1024:+8] = S_fwd1[r1 * 8:+8]", "S_run1[0:+8] = S_fwd1[r2 * 8:+8]"]),
])
def test_the_thread_reads_its_own_runs_from_registers(N, lines):
    k = tileagent.compile(_scale_rows(8, N), target="sim")
    ir = k.get_ir("thread")
    for line in lines:
        assert line in ir
    x = torch.randn(8, N, dtype=torch.float16)
    y = torch.full_like(x, float("nan"))
    k(x, y)
    want = (x[0::2] * 2 + 1).float().half()
    assert torch.equal(y[0::2], want) and torch.equal(y[1::2], want)


def test_only_the_last_writer_is_forwarded():
    k = tileagent.compile(_scale_rows(8, 1024, rewrite_between=True), target="sim")
    ir = k.get_ir("thread")
    assert ir.count("float16 S_fwd") == 1 and "S_fwd1[0:+8] = X[tid % 128 * 8 + (bx * 2 + 1) * 1024:+8]" in ir
    x = torch.randn(8, 1024, dtype=torch.float16)
    y = torch.full_like(x, float("nan"))
    k(x, y)
    assert torch.equal(y[0::2], (x[1::2] * 2 + 1).float().half())


def test_switch_and_budget(monkeypatch):
    monkeypatch.setenv("TILEAGENT_FORWARD_SHARED", "0")
    assert "_fwd" not in tileagent.compile(_scale_rows(8, 1024), target="sim").get_ir("thread")
    monkeypatch.delenv("TILEAGENT_FORWARD_SHARED")
    # 8192 halves over 128 threads: 128 bytes a thread, over the budget
    assert BUDGET_BYTES < 128 and "_fwd" not in tileagent.compile(_scale_rows(4, 8192), target="sim").get_ir("thread")


def test_another_threads_elements_are_not_forwarded():
    @T.prim_func
    def k(X: T.Tensor((4, 1024), "float16"), Y: T.Tensor((4, 1024), "float16")):
        with T.Kernel(4, threads=128) as bx:
            S = T.alloc_shared((1024,), "float16")
            f = T.alloc_fragment((1024,), "float32")
            T.copy(X[bx, 0:1024], S)
            for j in T.Parallel(1024):
                f[j] = S[1023 - j]  # reversed: another thread's run
            T.copy(f, Y[bx, 0:1024])

    kernel = tileagent.compile(k, target="sim")
    assert "_fwd" not in kernel.get_ir("thread")
    x = torch.randn(4, 1024, dtype=torch.float16)
    y = torch.zeros_like(x)
    kernel(x, y)
    assert torch.equal(y, x.flip(1))


@pytest.mark.gpu
def test_gpu_forwarded_reads():
    """On a CUDA GPU: the forwarded kernels (one run a thread, four runs) and the one whose tile is rewritten between
    give the numbers torch does."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for N, rewrite in ((1024, False), (4096, False), (1024, True)):
        k = tileagent.compile(_scale_rows(4096, N, rewrite_between=rewrite), target="cuda")
        assert "_fwd" in k.get_ir("thread")
        x = torch.randn(4096, N, dtype=torch.float16, device="cuda")
        y = torch.full_like(x, float("nan"))
        k(x, y)
        torch.cuda.synchronize()
        want = (x[1::2] if rewrite else x[0::2]) * 2 + 1
        assert torch.equal(y[0::2], want.float().half()) and torch.equal(y[1::2], want.float().half()), (N, rewrite)
