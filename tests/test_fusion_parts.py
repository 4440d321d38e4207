"""Pointwise kernels written by parts (``fusion_parts``): a cat's parts and the rows a nearest upsampling repeats
computed apart, each part in statements of its own, behind the candidate's knob PARTS."""

import re

import pytest
import torch

from tests.conftest import REPO
from tests.test_fusion import SEED, _candidate
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec


def _check(name, source, tmp_path, configs, parts=True):
    candidate = tmp_path / f"{name}_{'parts' if parts else 'whole'}.py"
    candidate.write_text(source if parts else source.replace("PARTS = True", "PARTS = False"))
    spec = load_spec(REPO / "bench" / "suite" / f"{name}.py")
    results = check_candidate(spec, candidate, device="cpu", configs=configs, seeds=1, seed=SEED)
    assert all(r.correct for r in results) and len(results) == len(configs), [r.message for r in results]


def _body(cuda: str) -> str:
    """The kernel function of a CUDA source (the helpers before it define sinf-like names too)."""
    return cuda[cuda.index("extern \"C\" __global__"):]


def test_a_timestep_embedding_computes_each_value_of_its_own_part_only(tmp_path):
    """cat([sin(emb), cos(emb)]): the whole-row kernel computed both parts for every value (two exp2, a sin and a
    cos) and selected one; by parts, a tile computes emb once (one exp2) and writes its sin to the first part and its
    cos to the second, with no select. Both kernels match the reference, also where the half row (50 columns) is no
    multiple of the 32-column tile."""
    source, module = _candidate("timestep_embedding", tmp_path)
    assert "PARTS = True" in source and "'PARTS': [True, False]" in source
    parts = source[source.index("def kernel0_parts("):source.index("def kernel0(")]
    assert parts.count("T.sin(") == 1 and parts.count("T.cos(") == 1 and parts.count("T.exp2(") == 1
    assert "T.if_then_else" not in parts and 'o0: T.Tensor((s75, 2, z0), "float32")' in parts
    # BR divides 160; 4 values a thread of each part: 160 blocks of 64 threads (80 of 128 left 52 SMs idle)
    assert module["schedule"](256, 160, True, False, False, light=True, parts=2) == (8, 32, 64)
    bm, br, threads = module["schedule"](256, 160, True, False, False, light=True, parts=2)
    cuda = _body(module["kernel0_parts"](160, 320, 256, "float32", bm, br, threads).get_kernel_source())
    select = r"r0_\d+ < 160 \? v\d+_\d+ : v\d+_\d+"  # the whole-row kernel's choice between the parts
    assert cuda.count("sinf(") == 1 and cuda.count("cosf(") == 1 and cuda.count("exp2f(") == 1
    assert not re.search(select, cuda)
    whole = _body(module["kernel0"](160, 320, 256, "float32", 4, 512, 128).get_kernel_source())
    assert whole.count("sinf(") == 1 and whole.count("cosf(") == 1 and whole.count("exp2f(") == 2  # both parts
    assert re.search(select, whole)
    configs = [{"N": 6, "dim": 64}, {"N": 5, "dim": 100}]
    _check("timestep_embedding", source, tmp_path, configs)
    _check("timestep_embedding", source, tmp_path, configs, parts=False)


def test_rotate_half_by_parts_reads_each_half_row_once(tmp_path):
    """rotate_half's cat((-x2, x1)): the whole-row kernel read x as three tiles, two of them shifted by half a row and
    half-masked; by parts each block reads x's two halves once (unmasked 16-byte loads), cos and sin by halves, and
    writes each half of the output from both. The offsets s // 2 (the slice) and s - s // 2 (the second part) are one
    tile, which forward checks before it runs the kernel by parts. Correct either way."""
    source, module = _candidate("rotary_cat", tmp_path)
    parts = source[source.index("def kernel0_parts("):source.index("def kernel0(")]
    assert len(re.findall(r"T\.copy\(t_x_0\[", parts)) == 2 and "T.if_then_else" not in parts
    assert "if PARTS and (s57*s7*s75) * (2*s46 - 2*((s46//2))) == (s57*s7*s75) * s46 and (s46 - ((s46//2))) == " \
           "((s46//2)) else kernel0(" in source  # the parts' sizes, which are also the two tiles' offsets
    bm, br, threads = module["schedule"](4 * 2048 * 32, 64, True, False, False, div=32, half=True, light=True,
                                         parts=2)
    assert br == 64
    cuda = _body(module["kernel0_parts"](128, 2048, 32, 4, *["float16"] * 3, bm, br, threads).get_kernel_source())
    x_loads = re.findall(r"reinterpret_cast<const uint4\*>\(&t_x_0\[", cuda)
    assert len(x_loads) == 2 and "for (int r1 = 0; r1 < 2; ++r1)" in cuda  # 2 x 2 16-byte loads: 64 values
    assert not re.search(r"if \([^\n]*tid % 8\) \* 8 >= 0\) \{\n[^\n]*\n[^\n]*t_x_0", cuda)  # no masked x tile
    configs = [{"B": 2, "S": 5, "H": 2}, {"B": 1, "S": 3, "H": 4}]
    _check("rotary_cat", source, tmp_path, configs)
    _check("rotary_cat", source, tmp_path, configs, parts=False)


def test_nearest_upsampling_by_parts_reads_rows_once_with_vector_loads(tmp_path):
    """F.interpolate(x, scale_factor=2, mode="nearest"): the whole-row kernel gathered each 2-byte value twice per
    output row pair, with 64-bit bounds checks; by parts a block's rows are input rows, read with 8-byte loads into a
    (BM, BR // 2) fragment read at [i, j // 2], and each is written to its two output rows with 16-byte stores.
    Correct by parts and whole, also at widths whose doubled rows are no multiple of the tile (7: 14 columns)."""
    source, module = _candidate("upsample_nearest", tmp_path)
    parts = source[source.index("def kernel0_parts("):source.index("def kernel0(")]
    assert "T.copy(t_x_0[bm * BM, bn * (BR // 2)], f0_x)" in parts and "f0_x[i, j // 2]" in parts
    assert "g_x[" not in parts and 'o0: T.Tensor(((s7*s75*s96), 2, (2*s92)), "float16")' in parts
    bm, br, threads = module["schedule"](2 * 640 * 32, 64, True, False, False, light=True, parts=2)
    cuda = _body(module["kernel0_parts"](32, 2, 32, 640, "float16", bm, br, threads).get_kernel_source())
    assert "reinterpret_cast<const uint2*>(&t_x_0[" in cuda and "g_x" not in cuda and "if (" not in cuda
    assert cuda.count("reinterpret_cast<uint4*>(&o0[") == 2  # one 16-byte store per part (unrolled over rows)
    configs = [{"B": 1, "C": 8, "H": 6, "W": 10}, {"B": 2, "C": 3, "H": 5, "W": 7}]
    _check("upsample_nearest", source, tmp_path, configs)
    _check("upsample_nearest", source, tmp_path, configs, parts=False)


@pytest.mark.parametrize("body, expect", [
    ("return torch.sigmoid(F.interpolate(x, scale_factor=2, mode='nearest')) * 2.0", "math after the upsampling"),
    ("return torch.cat([x * 2.0, x.sigmoid(), -x], dim=-1)", "three parts"),
    ("return torch.cat([x, x[..., :3]], dim=-1)", "unequal parts: the whole-row kernel only"),
])
def test_other_parts_forms_match_the_reference(body, expect, tmp_path):
    """Math after a nearest upsampling (its input read once for both rows of a pair), a cat of three parts, and a cat of
    unequal parts (no kernel by parts) match the reference, by parts and whole."""
    from tests.test_fusion import _assert_correct, _form

    ref, candidate, source = _form(tmp_path, "parts_form", body, "[torch.randn(N, C, H, W)]",
                                   config='{"N": 2, "C": 3, "H": 4, "W": 6}', small=False)
    assert ("kernel0_parts(" in source) == (not expect.startswith("unequal")), expect
    if "after" in expect:  # one read of the input value for both output rows of the pair (the sigmoid is written
        parts = source[source.index("def kernel0_parts("):source.index("def kernel0(")]  # per row: NVVM's CSE)
        assert parts.count("f0_x[i, j // 2]") == 1 and parts.count("T.exp2(") == 2
    if "three" in expect:
        parts = source[source.index("def kernel0_parts("):source.index("def kernel0(")]
        assert "T.if_then_else" not in parts and parts.count("T.exp2(") == 1
    _assert_correct(ref, candidate)
    candidate.write_text(source.replace("PARTS = True", "PARTS = False"))
    _assert_correct(ref, candidate)


CAT_REF = '''import torch
import torch.nn as nn

CONFIGS = {configs}
SMALL_CONFIG = {{"M": 3, "A": 64, "B": 64, "C": 64}}


class Model(nn.Module):
    def forward(self, x, y, z):
        return torch.cat([x.sigmoid(), y * 2.0, z], dim=-1)


def get_inputs(M=3, A=64, B=64, C=64):
    return [torch.randn(M, A), torch.randn(M, B), torch.randn(M, C)]


def get_init_inputs(M=3, A=64, B=64, C=64):
    return []
'''


@pytest.mark.parametrize("configs, parts", [
    ('[{"M": 4, "A": 64, "B": 64, "C": 64}, {"M": 8, "A": 200, "B": 200, "C": 200}]', True),
    ('[{"M": 4, "A": 64, "B": 64, "C": 64}, {"M": 4, "A": 64, "B": 32, "C": 64}]', False),
])
def test_a_cat_by_parts_runs_only_where_its_parts_are_equal(configs, parts, tmp_path):
    """Parts equal at every traced config: the kernel by parts is drafted, and forward runs it only where the parts
    are equal at run time (sizes it was not traced at fall back to the whole-row kernel); parts that differ at a
    traced config: the whole-row kernel alone (the configs' texts must agree). Correct at equal parts of a row of
    several 64-column tiles whose last one is masked (200 = 3 x 64 + 8), and at unequal ones, also where three
    parts add up to three times the first (4 + 2 + 6)."""
    from tests.test_fusion import BuiltinDrafter, DraftTask

    ref = tmp_path / "cat_parts.py"
    ref.write_text(CAT_REF.format(configs=configs))
    draft = BuiltinDrafter().draft(DraftTask(task_name="cat_parts", reference_path=str(ref), reference_source="",
                                             configs=[], turn=1))[0]
    assert ("def kernel0_parts(" in draft.source) == parts
    candidate = tmp_path / "cat_parts_candidate.py"
    candidate.write_text(draft.source.replace("BR_MAX = 4096", "BR_MAX = 64"))
    module = {"__name__": "cat_parts_candidate"}
    exec(compile(candidate.read_text(), str(candidate), "exec"), module)
    if parts:
        assert module["schedule"](8, 200, True, False, False, light=True, parts=2)[1] == 32  # 200 = 6 x 32 + 8
        guard = draft.source[draft.source.index(" if PARTS and "):draft.source.index(" else kernel0(")]
        assert guard.count(" == ") == 3, guard  # the domain's size and the two other parts' sizes
    configs = [{"M": 5, "A": 200, "B": 200, "C": 200}, {"M": 3, "A": 64, "B": 32, "C": 64},
               {"M": 3, "A": 4, "B": 2, "C": 6}]
    results = check_candidate(load_spec(ref), candidate, device="cpu", seeds=1, seed=SEED, configs=configs)
    assert [r.correct for r in results] == [True] * 3, [r.message for r in results]
