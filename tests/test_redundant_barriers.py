"""Barriers that order nothing are dropped (compiler.lower.redundant_barriers).
First rule (the default; alone with TILEAGENT_DROP_BARRIERS=quiet too): a reduction's closing barrier followed by
register work and stores into write-only tensors, then the barrier before the next shared write, keeps only the
second; kept when a shared access, a store into a tensor the kernel reads, or a store into a tensor also written
elsewhere comes between. Second rule (with TILEAGENT_DROP_BARRIERS=sides): a barrier whose sides touch different
memory goes (in a loop's body only one between two others of the body), one between a read and a write of the same
shared bytes (the same tile, or two tiles the arena places on the same bytes) stays.
Nothing goes with TILEAGENT_DROP_BARRIERS=0. Numbers (and the shared-memory race detector) through the SIMT
emulator."""

import pytest
import torch

import tileagent
import tileagent.language as T


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def first_rule(monkeypatch):
    monkeypatch.setenv("TILEAGENT_DROP_BARRIERS", "quiet")


@pytest.fixture
def both_rules(monkeypatch):
    monkeypatch.setenv("TILEAGENT_DROP_BARRIERS", "sides")


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


def test_the_reductions_closing_barrier_goes(monkeypatch, first_rule):
    M, N = 2, 512
    kept = tileagent.compile(_normalize(M, N), target="sim")
    monkeypatch.setenv("TILEAGENT_DROP_BARRIERS", "0")
    every = tileagent.compile(_normalize(M, N), target="sim")
    assert _barriers(kept) == _barriers(every) - 1
    # the partials' fold, the row sums into S, then the one barrier before the output tile's write
    assert "s[0] = red_s1[0]\n    if tid % 128 == 0:\n        S[tid // 128 % 2] = s[0]\n    T.sync_threads()" in \
        kept.get_ir("thread")
    _run_normalize(kept, M, N)


@pytest.mark.parametrize("between", ["shared", "read", "twice"])
def test_a_barrier_that_orders_something_stays(monkeypatch, first_rule, between):
    M, N = 2, 512
    kernel = tileagent.compile(_normalize(M, N, between), target="sim")
    monkeypatch.setenv("TILEAGENT_DROP_BARRIERS", "0")
    every = tileagent.compile(_normalize(M, N, between), target="sim")
    # the same barriers as the plain normalization has without the rewrite: none was dropped
    assert _barriers(kernel) == _barriers(every) == _barriers(tileagent.compile(_normalize(M, N), target="sim"))


def _run_normalize(kernel, M, N):
    x = torch.rand(M, N) + 0.5
    y, s = torch.full((M, N), float("nan")), torch.full((M,), float("nan"))
    kernel(x, y, s)  # the emulator's race detector runs too
    torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, x / x.sum(1, keepdim=True), rtol=1e-5, atol=1e-6)


def test_barriers_whose_sides_touch_different_memory_go(monkeypatch):
    M, N = 2, 512
    monkeypatch.setenv("TILEAGENT_DROP_BARRIERS", "sides")
    kernel = tileagent.compile(_normalize(M, N), target="sim")
    monkeypatch.delenv("TILEAGENT_DROP_BARRIERS")
    first = tileagent.compile(_normalize(M, N), target="sim")
    ir = kernel.get_ir("thread")
    # the copy's barrier (its tile is read only after the reduction's barrier: the rows come from registers) and the
    # one before the output tile's write (the other side read only the scratch) go; the reduction's and the bulk
    # store's stay
    assert (_barriers(first), _barriers(kernel)) == (4, 2)
    assert "o_fwd1[0:+4]\n    x[0:+4] = o_fwd1[0:+4]" in ir and ir.index("T.sync_threads()") > ir.index("scratch_float32[")
    _run_normalize(kernel, M, N)


def test_a_read_then_a_write_of_the_same_tile_keeps_its_barrier(both_rules):
    M, N = 2, 512
    kernel = tileagent.compile(_normalize(M, N, "shared"), target="sim")
    assert "s[0] = s[0] + o[tid // 128 % 2 * 512] * 0.0\n    T.sync_threads()" in kernel.get_ir("thread")
    assert _barriers(kernel) == 3
    _run_normalize(kernel, M, N)


def _two_tiles(M, N):
    """Y = 2 * X reversed + 1 through a shared input tile and a shared output tile whose lives do not overlap (the
    arena places both at the same bytes); each thread reads another thread's element of the input tile."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            a = T.alloc_shared((M, N), "float32")
            b = T.alloc_shared((M, N), "float32")
            x = T.alloc_fragment((M, N), "float32")
            T.copy(X, a)
            for i, j in T.Parallel(M, N):
                x[i, j] = a[M - 1 - i, N - 1 - j] * 2
            for i, j in T.Parallel(M, N):
                b[i, j] = x[i, j] + 1
            T.copy(b, Y)
    return main


def test_tiles_on_the_same_bytes_keep_the_barrier_between_them(both_rules):
    kernel = tileagent.compile(_two_tiles(4, 64), target="sim")
    ir = kernel.get_ir("thread")
    assert "shared a: float32[256] at +0" in ir and "shared b: float32[256] at +0" in ir
    assert "* 2.0\n    T.sync_threads()" in ir  # between the last read of a and the first write of b
    x, y = torch.rand(4, 64), torch.full((4, 64), float("nan"))
    kernel(x, y)  # without that barrier the race detector stops it (b[0] written while a is read)
    torch.testing.assert_close(y, x.flip(0).flip(1) * 2 + 1)


def _rows_in_a_loop(R, N):
    """Y = X / row sums, one row an iteration of a loop, through one shared tile."""

    @T.prim_func
    def main(X: T.Tensor((R, N), "float32"), Y: T.Tensor((R, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            o = T.alloc_shared((N,), "float32")
            x = T.alloc_fragment((N,), "float32")
            s = T.alloc_fragment((1,), "float32")
            for r in T.serial(R):
                T.copy(X[r, 0], o)
                T.copy(o, x)
                T.reduce_sum(x, s, dim=0)
                for j in T.Parallel(N):
                    o[j] = x[j] / s[0]
                T.copy(o, Y[r, 0])
    return main


def test_in_a_loop_only_barriers_between_two_others_of_its_body_go(monkeypatch):
    monkeypatch.setenv("TILEAGENT_DROP_BARRIERS", "sides")
    kernel = tileagent.compile(_rows_in_a_loop(3, 512), target="sim")
    monkeypatch.delenv("TILEAGENT_DROP_BARRIERS")
    first = tileagent.compile(_rows_in_a_loop(3, 512), target="sim")
    body = kernel.get_ir("thread").split("for r in T.serial(3):")[1]
    # kept: the body's first (the previous iteration's bulk store read the tile this one writes), the reduction's
    # and the one before the bulk store; gone: the copy's and the reduction's closing one (their sides touch
    # different memory)
    assert (_barriers(first), _barriers(kernel)) == (5, 3)
    assert body.lstrip().startswith("T.sync_threads()") and "o[tid % 128 * 4:+4] = o_fwd1[0:+4]" in body
    x, y = torch.rand(3, 512) + 0.5, torch.full((3, 512), float("nan"))
    kernel(x, y)  # the race detector runs too
    torch.testing.assert_close(y, x / x.sum(1, keepdim=True), rtol=1e-5, atol=1e-6)
