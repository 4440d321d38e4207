"""The GEMM template's split K (tileagent/drafters/builtin/templates/gemm.py): a GEMM of few rows splits K's tiles
between blocks of one output tile (``gemm_split``), then sums the float32 parts and runs the epilogue
(``split_epilogue``). The rule's choices against a hand-checked table; each epilogue form (ReLU, bias and residual
scale, an fp32 master weight cast in forward) matches torch on the CPU interpreter, split and not."""

import pytest

from tests.test_builtin_drafter import write_reference
from tests.test_fusion_everyday import _draft
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec

from tests.conftest import REPO, load_module

SUITE = REPO / "bench" / "suite"


def _module(source, tmp_path, name="gemm_draft"):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return load_module(path)


def test_few_output_tiles_split_k_while_the_blocks_fit_the_sms_at_once(tmp_path):
    mod = _module(_draft(REPO / "tasks" / "gemm_relu.py").source, tmp_path)
    table = [  # (M, N, K, schedule, block_K) -> splits, on 132 SMs (528 blocks of 64 x 64 at once)
        ((16, 4096, 4096, "64x64 t128", 64), 8),  # 64 tiles: 512 blocks of 8 K tiles
        ((1, 4096, 1024, "64x64 t128", 64), 4),  # 16 K tiles: runs of 4, no shorter
        ((16, 4096, 4096, "64x64 t128", 32), 8),  # 128 K tiles: 16 runs would give 1024 blocks
        ((256, 4096, 4096, "64x64 t128", 64), 2),  # 256 tiles: 512 blocks
        ((512, 4096, 4096, "64x64 t128", 64), 1),  # 512 tiles fill the SMs already
        ((1024, 4096, 4096, "128x128 t256", 64), 1),  # 256 larger tiles: more than one an SM
        ((16, 4096, 4096, "128x128 t256", 64), 4),  # 32 of them: 128 blocks
        ((16, 4096, 4096, "128x256 t256 persistent", 64), 1),  # a persistent grid never splits
        ((40, 48, 64, "64x64 t128", 64), 1),  # one K tile
        ((16, 4096, 4160, "64x64 t128", 64), 1),  # 65 K tiles: no equal runs
    ]
    assert [mod.pick_split(*args, 132) for args, _ in table] == [want for _, want in table]


@pytest.mark.parametrize("ref", [REPO / "tasks" / "gemm_relu.py", REPO / "tasks" / "matmul_scale_residual.py",
                                 SUITE / "linear_fp32_master.py"], ids=lambda p: p.stem)
def test_a_split_gemm_matches_torch_with_its_epilogue(ref, tmp_path):
    """At M=5, K=512 the rule splits the 8 K tiles in two runs (the CPU sizes as on 132 SMs); SPLIT_K 4 and 1 (no
    split) give the same verdict through the evaluator."""
    source = _draft(ref).source
    assert "SPLIT_K = None" in source
    spec = load_spec(ref)
    config = {name: {"M": 5, "K": 512, "N": 96}[name] for name in spec.configs[0]}
    for split in ("None", "4", "1"):
        candidate = tmp_path / f"{ref.stem}_split{split}.py"
        candidate.write_text(source.replace("SPLIT_K = None", f"SPLIT_K = {split}"))
        (result,) = check_candidate(spec, candidate, device="cpu", configs=[config], seeds=1, seed=0)
        assert result.correct, (split, result.message)
    mod = _module(source, tmp_path, f"{ref.stem}_mod")
    assert mod.pick_split(5, 96, 512, mod.pick_schedule(5, 96, 132), mod.BLOCK_K, 132) == 2


def test_a_split_gemm_adds_a_residual_of_the_outputs_shape(tmp_path):
    """An operand of C's shape (a residual) is read by split_epilogue on its own tile, after the parts' sum."""
    ref = write_reference(tmp_path, "gemm_residual", '''
        class Model(nn.Module):
            def forward(self, a, b, r):
                return F.gelu(a @ b) + r
        ''', "[torch.randn(5, 512, dtype=torch.float16), torch.randn(512, 96, dtype=torch.float16) / 16, "
            "torch.randn(5, 96, dtype=torch.float16)]")
    source = _draft(ref).source
    assert "def split_epilogue" in source and "g_r" in source.split("def split_epilogue")[1]
    for split in ("None", "1"):
        candidate = tmp_path / f"residual_split{split}.py"
        candidate.write_text(source.replace("SPLIT_K = None", f"SPLIT_K = {split}"))
        (result,) = check_candidate(load_spec(ref), candidate, device="cpu", configs=[{}], seeds=1, seed=0)
        assert result.correct, (split, result.message)
