"""The DSL guide's claims hold (prompts/dsl_guide.md): what the played LLM had to guess (issue 19, stuck points 6, 8,
9) is now written there, and this checks it through the evaluator on the CPU: a grid-wide intermediate in a
``T.alloc_global`` workspace between two ``with T.Kernel`` scopes, a ``T.copy`` whose origin is the middle of the last
dim, and a 0-d output returned as ``y.view(())`` of a ``(1,)`` kernel output. Session 3's stuck points: the gather
idiom (S3-8) and the advice for split tiles (S3-5), checked in the interpreter and in the CUDA source for sm_90a."""

import re

import pytest

import torch

import tileagent
import tileagent.language as T
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec
from tests.conftest import REPO

GUIDE = (REPO / "prompts" / "dsl_guide.md").read_text()

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.mean()


CONFIGS = [{"M": 8, "N": 64}]


def get_inputs(M=8, N=64):
    return [torch.randn(M, N)]


def get_init_inputs(M=8, N=64):
    return []
'''

CANDIDATE = '''import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def mean_all(M, N, block_m=4):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((1,), "float32")):
        part = T.alloc_global((T.ceildiv(M, block_m),), "float32")
        with T.Kernel(T.ceildiv(M, block_m), threads=32) as bm:
            lo = T.alloc_fragment((block_m, N // 2), "float32")
            hi = T.alloc_fragment((block_m, N // 2), "float32")
            rows = T.alloc_fragment((block_m,), "float32")
            rows2 = T.alloc_fragment((block_m,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bm * block_m, 0], lo)
            T.copy(X[bm * block_m, N // 2], hi)
            T.reduce_sum(lo, rows, dim=1)
            T.reduce_sum(hi, rows2, dim=1)
            for i in T.Parallel(block_m):
                rows[i] = rows[i] + rows2[i]
            T.reduce_sum(rows, s, dim=0)
            part[bm] = s[0]
        with T.Kernel(1, threads=32) as _:
            acc = T.alloc_var("float32", 0.0)
            for k in T.serial(T.ceildiv(M, block_m)):
                acc = acc + part[k]
            Y[0] = acc / (M * N)

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        return mean_all(*x.shape)(x).view(())
'''


def test_the_guide_states_the_three_idioms():
    assert "`T.alloc_global(shape, dtype)` before the first `with T.Kernel`" in GUIDE
    assert "`T.copy(X[r, D // 2], x_hi)` loads the second half of each row" in GUIDE
    assert "write a `(1,)` output and return\n`y.view(())`" in GUIDE


def test_a_workspace_a_mid_row_copy_and_a_scalar_output_pass_the_evaluator(tmp_path):
    (tmp_path / "ref_mean.py").write_text(REFERENCE)
    (tmp_path / "cand_mean.py").write_text(CANDIDATE)
    (result,) = check_candidate(load_spec(tmp_path / "ref_mean.py"), tmp_path / "cand_mean.py", seeds=1)
    assert result.correct and result.checks > 0


@pytest.mark.parametrize("axes", [True, False])
def test_a_tile_origin_with_floordiv_and_mod_is_vectorized_like_one_on_its_own_grid_axes(axes):
    """The split tile of played-LLM session 3 (S3-5): `X[r, p // n, (p % n) * bw]` was copied element by element;
    its last-dim origin is a multiple of bw whatever p is, so it gets the same 128-bit copies as separate grid axes,
    and the emulator (thread IR, per-vector alignment checked) moves every element to its place."""
    func = _split_copy(4, 4096, axes=axes)
    source = tileagent.compile(func, out_idx=[1], target="cuda:sm_90a").get_kernel_source()
    assert set(re.findall(r"copy (\d+) x (?:half -> float|float -> half)", source)) == {"8"}
    x = torch.randn(2, 16, 4 * 4096, dtype=torch.float16)
    torch.testing.assert_close(tileagent.compile(func, out_idx=[1], target="sim")(x), x, rtol=0, atol=0)


@tileagent.jit(out_idx=[2])
def _row_label_pick(V, block_m=2, block_v=512, threads=64):
    """cross_entropy's label pick with the int64 label fragment filled by T.copy and read in the tile's loop."""
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, V), "float16"), labels: T.Tensor((M,), "int64"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, block_v), "float32")
            hit = T.alloc_fragment((block_m, block_v), "float32")
            lab = T.alloc_fragment((block_m,), "int64")
            picked = T.alloc_fragment((block_m,), "float32")
            T.copy(labels[bm * block_m], lab)
            T.copy(X[bm * block_m, 0], x)
            for i, j in T.Parallel(block_m, block_v):
                hit[i, j] = T.if_then_else(j == lab[i], x[i, j], 0.0)
            T.reduce_sum(hit, picked, dim=1)
            T.copy(picked, Y[bm * block_m])

    return main


def test_an_int64_label_read_once_per_row_keeps_the_row_tile_128_bit():
    """Played-LLM session 3 (S3-6): the (block_m,) int64 label fragment, the same for a whole row of the loop, cut
    the loop and so X's copy to 2 halves; only buffers read along the loop's last variable decide its width now."""
    func = _row_label_pick.get_tir(512)
    source = tileagent.compile(func, out_idx=[2], target="cuda:sm_90a").get_kernel_source()
    assert set(re.findall(r"copy (\d+) x half -> float", source)) == {"8"}
    x, labels = torch.randn(5, 512, dtype=torch.float16), torch.tensor([3, 511, 0, 200, 7])
    sim = tileagent.compile(func, out_idx=[2], target="sim")
    torch.testing.assert_close(sim(x, labels), x.float()[torch.arange(5), labels], rtol=0, atol=0)


def _split_copy(n, bw, axes):
    C, HW = 16, n * bw
    R = T.dynamic("R")

    @T.prim_func
    def main(X: T.Tensor((R, C, HW), "float16"), Y: T.Tensor((R, C, HW), "float16")):
        with T.Kernel(n, C, R, threads=256) as (ph, pc, r):
            x = T.alloc_fragment((1, bw), "float32")
            if axes:
                T.copy(X[r, pc, ph * bw], x)
                T.copy(x, Y[r, pc, ph * bw])
            else:
                p = pc * n + ph
                T.copy(X[r, p // n, (p % n) * bw], x)
                T.copy(x, Y[r, p // n, (p % n) * bw])

    return main


@tileagent.jit(out_idx=[2])
def _gather_rows(V, D, block_m=4, block_d=256, threads=32, scale=2.0):
    """The guide's gather idiom, as written there."""
    M = T.dynamic("M")

    @T.prim_func
    def main(Ids: T.Tensor((M,), "int64"), E: T.Tensor((V, D), "float16"), Y: T.Tensor((M, D), "float16")):
        with T.Kernel(T.ceildiv(D, block_d), T.ceildiv(M, block_m), threads=threads) as (bd, bm):
            x = T.alloc_fragment((block_d,), "float32")
            for r in T.serial(block_m):
                tok = Ids[bm * block_m + r]
                T.copy(E[tok, bd * block_d], x)
                for j in T.Parallel(block_d):
                    x[j] = x[j] * scale
                T.copy(x, Y[bm * block_m + r, bd * block_d])

    return main


def test_the_guides_gather_idiom_is_correct_and_loads_rows_in_128_bit_vectors():
    """Played-LLM session 3 (S3-8): the guide had no gather; embed_pos guessed this form. M=7 with block_m=4 and
    D=300 with block_d=256 exercise the row tail (index 0 read, stores dropped) and the column tail."""
    assert "**Gathers (embedding lookups" in GUIDE and "T.copy(E[tok, bd * block_d], x)" in GUIDE
    ids = torch.tensor([5, 0, 99, 42, 42, 7, 63])
    table = torch.randn(100, 300, dtype=torch.float16)
    y = _gather_rows(100, 300)(ids, table)
    torch.testing.assert_close(y, (table[ids].float() * 2.0).half(), rtol=0, atol=0)
    source = tileagent.compile(_gather_rows.fn(50257, 768), out_idx=[2], target="cuda:sm_90a").get_kernel_source()
    assert set(re.findall(r"copy (\d+) x half -> float", source)) == {"8"}


def _column_sums(S, D, block_s, stages):
    @T.prim_func
    def main(X: T.Tensor((S, D), "float16"), Y: T.Tensor((D,), "float32")):
        with T.Kernel(T.ceildiv(D, 64), threads=128) as bd:
            xs = T.alloc_shared((block_s, 64), "float16")
            xf = T.alloc_fragment((block_s, 64), "float32")
            acc = T.alloc_fragment((block_s, 64), "float32")
            out = T.alloc_fragment((64,), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(S, block_s), num_stages=stages):
                T.copy(X[k * block_s, bd * 64], xs)
                T.copy(xs, xf)
                for i, j in T.Parallel(block_s, 64):
                    acc[i, j] += xf[i, j]
            T.reduce_sum(acc, out, dim=0)
            T.copy(out, Y[bd * 64])
    return main


@pytest.mark.parametrize("S, stages", [(37, 3), (16, 4)])
def test_pipelined_copies_serve_any_loop_with_zeros_past_the_end(S, stages):
    """Guide, section 5: T.Pipelined without a gemm (a played LLM could not tell): cp.async copies, rows past the end
    read as zeros (S = 37 in tiles of 16), more stages than trips (16 rows, 1 trip, 4 stages)."""
    assert "`T.Pipelined(n, num_stages=s)` is not only for gemm" in GUIDE
    x = torch.randn(S, 128).half()
    y = tileagent.compile(_column_sums(S, 128, 16, stages), out_idx=[1], target="sim:sm_90a")(x)
    torch.testing.assert_close(y, x.float().sum(0), atol=1e-2, rtol=1e-3)
    source = tileagent.compile(_column_sums(S, 128, 16, stages), out_idx=[1], target="cpu:sm_90a").get_kernel_source()
    assert "cp.async" in source


def _doubled_in_column_tiles(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, 8), threads=64) as bm:
            xs = T.alloc_fragment((8, 32), "float32")
            for k in T.unroll(T.ceildiv(N, 32)):
                T.copy(X[bm * 8, k * 32], xs)
                for i, j in T.Parallel(8, 32):
                    xs[i, j] = xs[i, j] * 2.0
                T.copy(xs, Y[bm * 8, k * 32])
    return main


def test_tile_ops_inside_an_unrolled_loop():
    """Guide, section 2: `T.unroll` is a sequential loop like `T.serial` (tile ops inside it), a played LLM asked."""
    assert "(`T.serial`, `T.unroll`, `T.Pipelined`, `range`) run on every thread" in GUIDE
    x = torch.randn(37, 96)
    torch.testing.assert_close(tileagent.compile(_doubled_in_column_tiles(37, 96), out_idx=[1], target="sim:sm_90a")(x),
                               2 * x)


@tileagent.jit(out_idx=[3])
def _scaled_sum(n):
    @T.prim_func
    def main(x: T.Tensor((n,), "float32"), w: T.Tensor((n,), "float32"), eps: T.float32,
             y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32) as _:
            for i in T.Parallel(n):
                y[i] = x[i] * w[i] + eps

    return main


def test_a_kernel_with_out_idx_takes_its_other_parameters_in_order_scalars_included():
    assert "is `y = kernel(x, w, 1e-5)`" in GUIDE
    x, w = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(_scaled_sum(64)(x, w, 0.5), x * w + 0.5)


@pytest.mark.parametrize("shape, warps", [((4, 768), 1), ((2, 768), 3), ((4, 256), 1), ((4, 1024), 4)])
def test_the_default_layout_puts_a_row_on_the_warps_the_guide_says(shape, warps):
    """The guide's layout paragraph: which warps hold row 0 of a tile on 128 threads (the default blocked layout)."""
    from tileagent.compiler.layout.fragment import make_blocked

    text = " ".join(GUIDE.split())
    assert "on 128 threads a `(4, 768)` tile puts each row on one warp" in text
    assert "a `(2, 768)` tile spreads each row over 96 threads (3 warps)" in text
    frag = make_blocked(shape, 128)
    assert len({int(frag.thread((0, j))) // 32 for j in range(shape[1])}) == warps


def test_the_guides_occupancy_limits_are_the_sm90a_targets():
    from tileagent.compiler.target import for_arch

    t = for_arch("sm_90a")
    text = " ".join(GUIDE.split())
    assert (f"Occupancy limits per SM on the H200: {t.blocks_per_sm} blocks, {t.threads_per_sm // 32} warps, "
            f"{t.registers_per_sm // 1024}K registers, {t.shared_bytes // 1024} KiB of shared memory") in text


def test_a_global_element_read_at_the_top_of_a_kernel_serves_its_loops():
    """Played LLM, session 22: whether `slope = Slope[h]` may stand outside any loop had to be guessed."""
    assert "`slope = Slope[h]` (one value per block" in " ".join(GUIDE.split())

    @T.prim_func
    def main(X: T.Tensor((3, 4, 64), "float32"), Slope: T.Tensor((3,), "float32"), Y: T.Tensor((3, 4, 64), "float32")):
        with T.Kernel(3, threads=64) as h:
            slope = Slope[h]
            x = T.alloc_fragment((4, 64), "float32")
            T.copy(X[h, 0, 0], x)
            for i, j in T.Parallel(4, 64):
                x[i, j] = x[i, j] * slope
            T.copy(x, Y[h, 0, 0])

    x, s = torch.randn(3, 4, 64), torch.randn(3)
    y = torch.full_like(x, float("nan"))
    kernel = tileagent.compile(main, target="sim")
    kernel(x, s, y)
    torch.testing.assert_close(y, x * s[:, None, None])
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_the_guides_cumsum_entry_exclusive_from_inclusive_in_float64():
    """Played LLM, session 22: T.cumsum's entry said nothing of scopes, precision or an exclusive scan; an exclusive
    float32 scan over long rows needs float64 sums to match torch's CPU cumsum (which adds in float64)."""
    text = " ".join(GUIDE.split())
    assert "sums in float32, float64 for float64 tiles" in text
    assert "an exclusive scan is the inclusive one minus" in text

    @T.prim_func
    def main(X: T.Tensor((2, 256), "float32"), Y: T.Tensor((2, 256), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((2, 256), "float32")
            acc = T.alloc_fragment((2, 256), "float64")
            T.copy(X, x)
            for i, j in T.Parallel(2, 256):
                acc[i, j] = T.cast(x[i, j], "float64")
            T.cumsum(acc, dim=1)
            for i, j in T.Parallel(2, 256):
                x[i, j] = T.cast(acc[i, j], "float32") - x[i, j]
            T.copy(x, Y)

    x = torch.randn(2, 256) * torch.tensor([[1.0], [1e4]])
    y = torch.full_like(x, float("nan"))
    tileagent.compile(main, target="cpu")(x, y)
    assert torch.equal(y, torch.cumsum(x, dim=-1) - x)


def test_the_guides_argmax_idiom_matches_torch_with_ties():
    """Played LLM, session 22: nothing in the guide said how to return an index (argmax) or that integer tiles
    reduce; the idiom as written, over chunks, gives torch.argmax's first index on ties, here and for sm_90a."""
    assert "**Row argmax (an index output).**" in GUIDE and "T.reduce_min(idx, first, dim=1)" in GUIDE
    M, V, block_m, block_v = 4, 1000, 4, 256

    @T.prim_func
    def main(X: T.Tensor((M, V), "bfloat16"), Y: T.Tensor((M,), "int64")):
        with T.Kernel(T.ceildiv(M, block_m), threads=128) as bm:
            x = T.alloc_fragment((block_m, block_v), "float32")
            idx = T.alloc_fragment((block_m, block_v), "int32")
            m = T.alloc_fragment((block_m,), "float32")
            first = T.alloc_fragment((block_m,), "int32")
            m_run = T.alloc_fragment((block_m,), "float32")
            i_run = T.alloc_fragment((block_m,), "int32")
            T.fill(m_run, -T.infinity("float32"))
            T.fill(i_run, 0)
            for c in T.serial(T.ceildiv(V, block_v)):
                for i, j in T.Parallel(block_m, block_v):
                    x[i, j] = T.if_then_else(c * block_v + j < V, T.cast(X[bm * block_m + i, c * block_v + j],
                                                                            "float32"), -T.infinity("float32"))
                T.reduce_max(x, m, dim=1)
                for i, j in T.Parallel(block_m, block_v):
                    idx[i, j] = T.if_then_else(x[i, j] == m[i], c * block_v + j, 2147483647)
                T.reduce_min(idx, first, dim=1)
                for i in T.Parallel(block_m):
                    if m[i] > m_run[i]:
                        m_run[i] = m[i]
                        i_run[i] = first[i]
            for i in T.Parallel(block_m):
                Y[bm * block_m + i] = T.cast(i_run[i], "int64")

    x = torch.randn(M, V).bfloat16()
    x[1, 10] = x[1, 500] = 100.0  # a tie across chunks: the first index wins
    x[2, 300] = x[2, 301] = 50.0  # a tie inside a chunk
    y = torch.full((M,), -1, dtype=torch.int64)
    kernel = tileagent.compile(main, target="sim")
    kernel(x, y)
    assert torch.equal(y, torch.argmax(x, dim=-1)) and y[1] == 10 and y[2] == 300
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_a_window_with_a_left_margin_reads_zeros_before_the_start():
    """Played LLM, session 23: "Global reads out of bounds give 0" read as past the end only; a causal convolution's
    window starts 3 steps before its tile, before step 0 for the first block."""
    assert "`T.copy(X[b, t0 - 3], win)`" in " ".join(GUIDE.split())

    @T.prim_func
    def main(X: T.Tensor((2, 96), "float32"), W: T.Tensor((4,), "float32"), Y: T.Tensor((2, 96), "float32")):
        with T.Kernel(3, 2, threads=32) as (bt, b):
            win = T.alloc_shared((35,), "float32")
            T.copy(X[b, bt * 32 - 3], win)
            for i in T.Parallel(32):
                Y[b, bt * 32 + i] = win[i] * W[0] + win[i + 1] * W[1] + win[i + 2] * W[2] + win[i + 3] * W[3]

    x, w = torch.randn(2, 96), torch.randn(4)
    want = torch.nn.functional.conv1d(x[:, None], w.view(1, 1, 4), padding=3)[:, 0, :96]
    for target in ("sim", None):
        y = torch.full_like(x, float("nan"))
        (tileagent.compile(main, target=target) if target else tileagent.compile(main))(x, w, y)
        torch.testing.assert_close(y, want)


def test_the_guides_running_variance_merge_matches_torch_with_a_large_offset():
    """Played LLM, session 23: "reduce to the mean, then reduce (x - mean)^2" read as two passes over a streamed
    column; the guide's (count, mean, M2) merge reads it once and stays accurate in float32 at an offset of 1000."""
    assert "`M2 += M2_b + delta^2 * n_a * n_b /\nn`" in GUIDE
    x = torch.randn(4096, 8, generator=torch.Generator().manual_seed(0)) + 1000.0
    n, mean, m2 = 0, torch.zeros(8), torch.zeros(8)
    for tile in x.split(96):  # float32 throughout, as a kernel would keep it
        n_b, mean_b = tile.shape[0], tile.mean(0)
        m2_b = ((tile - mean_b) ** 2).sum(0)
        n_a, n = n, n + n_b
        delta = mean_b - mean
        mean = mean + delta * n_b / n
        m2 = m2 + m2_b + delta * delta * n_a * n_b / n
    truth = x.double().var(0)
    ours = (m2 / (n - 1)).double()
    assert float(((ours - truth) / truth).abs().max()) < 1e-5  # a tenth of float32's rtol
    naive = ((x * x).mean(0) - x.mean(0) ** 2) * n / (n - 1)  # E[x^2] - mean^2 in float32: what the guide forbids
    assert float(((naive.double() - truth) / truth).abs().max()) > 1e-2


def _gemm(M, N, policy):
    @tileagent.jit(out_idx=[2])
    def k(M, N, K, pol):
        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(1, threads=128) as b:
                As = T.alloc_shared((M, K), "float16")
                Bs = T.alloc_shared((N, K), "float16")
                acc = T.alloc_fragment((M, N), "float32")
                T.copy(A, As)
                T.copy(B, Bs)
                T.gemm(As, Bs, acc, transpose_B=True, policy=getattr(T.GemmWarpPolicy, pol), clear_accum=True)
                T.copy(acc, C)
        return main
    return k.fn(M, N, 64, policy)


def test_the_guides_l005_example_is_one_the_compiler_refuses():
    """Played LLM, session 24: the L005 row's example ("a 16-row tile over 4 warps with FullRow") compiled, and made
    the player avoid FullRow for a decode step's 16-row score tile. The example is now a tile of one 16 x 8 piece."""
    from tileagent.compiler.diagnostics import CompileError

    guide = (REPO / "prompts" / "dsl_guide.md").read_text()
    assert "a 16 x 8 tile, one piece, over 4 warps; a 16 x 64 tile over 4 warps is fine with any policy" in guide
    for policy in ("FullRow", "FullCol", "Square"):
        tileagent.compile(_gemm(16, 64, policy), target="cuda:sm_80")
    with pytest.raises(CompileError, match=r"error\[L005\]"):
        tileagent.compile(_gemm(16, 8, "FullRow"), target="cuda:sm_80")


def _split_gemm(pieces: int):
    """C = A @ B^T of float32 (64, 64) tiles: one float32 T.gemm (pieces 0), or each tile split into ``pieces``
    bfloat16 pieces and the products of order <= pieces - 1 added, smallest first (the guide's float32 recipe)."""
    orders = [(i, j) for i in range(pieces) for j in range(pieces) if i + j < pieces]
    orders.sort(key=lambda ij: -(ij[0] + ij[1]))

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            if pieces == 0:
                A_s = T.alloc_shared((64, 64), "float32")
                B_s = T.alloc_shared((64, 64), "float32")
                T.copy(A, A_s)
                T.copy(B, B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            else:
                a_f = T.alloc_fragment((64, 64), "float32")
                b_f = T.alloc_fragment((64, 64), "float32")
                a_p = T.alloc_shared((pieces, 64, 64), "bfloat16")
                b_p = T.alloc_shared((pieces, 64, 64), "bfloat16")
                T.copy(A, a_f)
                T.copy(B, b_f)
                for p in T.unroll(pieces):  # hi, mid, lo: each the bfloat16 rounding of what is left
                    for i, j in T.Parallel(64, 64):
                        a_p[p, i, j] = T.cast(a_f[i, j], "bfloat16")
                        b_p[p, i, j] = T.cast(b_f[i, j], "bfloat16")
                        a_f[i, j] = a_f[i, j] - T.cast(T.cast(a_f[i, j], "bfloat16"), "float32")
                        b_f[i, j] = b_f[i, j] - T.cast(T.cast(b_f[i, j], "bfloat16"), "float32")
                for i, j in orders:
                    T.gemm(a_p[i, :, :], b_p[j, :, :], acc, transpose_B=True)
            T.copy(acc, C)

    return main


def test_the_float32_gemm_recipe_meets_float32_accuracy_and_a_float32_gemm_is_tf32():
    """The guide's T.gemm paragraph: float32 operands run at TF32 precision (the CPU check too), about 1e-3
    relative; three bfloat16 pieces and six products reach float32's accuracy, two pieces and three do not."""
    assert "TF32 tensor cores" in GUIDE and "three bfloat16 pieces" in GUIDE
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 64, generator=gen), torch.randn(64, 64, generator=gen)
    exact = a.double() @ b.double().T
    errors = {}
    for pieces in (0, 2, 3):
        c = torch.zeros(64, 64)
        tileagent.compile(_split_gemm(pieces), target="cpu")(a, b, c)
        errors[pieces] = float((c.double() - exact).abs().max() / exact.abs().max())
    assert errors[0] > 1e-4 and errors[2] > 1e-6 and errors[3] < 1e-6, errors


def test_the_persistent_gemm_as_the_guide_writes_it():
    """The guide's T.Persistent sentence (played LLM session 27, stuck point 7: recommended, never shown): one block
    per SM walking the output tiles, allocations first, checked on the CPU and in the SIMT emulator."""
    assert "for bm, bn in T.Persistent([T.ceildiv(M," in GUIDE

    def persistent(M, N, K, block_M=64, block_N=64, block_K=32, num_sms=3):
        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(num_sms, threads=128) as bid:
                A_s = T.alloc_shared((block_M, block_K), "float16")
                B_s = T.alloc_shared((block_K, block_N), "float16")
                acc = T.alloc_fragment((block_M, block_N), "float32")
                for bm, bn in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)], num_sms, bid):
                    T.clear(acc)
                    for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                        T.copy(A[bm * block_M, k * block_K], A_s)
                        T.copy(B[k * block_K, bn * block_N], B_s)
                        T.gemm(A_s, B_s, acc)
                    T.copy(acc, C[bm * block_M, bn * block_N])

        return main

    a, b = torch.randn(192, 64).half(), torch.randn(64, 128).half()
    for target in ("cpu", "sim"):
        c = torch.full((192, 128), float("nan"))
        tileagent.compile(persistent(192, 128, 64), target=target)(a, b, c)
        torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_a_counting_sort_as_the_guide_describes_it():
    """The guide's counts / offsets / scatter paragraph: atomic counts into a shared int32 tile at run-time indices,
    T.cumsum of an int32 tile (exact), an exclusive scan as the inclusive one minus the element, consecutive kernel
    scopes through a T.alloc_global workspace, a stable rank by counting the equal keys before each element, and a
    T.Parallel store to a computed index: the stable order of torch.sort."""
    N, B = 96, 8

    @T.prim_func
    def main(Keys: T.Tensor((N,), "int32"), Order: T.Tensor((N,), "int32")):
        Start = T.alloc_global((B,), "int32")
        with T.Kernel(1, threads=32) as bx:
            hist = T.alloc_shared((B,), "int32")
            T.clear(hist)
            for i in T.Parallel(N):
                T.atomic_add(hist[Keys[i]], 1)
            run = T.alloc_fragment((B,), "int32")
            T.copy(hist, run)
            T.cumsum(run, dim=0)
            for b in T.Parallel(B):
                Start[b] = run[b] - hist[b]
        with T.Kernel(1, threads=32) as bx:
            before = T.alloc_fragment((N,), "int32")
            T.clear(before)
            for j in T.serial(N):
                for i in T.Parallel(N):
                    if j < i and Keys[j] == Keys[i]:
                        before[i] = before[i] + 1
            for i in T.Parallel(N):
                Order[Start[Keys[i]] + before[i]] = i

    keys = torch.randint(0, B, (N,), dtype=torch.int32)
    for target in ("cpu", "sim"):
        kernel = tileagent.compile(main, out_idx=[1], target=target)
        assert torch.equal(kernel(keys).long(), torch.sort(keys, stable=True).indices), target


def test_interleaved_pairs_read_through_shared_memory_as_the_guide_says():
    """Rule 1 (played LLM session 39, GPT-OSS's SwiGLU on interleaved gate / up columns): a (block_m, 2 * N) tile
    copied to shared memory and read at xs[i, 2 * j] and xs[i, 2 * j + 1] in T.Parallel(block_m, N) lowers for sm_90a
    and matches torch on the CPU."""
    assert "`xs[i, 2 * j]` and `xs[i, 2 * j + 1]` in `T.Parallel(block_m, N)`" in GUIDE

    @tileagent.jit(out_idx=[1])
    def pairs(M, N, block_m=4, block_n=64):
        @T.prim_func
        def main(x: T.Tensor((M, 2 * N), "float32"), y: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=128) as (bn, bm):
                xs = T.alloc_shared((block_m, 2 * block_n), "float32")
                t = T.alloc_fragment((block_m, block_n), "float32")
                T.copy(x[bm * block_m, bn * 2 * block_n], xs)
                for i, j in T.Parallel(block_m, block_n):
                    t[i, j] = xs[i, 2 * j] * (xs[i, 2 * j + 1] + 1.0)
                T.copy(t, y[bm * block_m, bn * block_n])

        return main

    x = torch.randn(8, 256)
    torch.testing.assert_close(pairs(8, 128)(x), x[:, ::2] * (x[:, 1::2] + 1))
    assert "xs[" in tileagent.compile(pairs.fn(8, 128), out_idx=[1], target="cpu:sm_90a").get_kernel_source()


def test_a_distance_from_the_differences_themselves_keeps_float32_accuracy_on_offset_inputs():
    """The guide's T.gemm paragraph: where the output is a small difference of large sums (cdist as |x|^2 + |y|^2 -
    2 x.y; on an H100 the six-product split was off by more than twice torch's float32 error on inputs sharing an
    offset), compute it from the differences: a T.Parallel of (x - y)^2 and T.reduce_sum."""
    assert "a `T.Parallel` of (x - y)^2 and `T.reduce_sum`" in GUIDE

    @T.prim_func
    def cdist(X: T.Tensor((8, 32), "float32"), Y: T.Tensor((16, 32), "float32"), O: T.Tensor((8, 16), "float32")):
        with T.Kernel(8, threads=128) as i:
            d = T.alloc_fragment((16, 32), "float32")
            s = T.alloc_fragment((16,), "float32")
            for j, k in T.Parallel(16, 32):
                d[j, k] = (X[i, k] - Y[j, k]) * (X[i, k] - Y[j, k])
            T.reduce_sum(d, s, dim=1)
            for j in T.Parallel(16):
                O[i, j] = T.sqrt(s[j])

    gen = torch.Generator().manual_seed(0)
    x, y = 1000 + torch.randn(8, 32, generator=gen), 1000 + torch.randn(16, 32, generator=gen)
    exact = torch.cdist(x.double(), y.double())
    out = torch.full((8, 16), float("nan"))
    tileagent.compile(cdist, target="cpu")(x, y, out)
    assert float(((out.double() - exact).abs() / exact).max()) < 1e-6
    norms = (x.double() ** 2).sum(1, keepdim=True) + (y.double() ** 2).sum(1) - 2 * x.double() @ y.double().T
    form = ((x * x).sum(1, keepdim=True) + (y * y).sum(1) - 2 * x @ y.T).clamp(min=0).sqrt()  # float32, the norm form
    assert float(((form.double() - norms.clamp(min=0).sqrt()).abs() / exact).max()) > 1e-3  # cancellation
