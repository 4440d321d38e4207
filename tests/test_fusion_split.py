"""The fusion drafter's split reductions when ``schedule_split`` picks SPLIT == 1 (``fusion_split.scopes``, issue
14): the block's partials are its rows' whole reductions, so with ``FINISH_IN_PLACE`` (drafted on) the first kernel
writes the row outputs itself and the prim_func holds one kernel, not two (the second only copied the partials
through global memory: a launch of 2-4 us on an H200 for ops of 10-40 us). ``FINISH_IN_PLACE = False`` keeps the
second kernel (the GPU session's A/B); both match torch, SPLIT == 1 or not."""

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import REPO
from tests.test_fusion import SEED, _candidate
from tileagent.compiler.ir.stmt import Kernel
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec


def _load(source: str, path):
    """The candidate ``source`` written to ``path`` (the DSL parses prim_funcs from their file) and run."""
    path.write_text(source)
    module = {"__name__": path.stem}
    exec(compile(source, str(path), "exec"), module)
    return module


def _knob(source: str, on: bool) -> str:
    assert "FINISH_IN_PLACE = True" in source
    return source.replace("FINISH_IN_PLACE = True", f"FINISH_IN_PLACE = {on}")


def test_cosine_embedding_rows_at_split_one_run_one_kernel(tmp_path):
    """cosine_embedding's row kernel (three dot products per row) at both suite sizes: SPLIT == 1 (2048 blocks of 4
    rows; 2048 blocks of 1 row), so its prim_func holds one T.Kernel and its CUDA one ``__global__`` that stores no
    partial; with the knob off, two of each, the first storing the partials the second reads. The loss over the rows
    (one row of B values) still splits over blocks, two kernels."""
    source, _ = _candidate("cosine_embedding", tmp_path)
    for on in (True, False):
        module = _load(_knob(source, on), tmp_path / f"cosine_{on}.py")
        for B, D, bm in ((8192, 768, 4), (2048, 4096, 1)):
            sched = module["schedule_split"](B, D)
            assert sched[0] == bm and sched[3] == 1, sched
            args = (B, D, "float32", "float32", *sched)
            func = module["kernel0"].get_tir(*args)
            kernels = 1 if on else 2
            assert sum(isinstance(s, Kernel) for s in func.body) == kernels
            cuda = module["kernel0"](*args).get_kernel_source()
            assert cuda.count("__global__") == kernels
            assert ("ws0_0[" in cuda) == (not on) and "w0_0[" in cuda  # in place: no partial stored or read
        loss = module["schedule_split"](1, 8192)
        assert loss[3] > 1
        func = module["kernel1"].get_tir(8192, "int64", *loss)
        assert sum(isinstance(s, Kernel) for s in func.body) == 2


@pytest.mark.parametrize("B, D", [(600, 96), (10, 96), (3, 300)])
def test_cosine_embedding_matches_torch_with_the_rows_finished_in_place_or_not(B, D, tmp_path):
    """B=600: the row kernel at SPLIT == 1 (in place), the loss over 600 values split over 4 blocks (two kernels);
    B=10: both in place; D=300 at BR_MAX 128: the rows split over 2 blocks of 2 column tiles (two kernels). The
    knob off gives the same numbers."""
    source, _ = _candidate("cosine_embedding", tmp_path)
    torch.manual_seed(0)
    x1, x2 = torch.randn(B, D), torch.randn(B, D)
    y = torch.randint(0, 2, (B,)) * 2 - 1
    want = F.cosine_embedding_loss(x1, x2, y, margin=0.1)
    splits = {}
    for on in (True, False):
        text = _knob(source, on)
        if D == 300:
            text = text.replace("BR_MAX = 4096", "BR_MAX = 128")
        module = _load(text, tmp_path / f"cosine_{on}.py")
        splits[on] = (module["schedule_split"](B, D)[3], module["schedule_split"](1, B)[3])
        torch.testing.assert_close(module["ModelNew"]()(x1, x2, y), want, atol=1e-5, rtol=1e-5)
    assert splits[True] == splits[False] == {600: (1, 4), 10: (1, 1), 3: (2, 1)}[B]


# a config where the op's split kernel runs SPLIT == 1, the knobs that reach that kernel, and its schedule_split call
SPLIT_ONE = {
    "cross_entropy": ({"M": 6, "V": 100}, {}, ((1, 6), {})),
    "label_smoothing_ce": ({"B": 8, "C": 100}, {"DISTRIBUTE": False}, ((8, 100), {})),  # its row kernel (kernel2)
    "mse_loss": ({"B": 2, "N": 50}, {}, ((1, 100), {})),  # 100 values: one tile
    "frobenius_norm": ({"B": 1, "F": 2, "HW": 8}, {}, ((1, 128), {})),
    "embedding_bag_mean": ({"B": 3, "K": 5, "V": 100, "D": 64}, {"SHORT_COLS": 0}, ((192, 5), {"div": 64})),
}


@pytest.mark.parametrize("name", sorted(SPLIT_ONE))
def test_other_split_drafts_at_split_one_pass_the_evaluator_either_way(name, tmp_path):
    """The other suite drafts with a split kernel (a loss over rows, a norm, label smoothing's sums over classes
    with DISTRIBUTE off, EmbeddingBag's tiled kernel with SHORT_COLS off) at a config where it runs SPLIT == 1:
    correct with FINISH_IN_PLACE on and off."""
    source, _ = _candidate(name, tmp_path)
    assert "if IN_PLACE:" in source and "if not IN_PLACE:" in source
    config, knobs, (args, kwargs) = SPLIT_ONE[name]
    for k, v in knobs.items():
        source = source.replace(f"\n{k} = ", f"\n{k} = {v}  # was ", 1)
    spec = load_spec(REPO / "bench" / "suite" / f"{name}.py")
    for on in (True, False):
        candidate = tmp_path / f"{name}_{on}.py"
        module = _load(_knob(source, on), candidate)
        assert module["schedule_split"](*args, **kwargs)[3] == 1
        results = check_candidate(spec, candidate, device="cpu", configs=[config], seeds=1, seed=SEED)
        assert [r.correct for r in results] == [True], (on, [r.message for r in results])
