"""Reductions in a row that go through shared memory share one round (compiler.lower.reduce.fused_runs): every
partial is written, one barrier, every reduction folds its own, one barrier; the scratch holds all of them side by
side. Not fused: a reduction of another's result, two into one destination, different accumulation dtypes, or with
TILEAGENT_FUSE_REDUCTIONS=0. Numbers through the SIMT emulator against torch."""

import re

import pytest
import torch

import tileagent
import tileagent.language as T


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _nan(*shape):
    return torch.full(shape, float("nan"))


def _sum_and_sumsq(M, N, threads):
    """LayerNorm's statistics as TileLang's example computes them: the row sums of x and of x * x."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32"), Q: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads) as _:
            x = T.alloc_fragment((M, N), "float32")
            sq = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            q = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(M, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(x, s, dim=1)
            T.reduce_sum(sq, q, dim=1)
            T.copy(s, S)
            T.copy(q, Q)

    return main


def _scratch_floats(kernel) -> int:
    return int(re.search(r"float\* scratch_float32 = .*// (\d+) x float", kernel.get_kernel_source()).group(1))


@pytest.mark.parametrize("fuse", [True, False])
def test_two_row_sums_share_one_round(monkeypatch, fuse):
    if not fuse:
        monkeypatch.setenv("TILEAGENT_FUSE_REDUCTIONS", "0")
    kernel = tileagent.compile(_sum_and_sumsq(2, 512, 256), target="sim")
    ir = kernel.get_ir("thread")
    # 2 rows over 128 threads each: 4 warps a row, one partial per (row, warp); fused: both side by side, one round
    # of two barriers (the closing one goes only with TILEAGENT_DROP_BARRIERS=sides: nothing after it touches the
    # scratch) instead of two rounds
    if fuse:
        assert "scratch_float32[tid // 128 % 2 * 4 + tid // 32 % 4] = red_s" in ir
        assert "scratch_float32[tid // 128 % 2 * 4 + tid // 32 % 4 + 8] = red_q" in ir
        assert ir.count("T.sync_threads()") == 2 and _scratch_floats(kernel) == 16
    else:
        assert ir.count("T.sync_threads()") == 4 and _scratch_floats(kernel) == 8
    x, s, q = torch.randn(2, 512), _nan(2), _nan(2)
    kernel(x, s, q)
    torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q, (x * x).sum(1), rtol=1e-5, atol=1e-5)


def _column_sums(M, N, threads):
    """Two column reductions of fp16 tiles (the padded [warp][column] scratch layout) in a row."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16"), S: T.Tensor((N,), "float32"),
             R: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=threads) as _:
            x = T.alloc_fragment((M, N), "float16")
            y = T.alloc_fragment((M, N), "float16")
            a = T.alloc_fragment((M, N), "float32")
            b = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((N,), "float32")
            r = T.alloc_fragment((N,), "float32")
            T.copy(X, x)
            T.copy(Y, y)
            for i, j in T.Parallel(M, N):
                a[i, j] = T.cast(x[i, j], "float32")
                b[i, j] = T.cast(y[i, j], "float32")
            T.reduce_sum(a, s, dim=0)
            T.reduce_max(b, r, dim=0)
            T.copy(s, S)
            T.copy(r, R)

    return main


def test_padded_column_partials_get_their_own_parts():
    kernel = tileagent.compile(_column_sums(64, 64, 128), target="sim")
    assert kernel.get_ir("thread").count("T.sync_threads()") == 2  # one round of two barriers
    x, y = torch.randn(64, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16)
    s, r = _nan(64), _nan(64)
    kernel(x, y, s, r)
    torch.testing.assert_close(s, x.float().sum(0), rtol=1e-4, atol=1e-4)
    assert torch.equal(r, y.float().amax(0))


@pytest.mark.parametrize("case", ["of a result", "one destination", "float64 beside float32"])
def test_reductions_that_depend_on_each_other_keep_their_own_rounds(case):
    M, N = 2, 512

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32"), Q: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=256) as _:
            x = T.alloc_fragment((M, N), "float32")
            x64 = T.alloc_fragment((M, N), "float64")
            s = T.alloc_fragment((M,), "float32")
            s64 = T.alloc_fragment((M,), "float64")
            q = T.alloc_fragment((1,), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(M, N):
                x64[i, j] = T.cast(x[i, j], "float64")
            T.reduce_sum(x, s, dim=1)
            if case == "of a result":
                T.reduce_max(s, q, dim=0)
            elif case == "one destination":
                T.reduce_max(x, s, dim=1, clear=False)
            else:
                T.reduce_sum(x64, s64, dim=1)
                for i in T.Parallel(M):
                    s[i] = (s[i] + T.cast(s64[i], "float32")) * 0.5
            T.copy(s, S)
            T.copy(q, Q)

    kernel = tileagent.compile(main, target="sim")
    ir = kernel.get_ir("thread")
    assert not re.search(r"= red_\w+\[0\]\n\s*scratch_\w+\[", ir)  # never two partials' writes in a row
    x, s, q = torch.randn(M, N), _nan(M), torch.zeros(1)
    kernel(x, s, q)
    want = x.sum(1)
    if case == "one destination":
        want = torch.maximum(want, x.amax(1))
    torch.testing.assert_close(s, want, rtol=1e-5, atol=1e-5)
    if case == "of a result":
        assert torch.equal(q, s.amax().reshape(1))


def test_a_pipelined_loop_s_reductions_meet_once_its_copies_are_issued_ahead():
    """In a T.Pipelined body the two reductions are apart (a copy into a shared tile between them); issued ahead,
    the copy leaves them in a row, and the scratch planned for the kernel holds both."""
    M, N, K = 2, 256, 4

    @T.prim_func
    def main(X: T.Tensor((K, M, N), "float32"), Y: T.Tensor((K, M, N), "float32"), S: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=256) as _:
            xs = T.alloc_shared((M, N), "float32")
            ys = T.alloc_shared((M, N), "float32")
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((M, N), "float32")
            a = T.alloc_fragment((M,), "float32")
            b = T.alloc_fragment((M,), "float32")
            acc = T.alloc_fragment((M,), "float32")
            T.clear(acc)
            for k in T.Pipelined(K, num_stages=2):
                T.copy(X[k, 0, 0], xs)
                T.copy(xs, x)
                T.copy(xs, y)
                T.reduce_sum(x, a, dim=1)
                T.copy(Y[k, 0, 0], ys)
                T.reduce_max(y, b, dim=1)
                for i in T.Parallel(M):
                    acc[i] += a[i] + b[i]
                T.copy(ys, y)
            T.copy(acc, S)

    kernel = tileagent.compile(main, target="sim")
    ir = kernel.get_ir("thread")
    assert re.search(r"scratch_float32\[[^\]]*\] = red_a.*\n.*scratch_float32\[[^\]]*\+ 8\] = red_b", ir)
    x, y, s = torch.randn(K, M, N), torch.randn(K, M, N), _nan(M)
    kernel(x, y, s)
    torch.testing.assert_close(s, (x.sum(2) + x.amax(2)).sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_fused_rounds_and_dropped_barriers():
    """On a GPU: the row statistics in one round (and the column sums' padded parts) match torch."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    kernel = tileagent.compile(_sum_and_sumsq(4, 4096, 512), target="cuda")
    x, s, q = torch.randn(4, 4096, device="cuda"), torch.empty(4, device="cuda"), torch.empty(4, device="cuda")
    kernel(x, s, q)
    torch.testing.assert_close(s, x.sum(1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(q, (x * x).sum(1), rtol=1e-4, atol=1e-3)
    kernel = tileagent.compile(_column_sums(64, 64, 128), target="cuda")
    x, y = torch.randn(64, 64, dtype=torch.float16, device="cuda"), torch.randn(64, 64, dtype=torch.float16,
                                                                              device="cuda")
    s, r = torch.empty(64, device="cuda"), torch.empty(64, device="cuda")
    kernel(x, y, s, r)
    torch.testing.assert_close(s, x.float().sum(0), rtol=1e-4, atol=1e-3)
    assert torch.equal(r, y.float().amax(0))
