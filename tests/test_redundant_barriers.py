"""Barriers the next barrier covers are dropped (compiler.lower.redundant_barriers): a reduction's closing barrier
followed by register work and stores into write-only tensors, then the barrier before the next shared write, keeps
only the second. Kept: when a shared access, a store into a tensor the kernel reads, or a store into a tensor also
written elsewhere comes between, and with TILEAGENT_DROP_BARRIERS=0. Numbers (and the shared-memory race detector)
through the SIMT emulator."""

import pytest
import torch

import tileagent
import tileagent.language as T


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _normalize(M, N, between="stats"):
    """Y = x / sum(x) row-wise through a shared output tile, the row sums also stored to S (write-only). ``between``:
    what else runs between the reduction and the output tile's write: "stats" nothing more, "shared" a read of the
    output tile, "read" a store into X's own row 0 (a tensor the kernel reads), "twice" a second store into S after
    the tile's write."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=256) as _:
            x = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            o = T.alloc_shared((M, N), "float32")
            T.copy(X, o)
            T.copy(o, x)
            T.reduce_sum(x, s, dim=1)
            for i in T.Parallel(M):
                S[i] = s[i]
            if between == "shared":
                for i in T.Parallel(M):
                    s[i] = s[i] + o[i, 0] * 0
            if between == "read":
                for i in T.Parallel(M):
                    X[i, 0] = s[i]
            for i, j in T.Parallel(M, N):
                o[i, j] = x[i, j] / s[i]
            T.copy(o, Y)
            if between == "twice":
                for i in T.Parallel(M):
                    S[i] = s[i] * 2
    return main


def _barriers(kernel) -> int:
    return kernel.get_ir("thread").count("T.sync_threads()")


def test_the_reductions_closing_barrier_goes(monkeypatch):
    M, N = 2, 512
    kept = tileagent.compile(_normalize(M, N), target="sim")
    monkeypatch.setenv("TILEAGENT_DROP_BARRIERS", "0")
    every = tileagent.compile(_normalize(M, N), target="sim")
    assert _barriers(kept) == _barriers(every) - 1
    # the partials' fold, the row sums into S, then the one barrier before the output tile's write
    assert "s[0] = red_s1[0]\n    if tid % 128 == 0:\n        S[tid // 128 % 2] = s[0]\n    T.sync_threads()" in \
        kept.get_ir("thread")
    x = torch.rand(M, N) + 0.5
    y, s = torch.full((M, N), float("nan")), torch.full((M,), float("nan"))
    kept(x, y, s)  # the emulator's race detector runs too
    torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, x / x.sum(1, keepdim=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("between", ["shared", "read", "twice"])
def test_a_barrier_that_orders_something_stays(monkeypatch, between):
    M, N = 2, 512
    kernel = tileagent.compile(_normalize(M, N, between), target="sim")
    monkeypatch.setenv("TILEAGENT_DROP_BARRIERS", "0")
    every = tileagent.compile(_normalize(M, N, between), target="sim")
    # the same barriers as the plain normalization has without the rewrite: none was dropped
    assert _barriers(kernel) == _barriers(every) == _barriers(tileagent.compile(_normalize(M, N), target="sim"))
