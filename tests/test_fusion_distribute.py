"""Fewer passes and kernels for loss-style graphs (issue 14): the DISTRIBUTE plan (``distribute.py``) and a split
reduction's one tile loaded once (``fusion_split.py``, knob SPLIT_ONCE)."""

import re

import torch

from bench.fusion_suite import set_knobs
from tests.conftest import REPO
from tests.test_fusion import SEED, _candidate
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec

LSCE = REPO / "bench" / "suite" / "label_smoothing_ce.py"


def _forward_calls(source: str, branch: str) -> list[str]:
    """The kernel factories forward calls in the ``if DISTRIBUTE:`` branch ("on") or its ``else:`` ("off")."""
    body = source.split("if DISTRIBUTE:\n", 1)[1]
    on, off = body.split("        else:\n", 1)
    return re.findall(r"= (kernel\d+)\(", on if branch == "on" else off)


def test_label_smoothing_reads_the_logits_once_in_two_kernels(tmp_path):
    """cross_entropy(label_smoothing=0.1) drafted as 4 kernels (7 launches; the smoothing term's sum of log_softmax
    a kernel of its own that read the logits again). DISTRIBUTE: the row kernel computes the max, the sum of
    exponentials and the sum of log-probabilities, the latter in the same single pass over a row of several tiles
    (sum(x - m - lse) = sum(x - p) + C * (p - m - lse)), then one kernel over the batch: correct on the CPU with rows
    of one tile and of several (BR_MAX=64: 4 tiles of 32 at C=100), knob on and off."""
    source, module = _candidate("label_smoothing_ce", tmp_path)
    assert "DISTRIBUTE = True" in source and "'DISTRIBUTE': [True, False]" in source
    on, off = _forward_calls(source, "on"), _forward_calls(source, "off")
    assert len(on) == 2 and len(off) == 4
    row = source.split(f"def {on[0]}(", 1)[1].split("return main", 1)[0]
    several = row.split("else:  # several tiles", 1)[1]
    assert several.count("for kk in T.Pipelined(NK") == 1 and "T.reduce_sum(ra" in several  # one pass, the rider
    assert row.split("else:  # several tiles", 1)[0].count("for kk in T.Pipelined(NK") == 3  # one tile: 3 sweeps
    spec = load_spec(LSCE)
    for knobs in ([], ["BR_MAX=64"], ["DISTRIBUTE=False", "BR_MAX=64"]):
        text, missing = set_knobs(source, knobs)
        assert not missing
        path = tmp_path / f"cand_{len(knobs)}.py"
        path.write_text(text)
        results = check_candidate(spec, path, device="cpu", configs=[spec.small_config], seeds=1, seed=SEED,
                                  distributions=["normal", "offset_x1000", "outliers"], tails=False)
        assert [r.correct for r in results] == [True], (knobs, [r.message for r in results])


def test_the_rider_pass_lowers_to_cuda_and_keeps_its_accuracy(tmp_path):
    """The row kernel of several tiles (C=300 in tiles of 128: the last one ragged) on the interpreter and on the
    SIMT emulator of the CUDA lowering (the two sum in other orders: last bits differ): its three row statistics
    match float64 torch, the max exactly, the sum of exponentials about it and the sum of log-probabilities to a few
    float32 ulps, on logits offset by 1000 (sum(x) - C * lse unshifted would lose about 4 digits of the 2000)."""
    import tileagent

    source, module = _candidate("label_smoothing_ce", tmp_path)
    row = _forward_calls(source, "on")[0]
    g = torch.Generator().manual_seed(SEED)
    x = (torch.randn(4, 300, generator=g) + 1000.0).to(torch.bfloat16)
    xd = x.double()
    for target in ("cpu", "sim"):
        kernel = tileagent.compile(module[row].fn(4, 300, "bfloat16", 2, 128, 64), out_idx=[1, 2, 3], target=target)
        mx, se, slp = kernel(x)
        torch.testing.assert_close(mx.double(), xd.amax(1), rtol=0, atol=0)
        torch.testing.assert_close(se.double(), (xd - xd.amax(1, keepdim=True)).exp().sum(1), rtol=5e-7, atol=0)
        torch.testing.assert_close(slp.double(), torch.log_softmax(xd, 1).sum(1), rtol=5e-7, atol=0)


def test_a_split_reduction_of_one_tile_a_block_loads_it_once(tmp_path):
    """cosine_embedding's three dot products per row (one tile a block, SPLIT = 1) loaded x1 and x2 in each pass:
    with SPLIT_ONCE they are copied once before the passes; correct on the CPU either way."""
    source, _ = _candidate("cosine_embedding", tmp_path)
    assert "SPLIT_ONCE = True" in source
    hoisted = source.split("if CH == 1 and SPLIT_ONCE:", 1)[1].split("T.fill(acc", 1)[0]
    assert "T.copy(t_x1_0[bm * BM, sp * BR]" in hoisted and "T.copy(t_x2_1[bm * BM, sp * BR]" in hoisted
    assert source.count("if CH > 1 or not SPLIT_ONCE:") == 4  # the first pass copies both
    spec = load_spec(REPO / "bench" / "suite" / "cosine_embedding.py")
    for knobs in ([], ["SPLIT_ONCE=False"]):
        path = tmp_path / f"cos_{len(knobs)}.py"
        path.write_text(set_knobs(source, knobs)[0])
        results = check_candidate(spec, path, device="cpu", configs=[spec.small_config], seeds=1, seed=SEED,
                                  distributions=["normal"], tails=False)
        assert [r.correct for r in results] == [True], (knobs, [r.message for r in results])
