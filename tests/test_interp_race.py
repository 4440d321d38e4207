"""The CPU interpreter's race check (compiler.interp_race): iterations of one T.Parallel that read what another writes,
or write different values to one element, fault at the DSL line; what the GPU runs the same in any order passes."""

import pytest
import torch

import tileagent.language as T
from tests import test_interp as interp_tests
from tests.test_interp import build
from tileagent.compiler.errors import KernelFault

EXACT = dict(rtol=0, atol=0)


def line_of(marker: str) -> int:
    return interp_tests.line_of(marker, __file__)


def at(marker: str) -> str:
    return f"{__file__}:{line_of(marker)}:"


GPU = ("on the GPU the iterations of one T.Parallel run concurrently in no fixed order, so {what}; the CPU interpreter "
       "runs each statement for all iterations before the next, which hides it. ")
GLOBAL_HINT = ("Make each element read and written by one iteration only (read from a tensor this loop does not "
               "write, e.g. the input rather than the output being updated), or do the writes in a later T.Kernel; "
               "accumulate with T.atomic_add / T.atomic_max / T.atomic_min")

RMW_HINT = ("Several iterations read this element and write it back: their updates get lost in any order, also with "
            "the reads and the writes split into two loops; where one update an element is meant, read the value from a "
            "tensor this loop does not write (the input rather than the output being updated); where every "
            "iteration's update counts (a histogram, a scatter-add), update it in place with "
            "T.atomic_add(buffer[index], value) (or T.atomic_max / T.atomic_min), one atomic per iteration")


def penalty(read_output: bool, V=16, L=8, p=1.5):
    """HF's repetition penalty as a scatter: Y = X, then Y[tok] penalized for every id; ``read_output`` reads the logit
    from Y (the racy form: a repeated id sees the value another iteration already penalized), else from X."""

    @T.prim_func
    def main(X: T.Tensor((1, V), "float32"), Ids: T.Tensor((1, L), "int64"), Y: T.Tensor((1, V), "float32")):
        with T.Kernel(1, threads=32) as b:
            for i in T.Parallel(V):
                Y[b, i] = X[b, i]
        with T.Kernel(1, threads=32) as b:
            for k in T.Parallel(L):
                tok = Ids[b, k]
                if read_output:
                    v = Y[b, tok]  # racy-read
                else:
                    v = X[b, tok]
                Y[b, tok] = T.if_then_else(v > 0.0, v / p, v * p)  # penalized-write

    return main


def test_repetition_penalty_reading_its_own_output_faults_at_the_read_naming_the_element_and_iterations():
    x = torch.randn(1, 16)
    ids = torch.tensor([[3, 5, 3, 7, 1, 5, 9, 3]])
    with pytest.raises(KernelFault) as e:
        build(penalty(read_output=True))(x, ids, torch.empty(1, 16))
    what = "the read may see the element before or after that write"
    assert str(e.value) == (f"{at('racy-read')}25: T.Parallel iterations race on Y: iteration (k=0) reads Y[0, 3] that "
                            f"iteration (k=2) writes at line {line_of('penalized-write')} in the same loop; "
                            + GPU.format(what=what) + RMW_HINT)


def test_repetition_penalty_reading_the_input_passes_though_repeats_store_the_same_value():
    x = torch.randn(1, 16)
    ids = torch.tensor([[3, 5, 3, 7, 1, 5, 9, 3]])
    y = torch.empty(1, 16)
    build(penalty(read_output=False))(x, ids, y)
    score = x.gather(1, ids)
    want = x.scatter(1, ids, torch.where(score > 0, score / 1.5, score * 1.5))
    torch.testing.assert_close(y, want, **EXACT)


def test_read_modify_write_by_one_iteration_is_not_a_race():
    N = 64

    @T.prim_func
    def bump(P: T.Tensor((N,), "int32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                Y[i] = Y[i] + 1.0
            for i in T.Parallel(N):  # each element owned by one iteration through a permutation
                Y[P[i]] = Y[P[i]] * 2.0

    y, perm = torch.randn(N), torch.randperm(N).to(torch.int32)
    want = (y + 1.0) * 2.0
    build(bump)(perm, y)
    torch.testing.assert_close(y, want, **EXACT)


def test_a_gather_from_what_an_earlier_loop_wrote_is_not_checked_as_a_race():
    N = 32

    @T.prim_func
    def reverse(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i] = X[i] * 2.0
        with T.Kernel(1, threads=32):  # a later kernel: ordered after the first on the GPU as well
            for i in T.Parallel(N):
                Z[i] = Y[N - 1 - i]
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((N,), "float32")
            for i in T.Parallel(N):
                s[i] = X[i] + 1.0
            for i in T.Parallel(N):  # shared memory: TileAgent places a barrier between the two loops
                Y[i] = s[N - 1 - i]

    x, y, z = torch.randn(N), torch.empty(N), torch.empty(N)
    build(reverse)(x, y, z)
    torch.testing.assert_close(z, (x * 2.0).flip(0), **EXACT)
    torch.testing.assert_close(y, (x + 1.0).flip(0), **EXACT)


def test_a_scatter_of_equal_values_is_not_a_race_but_of_different_values_is():
    V, L = 16, 8

    @T.prim_func
    def scatter(X: T.Tensor((L,), "float32"), Ids: T.Tensor((L,), "int64"), Y: T.Tensor((V,), "float32")):
        with T.Kernel(1, threads=32):
            for k in T.Parallel(L):
                Y[Ids[k]] = X[k]  # scatter-store

    ids = torch.tensor([3, 5, 3, 7, 1, 5, 9, 3])
    y = torch.zeros(V)
    build(scatter)(torch.full((L,), 2.5), ids, y)
    assert y.tolist() == [2.5 if i in ids.tolist() else 0.0 for i in range(V)]
    with pytest.raises(KernelFault) as e:
        build(scatter)(torch.arange(L, dtype=torch.float32), ids, torch.zeros(V))
    what = "which value the element keeps depends on which iteration stores last"
    assert str(e.value) == (f"{at('scatter-store')}17: T.Parallel iterations race on Y: iterations (k=0) and (k=2) "
                            f"write different values to Y[3] (0.0 and 2.0) in the same loop; " + GPU.format(what=what)
                            + "Make each element written by one iteration only (or by iterations that store the same "
                              "value), or combine the values with T.atomic_add / T.atomic_max / T.atomic_min")


def test_an_earlier_write_seen_by_a_later_read_of_another_iteration_is_a_race():
    N = 16

    @T.prim_func
    def shift(X: T.Tensor((N,), "float32"), Y: T.Tensor((N + 1,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i + 1] = X[i]
                X[i] = Y[i] * 2.0  # shifted-read

    with pytest.raises(KernelFault) as e:
        build(shift)(torch.randn(N), torch.zeros(N + 1))
    assert str(e.value).startswith(f"{at('shifted-read')}24: T.Parallel iterations race on Y: iteration (i=1) "
                                   f"reads Y[1] that iteration (i=0) writes at line {line_of('shifted-read') - 1} in "
                                   f"the same loop;")


def test_shared_memory_shifted_in_place_faults_with_the_shared_memory_hint():
    N = 32

    @T.prim_func
    def rotate(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((N,), "float32")
            T.copy(X, s)
            for i in T.Parallel(N - 1):
                s[i] = s[i + 1]  # shared-shift
            T.copy(s, Y)

    with pytest.raises(KernelFault) as e:
        build(rotate)(torch.randn(N), torch.empty(N))
    message = str(e.value)
    assert message.startswith(f"{at('shared-shift')}24: T.Parallel iterations race on s: iteration (i=0) reads s[1] "
                              f"that iteration (i=1) writes in the same loop;")
    assert message.endswith("Split the loop in two T.Parallel loops, the reads (into a fragment) in the first and the "
                            "writes in the second (TileAgent places a barrier between them for shared memory), or "
                            "make each element read and written by one iteration only; accumulate with T.atomic_add / "
                            "T.atomic_max / T.atomic_min")


def test_a_histogram_by_plain_stores_is_told_to_update_atomically():
    """Played LLM session 43: ``hist[ids[i]] = hist[ids[i]] + 1`` got the shared-memory hint, whose first fix (the
    reads and the writes in two loops) keeps the lost updates; the next turn's kernel counted 1 where 14 were due."""
    E, L = 4, 16

    @T.prim_func
    def histogram(Ids: T.Tensor((L,), "int32"), Counts: T.Tensor((E,), "int32")):
        with T.Kernel(1, threads=32):
            hist = T.alloc_shared((E,), "int32")
            T.clear(hist)
            for i in T.Parallel(L):
                hist[Ids[i]] = hist[Ids[i]] + 1  # histogram
            T.copy(hist, Counts)

    with pytest.raises(KernelFault) as e:
        build(histogram)(torch.tensor([1, 1] + [0] * (L - 2), dtype=torch.int32), torch.empty(E, dtype=torch.int32))
    message = str(e.value)
    assert message.startswith(f"{at('histogram')}")
    assert "T.Parallel iterations race on hist: iteration (i=0) reads hist[1] that iteration (i=1) writes" in message
    assert message.endswith(RMW_HINT)


def test_a_read_of_an_element_other_iterations_update_atomically_is_a_race():
    N = 8

    @T.prim_func
    def running(X: T.Tensor((N,), "float32"), C: T.Tensor((1,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                T.atomic_add(C[0], X[i])
                Y[i] = C[0]  # atomic-read

    with pytest.raises(KernelFault) as e:
        build(running)(torch.randn(N), torch.zeros(1), torch.empty(N))
    assert str(e.value).startswith(f"{at('atomic-read')}24: T.Parallel iterations race on C: iteration (i=0) reads "
                                   f"C[0] that iteration (i=1) updates atomically at line {line_of('atomic-read') - 1}")


def test_atomic_accumulation_and_masked_or_out_of_bounds_stores_are_not_races():
    """Also: an atomic add of every iteration into one element (a constant index) sums them all."""
    N, V = 16, 4

    @T.prim_func
    def mixed(X: T.Tensor((N,), "float32"), Ids: T.Tensor((N,), "int64"), H: T.Tensor((V,), "float32"),
              Y: T.Tensor((N // 2,), "float32"), Z: T.Tensor((V,), "float32"), S: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                T.atomic_add(H[Ids[i]], X[i])
                T.atomic_add(S[0], X[i])
                if i % 2 == 0:
                    Y[i // 2] = X[i]
                Z[Ids[i] + V] = X[i]  # every store past the end: dropped

    x, ids = torch.randn(N), torch.randint(0, V, (N,))
    h, y, z, s = torch.zeros(V), torch.empty(N // 2), torch.zeros(V), torch.zeros(1)
    build(mixed)(x, ids, h, y, z, s)
    torch.testing.assert_close(h, torch.zeros(V).index_add_(0, ids, x), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(s, x.sum().reshape(1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(y, x[::2], **EXACT)
    assert not z.any()


# -- what is recorded (the cost: a loop none of whose buffers is recorded runs as before) ------------------------


def loops_of(func):
    from tileagent.compiler.ir.stmt import Parallel
    from tileagent.compiler.ir.visit import walk

    return [s for s in walk(func.body) if isinstance(s, Parallel)]


def test_plan_skips_buffers_each_iteration_owns_and_stores_shown_one_to_one():
    from tileagent.compiler.interp_race import plan

    M, N, BM, BN = 64, 256, 16, 32

    @T.prim_func
    def loops(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), F: T.Tensor((M * N,), "float32"),
              Ids: T.Tensor((M,), "int32")):
        with T.Kernel(N // BN, M // BM) as (bx, by):
            for i, j in T.Parallel(BM, BN):  # in place at one index: each element is one iteration's
                r = by * BM + i
                Y[r, bx * BN + j] = Y[r, bx * BN + j] * 2.0 + X[r, bx * BN + j]
            for i, j in T.Parallel(BM, BN):  # a flat index whose coefficients cannot collide (j < BN <= N)
                F[(by * BM + i) * N + bx * BN + j] = X[by * BM + i, bx * BN + j]
            for i, j in T.Parallel(BM, BN):  # i + j collides: checked when it runs
                F[i + j] = X[i, j]
            for i, j in T.Parallel(BM, BN):  # a data-dependent row and a read of another element: both recorded
                Y[Ids[i], j] = Y[i, j]

    X, Y, F = loops.params[:3]
    owned, flat, collide, scatter = (plan(p) for p in loops_of(loops))
    assert Y in owned.owned and not owned.scattered
    assert not flat.scattered
    assert collide.scattered == {F}
    assert scatter.scattered == {Y} and Y not in scatter.owned


# -- races between thread blocks (compiler.interp_block_race) ----------------------------------------------------


def column_sums(zero_in: str, M=64, D=32, bm=16):
    """dgamma-style column sums: each block adds its rows' sums into S atomically; S zeroed by block 0 of the same
    launch (``zero_in`` "same": the race of played LLM session 36), by an earlier T.Kernel ("earlier"), or each block
    clears and adds only its own slice of a per-block output ("own")."""

    @T.prim_func
    def main(X: T.Tensor((M, D), "float32"), S: T.Tensor((M // bm, D) if zero_in == "own" else (D,), "float32")):
        if zero_in == "earlier":
            with T.Kernel(1, threads=32):
                for j in T.Parallel(D):
                    S[j] = 0.0
        with T.Kernel(M // bm, threads=32) as b:
            x = T.alloc_fragment((bm, D), "float32")
            part = T.alloc_fragment((D,), "float32")
            T.copy(X[b * bm, 0], x)
            T.reduce_sum(x, part, dim=0)
            if zero_in == "same":
                if b == 0:
                    for j in T.Parallel(D):
                        S[j] = 0.0  # zero-same-launch
            if zero_in == "own":
                T.clear(S[b, :])
                T.atomic_add(S[b, :], part)
            else:
                T.atomic_add(S, part)  # column-atomic

    return main


def test_a_store_and_another_blocks_atomic_updates_of_one_element_in_one_launch_race():
    x = torch.randn(64, 32)
    with pytest.raises(KernelFault) as e:
        build(column_sums("same"))(x, torch.full((32,), float("nan")))
    assert str(e.value).startswith(
        f"{at('zero-same-launch')}25: thread blocks race on 'S': element [0] is stored by block 0 and updated "
        f"atomically by other blocks at line {line_of('column-atomic')} in the same kernel launch; blocks run in no "
        f"fixed order on the GPU, so the store may land after some of the updates (the CPU runs blocks one after "
        f"another). Initialize it in an earlier T.Kernel scope, or update it atomically everywhere")
    s = torch.full((32,), float("nan"))
    build(column_sums("earlier"))(x, s)
    torch.testing.assert_close(s, x.sum(0), rtol=1e-5, atol=1e-5)
    own = torch.full((4, 32), float("nan"))
    build(column_sums("own"))(x, own)  # a block's own clear and atomic add of its own row: not a race
    torch.testing.assert_close(own, x.view(4, 16, 32).sum(1), rtol=1e-5, atol=1e-5)


def segment_sums(atomic: bool, N=64, S=4, D=32, bt=8):
    """Played LLM 48b: each block of ``bt`` rows adds each row into the sum of its segment, by plain loads and stores
    (the racy form: blocks whose rows share a segment lose updates on the GPU) or atomically; the sums zeroed in an
    earlier T.Kernel scope. Each block also stores its own rows' segment ids, read nowhere: not watched."""

    @T.prim_func
    def main(X: T.Tensor((N, D), "float32"), Seg: T.Tensor((N,), "int64"), Acc: T.Tensor((S, D), "float32"),
             Ids: T.Tensor((N,), "int64")):
        with T.Kernel(S, threads=32) as s:
            for j in T.Parallel(D):
                Acc[s, j] = 0.0
        with T.Kernel(N // bt, threads=32) as b:
            for r in T.serial(bt):
                sg = Seg[b * bt + r]
                Ids[b * bt + r] = sg
                for j in T.Parallel(D):
                    if atomic:
                        T.atomic_add(Acc[sg, j], X[b * bt + r, j])
                    else:
                        Acc[sg, j] = Acc[sg, j] + X[b * bt + r, j]  # plain-rmw

    return main


def test_a_read_modify_write_of_one_element_by_two_blocks_in_one_launch_races():
    x, seg = torch.randn(64, 32), torch.arange(64) * 4 // 64  # segments of 16 rows: two blocks each
    acc, ids = torch.full((4, 32), float("nan")), torch.zeros(64, dtype=torch.int64)
    with pytest.raises(KernelFault) as e:
        build(segment_sums(atomic=False))(x, seg, acc, ids)
    assert str(e.value) == (
        f"{at('plain-rmw')}25: thread blocks race on 'Acc': element [0, 0] is read and stored by block 0 and by "
        f"block 1 in the same kernel launch; blocks run at the same time on the GPU, so one block's store can "
        f"overwrite another's update of the element (the CPU runs blocks one after another). Add into such an "
        f"element with T.atomic_add, or give each block elements of its own and combine them in a later T.Kernel "
        f"scope")
    build(segment_sums(atomic=True))(x, seg, acc, ids)
    torch.testing.assert_close(acc, x.view(4, 16, 32).sum(1), rtol=1e-5, atol=1e-5)
    own = torch.arange(64) // 8  # a segment a block: each block reads and stores elements of its own
    build(segment_sums(atomic=False, S=8))(x, own, torch.zeros(8, 32), ids)

    @T.prim_func
    def same_value(D: T.Tensor((16,), "float32")):
        with T.Kernel(4, threads=32):
            for j in T.Parallel(16):
                D[j] = D[j] * 0.0 + 1.0  # every block stores what the others left: no race

    d = torch.randn(16)
    build(same_value)(d)
    assert bool((d == 1.0).all())


def test_a_global_shift_in_place_faults_with_the_global_memory_hint():
    """Not a read-modify-write (each iteration reads one element and writes another): the hint is the one for
    global memory, not the atomic update's."""
    N = 32

    @T.prim_func
    def shift(Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N - 1):
                Y[i] = Y[i + 1]  # global-shift

    with pytest.raises(KernelFault) as e:
        build(shift)(torch.randn(N))
    assert str(e.value).startswith(f"{at('global-shift')}")
    assert str(e.value).endswith(GLOBAL_HINT)
