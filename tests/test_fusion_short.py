"""The fusion drafter's short-columns layout (``fusion_short``, issue 14's embedding_bag_mean): a reduction over a few
columns whose reads run along the innermost kept dim is one kernel whose rows lie on the threads and whose columns
an unrolled loop walks (each column's run of the block's rows one T.copy: 16-byte loads), no workspace; with
``SHORT_COLS = 0`` the tiled kernel runs instead. Both match torch on the CPU."""

import pytest
import torch

from tests.conftest import REPO
from tests.test_builtin_drafter import write_reference
from tests.test_fusion import SEED, _candidate
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec


def _bag(module, B, K, V, D, dtype=torch.int64, repeat=False):
    """(the candidate's output, torch's) for random bags; ``repeat``: every bag takes a few rows several times."""
    torch.manual_seed(0)
    weight = torch.randn(V, D).to(torch.float16)
    idx = torch.randint(0, V, (B, K))
    if repeat:
        idx = idx[:, torch.arange(K) % 3]  # rows 0, 1, 2 of each bag, again and again
    model = module["ModelNew"](V, D)
    model.weight.data.copy_(weight)
    want = torch.nn.functional.embedding_bag(idx, weight.float(), mode="mean")
    return model(idx.to(dtype)), want


def test_embedding_bag_mean_is_one_kernel_of_coalesced_gathered_rows(tmp_path):
    """The draft's short kernel: one T.Kernel, no workspace, the columns (the bag's K rows) in an unrolled loop, each
    gathered row's run of the block's values one T.copy; at the suite's GPU size its CUDA loads 16 bytes a thread
    (uint4) with no branch around the load, where the tiled kernel read 2 bytes of K different rows per thread."""
    source, module = _candidate("embedding_bag_mean", tmp_path)
    short = source[source.index("def kernel0_short("):source.index("return main", source.index("def kernel0_short("))]
    assert short.count("T.Kernel(") == 1 and "ws" not in short and "SPLIT" not in short
    assert "for kr in T.unroll(NR):" in short and "T.copy(g_weight[bd0 * s96 + bx1], f0_weight)" in short
    assert "SHORT_COLS = 128" in source and "'SHORT_COLS': [128, 0]" in source
    assert module["schedule_short"](256 * 4096, 8, div=4096) == (1024, 128)
    assert module["schedule_short"](256 * 4096, 129, div=4096) is None  # past SHORT_COLS: the tiled kernel
    cuda = module["kernel0_short"](256, 32000, 8, 4096, "int64", "float16", 1024, 128).get_kernel_source()
    assert "*reinterpret_cast<const uint4*>(&g_weight[tl_s])" in cuda and "__global__" in cuda
    assert cuda.count("__global__") == 1


@pytest.mark.parametrize("B, K, V, D", [(3, 8, 50, 4096), (5, 32, 300, 96), (4, 8, 300, 100), (2, 5, 40, 768)])
def test_embedding_bag_mean_short_and_tiled_match_torch(B, K, V, D, tmp_path):
    """K = 8 and 32 (the suite's), D a multiple of the 8-value vector or not (100: blocks of one 100-value row),
    int64 and int32 indices, bags that repeat rows; SHORT_COLS = 0 runs the tiled kernel, which matches too."""
    _, module = _candidate("embedding_bag_mean", tmp_path)
    assert module["schedule_short"](B * D, K, div=D) is not None
    for dtype in (torch.int64, torch.int32):
        for repeat in (False, True):
            got, want = _bag(module, B, K, V, D, dtype, repeat)
            torch.testing.assert_close(got.float(), want, atol=2e-3, rtol=2e-3)
    module["SHORT_COLS"] = 0  # the knob the GPU session A/Bs: the tiled kernel and its split
    assert module["schedule_short"](B * D, K, div=D) is None
    got, want = _bag(module, B, K, V, D)
    torch.testing.assert_close(got.float(), want, atol=2e-3, rtol=2e-3)


def test_embedding_bag_mean_draft_passes_the_evaluator_at_k8_and_k32(tmp_path):
    source, _ = _candidate("embedding_bag_mean", tmp_path)
    candidate = tmp_path / "embedding_bag_mean_candidate.py"
    candidate.write_text(source)
    spec = load_spec(REPO / "bench" / "suite" / "embedding_bag_mean.py")
    configs = [{"B": 3, "K": 8, "V": 200, "D": 256}, {"B": 3, "K": 32, "V": 200, "D": 100}]
    results = check_candidate(spec, candidate, device="cpu", configs=configs, seeds=1, seed=SEED)
    assert [r.correct for r in results] == [True, True], [r.message for r in results]


def test_column_statistics_read_each_column_as_a_run_of_the_rows(tmp_path):
    """Sums and a max over dim 0 of (N, C) (N short): the short kernel copies each column's row of C values from
    ``bm * BM + r0 * C`` (no divisor needed) and matches torch, as does the tiled kernel."""
    path = write_reference(tmp_path, "colstats", """
        class Model(nn.Module):
            def forward(self, x, y):
                return (x * y).sum(0) + x.amax(0), (x - y).abs().sum(0)
        """, "[torch.randn(6, 200), torch.randn(6, 200)]")
    source, module = _candidate("colstats", tmp_path, path)
    assert "T.copy(g_x[bm * BM + r0 * s9], f0_x)" in source and "short0 = schedule_short(s9, s57)" in source
    x, y = torch.randn(6, 200), torch.randn(6, 200)
    for cols in (128, 0):
        module["SHORT_COLS"] = cols
        a, b = module["ModelNew"]()(x, y)
        torch.testing.assert_close(a, (x * y).sum(0) + x.amax(0))
        torch.testing.assert_close(b, (x - y).abs().sum(0))


def test_a_reduction_over_the_last_dim_keeps_the_tiled_kernel(tmp_path):
    """Its reads run along the columns with the row's stride: no short kernel (the tiled one reads them coalesced)."""
    path = write_reference(tmp_path, "rowstats", """
        class Model(nn.Module):
            def forward(self, x, y):
                return (x * y).sum(1) + x.amax(1)
        """, "[torch.randn(200, 6), torch.randn(200, 6)]")
    source, _ = _candidate("rowstats", tmp_path, path)
    assert "_short" not in source and "schedule_short" not in source and "SHORT_COLS" not in source
