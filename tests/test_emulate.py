"""The SIMT emulator on hand-built thread-IR kernels, each checked against torch in the same test."""

import pytest
import torch

from tileagent.compiler.diagnostics import Span
from tileagent.compiler.dtypes import DType
from tileagent.compiler.emulate import EmulationError, run_kernel, run_module
from tileagent.compiler.errors import KernelFault
from tileagent.compiler.ir.expr import Call, Const, Load, Var, as_expr, make_cmp, make_select
from tileagent.compiler.ir.stmt import AtomicAdd, Buffer, For, If, Let, Store
from tileagent.compiler.tir import (BLOCK_IDX, GRID_DIM, LANE, THREAD, WARP, Barrier, Declare, DeviceKernel, DeviceModule, Mma,
                          VecCopy)

F32, F16, BF16, I32 = DType("float32"), DType("float16"), DType("bfloat16"), DType("int32")
EXACT = dict(rtol=0, atol=0)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def buf(name, size, dtype=F32, scope="global"):
    return Buffer(name, (size,), dtype, scope)


def ld(b, i):
    return Load(b, (as_expr(i),), b.dtype)


def st(b, i, v, line=None):
    return Store(b, (as_expr(i),), as_expr(v, b.dtype), Span("kern.py", line) if line else None)


def eq(a, b):
    return make_cmp("==", a, b)  # expressions do not overload ==


def shfl(v, mask, width=32):
    return Call("shfl_xor", (v, Const(mask, I32), Const(width, I32)), v.dtype)


def kernel(params, body, grid=(1,), block=(128, 1, 1), shared=()):
    offsets, off = {}, 0
    for b in shared:
        offsets[b] = off
        off += -(-b.shape[0] * b.dtype.bytes // 16) * 16
    return DeviceKernel("k", tuple(params), tuple(grid), block, off, offsets, tuple(body))


def warp_sum(v: Var):
    """Lets that leave the sum over the warp in ``v`` in every lane."""
    return [Let(v, v + shfl(v, m)) for m in (16, 8, 4, 2, 1)]


# -- numerics ----------------------------------------------------------------------------------------------------


def test_elementwise_with_predicated_tail():
    n = Var("n")
    X, Y = buf("X", n), buf("Y", n)
    i = Var("i")
    k = kernel([X, Y, n], [Let(i, BLOCK_IDX[0] * 128 + THREAD), If(i < n, (st(Y, i, ld(X, i) * 2.0 + 1.0),), ())],
               grid=((n + 127) // 128,))
    x, y = torch.randn(300), torch.full((300,), float("nan"))
    run_kernel(k, {X: x, Y: y, n: 300})
    torch.testing.assert_close(y, x * 2.0 + 1.0, **EXACT)


def test_block_reduction_with_shuffles_shared_memory_and_barriers():
    X, Y = buf("X", 3 * 128), buf("Y", 3)
    red = buf("red", 4, scope="shared")
    v = Var("v", F32)
    body = [Let(v, ld(X, BLOCK_IDX[0] * 128 + THREAD)), *warp_sum(v),
            If(eq(LANE, 0), (st(red, WARP, v),), ()),
            Barrier(),
            If(eq(WARP, 0), (Let(v, make_select(LANE < 4, ld(red, LANE), 0.0)), *warp_sum(v),  # red[LANE] only if < 4
                           If(eq(LANE, 0), (st(Y, BLOCK_IDX[0], v),), ())), ())]
    x, y = torch.randn(3 * 128), torch.full((3,), float("nan"))
    run_kernel(kernel([X, Y], body, grid=(3,), shared=[red]), {X: x, Y: y})
    torch.testing.assert_close(y, x.reshape(3, 128).sum(1), rtol=1e-5, atol=1e-5)


def transpose_kernel(M, N, barrier=True):
    """B[N, M] = A[M, N].T through a padded 16x17 shared tile, 16x16 threads per tile."""
    A, B = buf("A", M * N), buf("B", M * N)
    tile = buf("tile", 16 * 17, scope="shared")
    tx, ty = Var("tx"), Var("ty")
    bx, by = BLOCK_IDX[0], BLOCK_IDX[1]
    body = [Let(tx, THREAD % 16), Let(ty, THREAD // 16),
            st(tile, ty * 17 + tx, ld(A, (by * 16 + ty) * N + bx * 16 + tx)),
            *([Barrier()] if barrier else []),
            st(B, (bx * 16 + ty) * M + by * 16 + tx, ld(tile, tx * 17 + ty), line=12)]
    return kernel([A, B], body, grid=(N // 16, M // 16), block=(16, 16, 1), shared=[tile]), A, B


def test_transpose_through_shared_memory():
    k, A, B = transpose_kernel(32, 48)
    a, b = torch.randn(32, 48), torch.full((48, 32), float("nan"))
    run_kernel(k, {A: a, B: b})
    torch.testing.assert_close(b, a.T, **EXACT)


def test_race_detector_fires_without_the_barrier():
    k, A, B = transpose_kernel(32, 48, barrier=False)
    with pytest.raises(EmulationError) as err:
        run_kernel(k, {A: torch.randn(32, 48), B: torch.zeros(48, 32)})
    assert str(err.value).startswith("kern.py:12:1: shared-memory race on tile[17]: written by thread 16, then read "
                                     "by thread 1 without a barrier")
    run_kernel(k, {A: torch.randn(32, 48), B: torch.zeros(48, 32)}, check_races=False)  # detector off: runs


def test_race_detector_fires_on_write_after_read():
    Y = buf("Y", 64)
    s = buf("s", 64, scope="shared")
    body = [st(s, THREAD, THREAD.astype(F32)), Barrier(),
            st(s, THREAD, ld(s, (THREAD + 1) % 64) + 1.0, line=3)]  # reads its neighbour's element, then writes
    with pytest.raises(EmulationError, match=r"race on s\[0\]: read by thread 63, then written by thread 0"):
        run_kernel(kernel([Y], body, block=(64, 1, 1), shared=[s]), {Y: torch.zeros(64)})


def test_vec_copy_converts_fp16_to_fp32_through_shared_and_local():
    X, Y = buf("X", 256, F16), buf("Y", 256, F32)
    xs = buf("xs", 256, F16, scope="shared")
    r = buf("r", 4, F32, scope="local")
    body = [VecCopy(xs, THREAD * 4, X, THREAD * 4, 4), Barrier(), Declare(r),
            VecCopy(r, 0, xs, (63 - THREAD) * 4, 4),  # another thread's elements: legal after the barrier
            VecCopy(Y, (63 - THREAD) * 4, r, 0, 4)]
    x, y = torch.randn(256).half(), torch.full((256,), float("nan"))
    run_kernel(kernel([X, Y], body, block=(64, 1, 1), shared=[xs]), {X: x, Y: y})
    torch.testing.assert_close(y, x.float(), **EXACT)


def test_vec_copy_rejects_a_misaligned_vector():
    X, Y = buf("X", 260, F16), buf("Y", 260, F32)
    body = [VecCopy(Y, THREAD * 4, X, THREAD * 4 + 2, 4)]
    with pytest.raises(EmulationError, match=r"misaligned vector copy from global buffer 'X': index 2 in thread 0 "
                                             r"is not a multiple of the width 4 \(8-byte access\)"):
        run_kernel(kernel([X, Y], body, block=(64, 1, 1)), {X: torch.zeros(260).half(), Y: torch.zeros(260)})


def test_atomic_add_accumulates_and_store_keeps_the_last_thread():
    X, S, L = buf("X", 512), buf("S", 1), buf("L", 1, I32)
    body = [AtomicAdd(S, (as_expr(0),), ld(X, BLOCK_IDX[0] * 256 + THREAD)), st(L, 0, THREAD)]
    x, s, last = torch.randn(512), torch.zeros(1), torch.zeros(1, dtype=torch.int32)
    run_kernel(kernel([X, S, L], body, grid=(2,), block=(256, 1, 1)), {X: x, S: s, L: last})
    torch.testing.assert_close(s, x.sum().reshape(1), rtol=1e-5, atol=1e-5)
    assert last.item() == 255


def test_multi_block_grid_with_2d_block_index_runs_x_fastest():
    Y, C = buf("Y", 6, I32), buf("C", 1, I32)
    bx, by = BLOCK_IDX[0], BLOCK_IDX[1]
    lin = by * GRID_DIM[0] + bx
    body = [If(eq(THREAD, 0), (st(Y, lin, ld(C, 0) * 100 + by * 10 + bx), st(C, 0, ld(C, 0) + 1)), ())]
    y, c = torch.full((6,), -1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    k = kernel([Y, C], body, grid=(3, 2), block=(32, 1, 1))
    run_module(DeviceModule("m", (k,)), {Y: y, C: c})
    assert y.tolist() == [0, 101, 202, 310, 411, 512]  # launch order * 100 + by * 10 + bx
    assert c.item() == 6


def test_for_loop_accumulates_in_a_local_register_array():
    X, Y = buf("X", 8 * 32), buf("Y", 32)
    acc, k = buf("acc", 1, scope="local"), Var("k")
    body = [Declare(acc, as_expr(0.0)),
            For(k, 0, 8, 1, "serial", (st(acc, 0, ld(acc, 0) + ld(X, k * 32 + THREAD)),)),
            st(Y, THREAD, ld(acc, 0))]
    x, y = torch.randn(8 * 32), torch.zeros(32)
    run_kernel(kernel([X, Y], body, block=(32, 1, 1)), {X: x, Y: y})
    torch.testing.assert_close(y, x.reshape(8, 32).sum(0), rtol=1e-5, atol=1e-5)


def mma_kernel(dtype=F16, warps=1, ksteps=1, guard=None):
    """C[16 warps, 8] = A[16 warps, 16 ksteps] @ B[16 ksteps, 8] (row-major): warp w owns rows 16w..16w+15 and
    accumulates one Mma per 16-wide k-step, its fragments loaded from global memory in the layout of tir.Mma.
    ``guard(stmt)`` may wrap the Mma (in an If)."""
    K = 16 * ksteps
    A, B, C = buf("A", 16 * warps * K, dtype), buf("B", K * 8, dtype), buf("C", 16 * warps * 8)
    a, b, acc = buf("a", 8, dtype, "local"), buf("b", 4, dtype, "local"), buf("acc", 4, F32, "local")
    g, t, m0, kk = Var("g"), Var("t"), Var("m0"), Var("kk")
    loads = [st(a, i, ld(A, (m0 + g + 8 * (i // 2 % 2)) * K + kk * 16 + 2 * t + (i % 2 + 8 * (i // 4))))
             for i in range(8)]
    loads += [st(b, j, ld(B, (kk * 16 + 2 * t + (j % 2 + 8 * (j // 2))) * 8 + g)) for j in range(4)]
    mma = Mma(acc, (0, 1, 2, 3), a, tuple(range(8)), b, tuple(range(4)), Span("kern.py", 9))
    body = [Let(g, LANE // 4), Let(t, LANE % 4), Let(m0, WARP * 16), Declare(a), Declare(b),
            Declare(acc, as_expr(0.0)),
            For(kk, 0, ksteps, 1, "unroll", (*loads, guard(mma) if guard else mma)),
            *[st(C, (m0 + g + 8 * (j // 2)) * 8 + 2 * t + j % 2, ld(acc, j)) for j in range(4)]]
    return kernel([A, B, C], body, block=(32 * warps, 1, 1)), (A, B, C)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_mma_two_warps_two_k_steps_match_torch(dtype):
    k, (A, B, C) = mma_kernel(dtype, warps=2, ksteps=2)
    a, b = torch.randn(32, 32).to(dtype.torch), torch.randn(32, 8).to(dtype.torch)
    c = torch.full((32, 8), float("nan"))
    run_kernel(k, {A: a, B: b, C: c})
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


def test_mma_single_tile_is_exact_on_small_integers():
    k, (A, B, C) = mma_kernel(F16)
    a, b = torch.randint(-4, 5, (16, 16)).half(), torch.randint(-4, 5, (16, 8)).half()
    c = torch.zeros(16, 8)
    run_kernel(k, {A: a, B: b, C: c})
    torch.testing.assert_close(c, a.float() @ b.float(), **EXACT)


def test_mma_in_a_warp_uniform_branch_runs_only_there():
    k, (A, B, C) = mma_kernel(F16, warps=2, guard=lambda s: If(eq(WARP, 1), (s,), ()))
    a, b, c = torch.randn(32, 16).half(), torch.randn(16, 8).half(), torch.full((32, 8), float("nan"))
    run_kernel(k, {A: a, B: b, C: c})
    assert torch.all(c[:16] == 0)
    torch.testing.assert_close(c[16:], a[16:].float() @ b.float(), rtol=1e-5, atol=1e-5)


# -- errors ------------------------------------------------------------------------------------------------------


def test_out_of_bounds_load_names_buffer_size_index_and_thread():
    X, Y = buf("X", 64), buf("Y", 64)
    body = [st(Y, THREAD, ld(X, THREAD + 1), line=7)]
    with pytest.raises(EmulationError) as err:
        run_kernel(kernel([X, Y], body, block=(64, 1, 1)), {X: torch.zeros(64), Y: torch.zeros(64)})
    assert isinstance(err.value, KernelFault)
    assert err.value.span == Span("kern.py", 7)
    assert str(err.value) == ("kern.py:7:1: out-of-bounds load from global buffer 'X' (size 64): index 64 in thread "
                              "63 of block (0, 0, 0)")


def test_shuffle_under_divergence_is_an_error():
    Y = buf("Y", 32)
    v = Var("v", F32)
    body = [Let(v, THREAD.astype(F32)), If(LANE < 16, (Let(v, shfl(v, 1)),), ()), st(Y, THREAD, v)]
    with pytest.raises(EmulationError, match="shfl_xor under divergence: 16 of 32 lanes of warp 0 are active"):
        run_kernel(kernel([Y], body, block=(64, 1, 1)), {Y: torch.zeros(32)})


def test_shuffle_in_a_warp_uniform_branch_is_allowed():
    Y = buf("Y", 64)
    v = Var("v", F32)
    body = [Let(v, THREAD.astype(F32)), If(eq(WARP, 1), (Let(v, shfl(v, 1)),), ()), st(Y, THREAD, v)]
    y = torch.zeros(64)
    run_kernel(kernel([Y], body, block=(64, 1, 1)), {Y: y})
    assert y.tolist() == list(range(32)) + [t ^ 1 for t in range(32, 64)]


def test_barrier_under_divergence_is_an_error():
    Y = buf("Y", 64)
    with pytest.raises(EmulationError, match="thread-divergent Barrier: reached by 32 of 64 threads"):
        run_kernel(kernel([Y], [If(THREAD < 32, (Barrier(),), ())], block=(64, 1, 1)), {Y: torch.zeros(64)})


def test_loop_trip_count_must_be_uniform():
    Y, k = buf("Y", 64), Var("k")
    body = [For(k, 0, THREAD // 32 + 1, 1, "serial", (st(Y, THREAD, k.astype(F32)),))]
    with pytest.raises(EmulationError, match="trip count of loop 'k' differs between threads: 1 in thread 0, 2 in "
                                             "thread 32"):
        run_kernel(kernel([Y], body, block=(64, 1, 1)), {Y: torch.zeros(64)})


def test_mma_with_a_masked_lane_is_an_error():
    k, (A, B, C) = mma_kernel(F16, warps=2, guard=lambda s: If(make_cmp("!=", THREAD, 37), (s,), ()))
    with pytest.raises(EmulationError) as err:
        run_kernel(k, {A: torch.zeros(32, 16).half(), B: torch.zeros(16, 8).half(), C: torch.zeros(32, 8)})
    assert str(err.value) == ("kern.py:9:1: Mma under divergence: 31 of 32 lanes of warp 1 are active; every lane of "
                              "the warp must execute it")


def test_mma_in_an_incomplete_warp_is_an_error():
    k, (A, B, C) = mma_kernel(F16, warps=2)
    k = DeviceKernel(k.name, k.params, k.grid, (48, 1, 1), k.shared_bytes, k.shared_offsets, k.body)
    with pytest.raises(EmulationError, match="Mma in warp 1, which has only 16 of 32 lanes in a block of 48 threads"):
        run_kernel(k, {A: torch.zeros(32, 16).half(), B: torch.zeros(16, 8).half(), C: torch.zeros(32, 8)})


def test_async_copy_lands_only_at_its_wait():
    """cp.async semantics in the emulator: a read of the destination before the AsyncWait that retires the copy sees
    the old bytes (a missing wait shows up as wrong values); after the wait it sees the copied ones; a false
    ``valid`` writes zeros and reads nothing."""
    from tileagent.compiler.tir import AsyncCommit, AsyncCopy, AsyncWait

    src = Buffer("src", (64,), DType("float32"), "global")
    out = Buffer("out", (64,), DType("float32"), "global")
    tile = Buffer("tile", (64,), DType("float32"), "shared")
    i = THREAD * 4
    valid = THREAD < 15  # thread 15's chunk reads nothing and is zero-filled

    def run(wait: bool):
        body = [AsyncCopy(tile, i, src, i, 4, valid), AsyncCommit()]
        body += [AsyncWait(0)] if wait else []
        body += [Barrier(), VecCopy(out, i, tile, i, 4)]
        k = DeviceKernel("k", (src, out), (Const(1, DType("int32")),), (16, 1, 1), 256, {tile: 0}, tuple(body))
        x, y = torch.arange(64, dtype=torch.float32), torch.zeros(64)
        run_kernel(k, {src: x, out: y})
        return x, y

    x, y = run(wait=True)
    assert torch.equal(y[:60], x[:60]) and torch.equal(y[60:], torch.zeros(4))
    _, y = run(wait=False)
    assert torch.isnan(y).all()  # the shared arena's initial bytes (all ones): NaN


def _consumers_exchange_across_a_producer_wait(barrier: bool):
    """256 threads: consumers (0..127) write s[t], release stage 0 (empty barrier 0) and wait for stage 1 (full
    barrier 1), which the producer (128..255) announces after its wait for the free stage 0; then each consumer reads
    its neighbour's s[t + 1], with or without a consumers' barrier before the read."""
    from tileagent.compiler.tir import MbarrierArrive, MbarrierArriveExpectTx, MbarrierInit, MbarrierWait, WarpSpecialize

    Y = buf("Y", 128)
    s = buf("s", 128, scope="shared")
    bars = buf("bars", 2, DType("uint64"), scope="shared")
    consumer = [st(s, THREAD, THREAD.astype(F32)), MbarrierArrive(bars, as_expr(0)),
                MbarrierWait(bars, as_expr(1), as_expr(0)), *([Barrier()] if barrier else []),
                st(Y, THREAD, ld(s, (THREAD + 1) % 128), line=7)]
    producer = [MbarrierWait(bars, as_expr(0), as_expr(0), for_free_stage=True),
                If(eq(THREAD, 128), (MbarrierArriveExpectTx(bars, as_expr(1), 0),), ())]
    body = [If(eq(THREAD, 0), (MbarrierInit(bars, 1, 4), MbarrierInit(bars, 1, 1, first=1)), ()), Barrier(),
            WarpSpecialize(make_cmp(">=", THREAD, as_expr(128)), tuple(producer), tuple(consumer), consumers=128)]
    return kernel([Y], body, block=(256, 1, 1), shared=[s, bars]), Y


def test_a_producer_wait_for_a_free_stage_does_not_order_the_consumers_among_themselves():
    k, Y = _consumers_exchange_across_a_producer_wait(barrier=False)
    with pytest.raises(EmulationError, match=r"kern.py:7:1: shared-memory race on s\[\d+\]: written by thread \d+, "
                                             r"then read by thread \d+ without a barrier"):
        run_kernel(k, {Y: torch.zeros(128)})
    k, Y = _consumers_exchange_across_a_producer_wait(barrier=True)
    out = torch.zeros(128)
    run_kernel(k, {Y: out})
    torch.testing.assert_close(out, ((torch.arange(128) + 1) % 128).float(), **EXACT)
