"""The fusion lowering on everyday ops a new user writes (issue 14, session 25): in-place ops on tensors read
elsewhere, floats computed from sizes, diagonal and unfold views, numbers derived from a Model attribute, and scatters
as reductions. Each drafts and matches torch on the CPU interpreter (the evaluator at a small size), or is declined
naming the op and why."""

import pytest

from tests.test_builtin_drafter import write_reference
from tests.test_fusion import SEED, _assert_correct, _form
from tileagent.drafters.base import DrafterUnavailable, DraftTask
from tileagent.drafters.builtin import BuiltinDrafter
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec


def _draft(ref):
    return BuiltinDrafter().draft(DraftTask(task_name=ref.stem, reference_path=str(ref), reference_source="",
                                            configs=[], turn=1))[0]


def _check(ref, tmp_path, configs=({},)):
    draft = _draft(ref)
    candidate = tmp_path / f"{ref.stem}_candidate.py"
    candidate.write_text(draft.source)
    results = check_candidate(load_spec(ref), candidate, device="cpu", configs=list(configs), seeds=1, seed=SEED)
    assert [r.correct for r in results] == [True] * len(configs), [r.message for r in results]
    return draft.source


def test_an_in_place_op_on_a_tensor_read_elsewhere_is_lowered_out_of_place(tmp_path):
    """``y.add_(1)`` with ``z`` computed from ``y`` before it (and F.cosine_embedding_loss, whose decomposition
    ``copy_``s into a buffer that a ``full_like`` also reads) was declined ("the op copy_"): the op is computed out of
    place and later reads of ``y`` read its result, earlier ones the old value, as in eager."""
    ref = write_reference(tmp_path, "inplace_readers", '''
        class Model(nn.Module):
            def forward(self, x, a, b, y):
                t = x.exp()
                z = t * 2.0
                t.add_(1.0)
                return t + z, F.cosine_embedding_loss(a, b, y, margin=0.1)
        ''', "[torch.randn(6, 40), torch.randn(10, 48), torch.randn(10, 48), torch.randint(0, 2, (10,)) * 2 - 1]")
    _check(ref, tmp_path)


@pytest.mark.parametrize("body", ["y = x * 2.0\n        y.relu_()\n        return y",
                                  "y = x * 2.0\n        z = F.relu(y, inplace=True)\n        return y + z"])
def test_the_template_families_do_not_drop_an_in_place_write(body, tmp_path):
    """The families match a DAG of values traced with torch.fx, which has no writes: ``y.relu_(); return y`` was
    drafted as ``x * 2`` by the elementwise template (a wrong kernel). A write to a value read elsewhere, or through a
    view, now goes to the fusion lowering, which follows it."""
    ref, candidate, _ = _form(tmp_path, "writes", body, "[torch.randn(M, D)]", config='{"M": 6, "D": 40}')
    _assert_correct(ref, candidate)


@pytest.mark.parametrize("body, op", [("y = x * 2.0\n                y[:, 0].mul_(3.0)", "mul_"),
                                      ("y = x.clone()\n                y[:, :3] = 0.0", "(copy_|fill_)")])
def test_an_in_place_write_through_a_view_is_declined_naming_it(body, op, tmp_path):
    """Writing through a view changes its base too, which the lowering does not follow: declined with the op and its
    line, not drafted wrong (the elementwise template drafted both as if the write were not there)."""
    ref = write_reference(tmp_path, "inplace_view", f'''
        class Model(nn.Module):
            def forward(self, x):
                {body}
                return y * 2.0
        ''', "[torch.randn(6, 40)]")
    with pytest.raises(DrafterUnavailable, match=rf"an in-place {op} of a view \(aten::{op} at inplace_view.py:9"):
        _draft(ref)


def test_label_smoothing_reads_a_float_computed_from_the_class_count(tmp_path):
    """F.cross_entropy(label_smoothing=0.1) scales the smoothed term by ``0.1 / C`` (a float of a size, which was
    declined as "a scalar computation truediv"): Python text over the size symbol, lifted across configs."""
    ref = tmp_path / "smoothed_ce.py"
    ref.write_text('''import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{"B": 8, "C": 100}, {"B": 4, "C": 300}]
SMALL_CONFIG = {"B": 8, "C": 100}


class Model(nn.Module):
    def forward(self, logits, labels):
        return F.cross_entropy(logits.float(), labels, label_smoothing=0.1)


def get_inputs(B=8, C=100):
    return [torch.randn(B, C, dtype=torch.bfloat16), torch.randint(0, C, (B,))]


def get_init_inputs(B=8, C=100):
    return []
''')
    source = _check(ref, tmp_path, [{"B": 8, "C": 100}, {"B": 4, "C": 300}])
    assert "(0.1 / (1.0 * s" in source


@pytest.mark.parametrize("body", ["return torch.diagonal(x, offset=3) * 2.0, torch.diagonal(x, -2).sum()",
                                  "return x.unfold(1, 40, 16) * torch.hann_window(40, device=x.device)",
                                  "return torch.diagonal(x.unfold(1, 8, 8), dim1=0, dim2=2)"])
def test_diagonal_and_unfold_are_index_rewrites(body, tmp_path):
    """torch.diagonal (an offset either way, a length min(rows, columns - offset)) and Tensor.unfold (overlapping
    frames of a signal, STFT framing) were declined ("the op diagonal" / "unfold"): views that only rewrite the index
    of their operand's read."""
    ref, candidate, _ = _form(tmp_path, "views", body, "[torch.randn(M, D)]", config='{"M": 12, "D": 300}')
    _assert_correct(ref, candidate)


def test_frames_of_a_signal_are_read_per_value_so_a_block_takes_many_frames(tmp_path):
    """STFT framing on the H200 (round 2, session 26): each frame's samples were a row-uniform fragment copied at the
    block's first row, which forced one 400-value frame a block (96k blocks, 49% of a copy). A base that moves with
    every row of short rows is read per value now, so the schedule is free to put rows together."""
    ref, candidate, source = _form(tmp_path, "frames", "return x.unfold(1, 40, 16) * 2.0", "[torch.randn(M, D)]",
                                   config='{"M": 12, "D": 300}')
    assert "T.copy(g_x[" not in source and "div=1" not in source and "v0 = T.cast(g_x[r0 + " in source
    _assert_correct(ref, candidate)


def test_a_number_derived_from_a_model_attribute_is_lifted(tmp_path):
    """A diffusion timestep embedding computes ``half = self.dim // 2`` in forward (arange's length, a divisor, the
    cat's offset): the kernels' numbers 32, 160, 640 across configs were declined as following no shape or attribute;
    they are now ``self.dim // 2``, read in forward, and the draft is correct at every config."""
    ref = tmp_path / "timestep_embedding.py"
    ref.write_text('''import math

import torch
import torch.nn as nn

CONFIGS = [{"N": 6, "dim": 320}, {"N": 5, "dim": 1280}]
SMALL_CONFIG = {"N": 6, "dim": 64}
FIXED_INPUTS = [0]


class Model(nn.Module):
    def __init__(self, dim=320):
        super().__init__()
        self.dim = dim

    def forward(self, t):
        half = self.dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        emb = t[:, None].float() * freqs[None, :]
        return torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)


def get_inputs(N=6, dim=320):
    return [torch.randint(0, 1000, (N,)).float()]


def get_init_inputs(N=6, dim=320):
    return [dim]
''')
    source = _check(ref, tmp_path, [{"N": 6, "dim": 64}, {"N": 3, "dim": 320}])
    assert "= self.dim // 2\n" in source


SCATTER_FORMS = {  # forward body (x: (M, D) float, ids: (M, L) int64 in [0, D), j: (L,) int64 in [0, M)) -> output
    "histogram": "return torch.zeros_like(x).scatter_add_(1, ids, torch.ones_like(ids, dtype=x.dtype))",
    "int_counts": "return torch.zeros(x.shape, dtype=torch.int64, device=x.device).scatter_add(1, ids, "
                  "torch.ones_like(ids))",
    "one_hot_scatter": "return x + torch.zeros_like(x).scatter_(1, ids[:, :1], 1.0)",
    "scatter_amax": "return x.scatter_reduce(1, ids, torch.sin(ids * 1.0), reduce='amax')",
    "index_add": "return x.index_add(0, j, y, alpha=0.5)",
    "scatter_amin_fp16": "return x.half().scatter_reduce(1, ids, torch.cos(ids * 0.5).half(), reduce='amin')",
    "scatter_add_dim0": "return x[:8].scatter_add(0, ids[:, :24] % 8, y[:12])",
}


@pytest.mark.parametrize("form", sorted(SCATTER_FORMS))
def test_scatters_to_few_positions_are_reductions_over_the_index(form, tmp_path):
    """scatter_add (a histogram, int64 counts), scatter of a number (a one-hot), scatter_reduce amax and index_add
    were declined ("the op scatter_add" / "index_put"): each output element reduces the source values whose index
    names it (up to SCATTER_BINS positions along the dim), in float32 for a float output."""
    ref, candidate, _ = _form(tmp_path, form, SCATTER_FORMS[form],
                              "[torch.randn(M, D), torch.randint(0, D, (M, L)), torch.randint(0, M, (L,)), "
                              "torch.randn(L, D)]", "x, ids, j, y", config='{"M": 12, "D": 24, "L": 150}')
    _assert_correct(ref, candidate)


def test_a_scatter_into_many_positions_is_declined_naming_it(tmp_path):
    """index_add into thousands of rows (a MoE combine) would make every row read the whole index: declined with the
    op, the count and the line, not drafted slow."""
    ref = write_reference(tmp_path, "index_add_rows", '''
        class Model(nn.Module):
            def forward(self, h, src, j):
                return h.index_add(0, j, src)
        ''', "[torch.randn(300, 8), torch.randn(40, 8), torch.randint(0, 300, (40,))]")
    with pytest.raises(DrafterUnavailable, match=r"index_put into 300 positions along dim 0 \(more than 256: .*\) "
                                                 r"\(aten::index_put at index_add_rows.py:8"):
        _draft(ref)


def test_a_sum_scattered_into_16_bits_is_declined_naming_it(tmp_path):
    """Eager rounds a bfloat16 index_add after every add (on CUDA in the atomics' order): with many indices on one
    row it is 0.05 off the exact sum, where a float32 sum rounded once is within 0.015, and the evaluator judges
    against eager. Declined, not drafted wrong."""
    ref = write_reference(tmp_path, "index_add_bf16", '''
        class Model(nn.Module):
            def forward(self, h, src, j):
                return h.index_add(0, j, src)
        ''', "[torch.randn(12, 8, dtype=torch.bfloat16), torch.randn(150, 8, dtype=torch.bfloat16), "
           "torch.randint(0, 12, (150,))]")
    with pytest.raises(DrafterUnavailable, match=r"index_put adding into torch.bfloat16 \(eager rounds"):
        _draft(ref)


@pytest.mark.parametrize("body", [
    "return torch.where(x > 0, x, torch.tensor(torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device))",
    "w = torch.tensor([0.25, 0.5, 0.25], device=x.device)\n        "
    "return torch.maximum(x[:, :-2] * w[0] + x[:, 1:-1] * w[1] + x[:, 2:] * w[2], torch.tensor(-0.5))"])
def test_tensors_made_of_python_numbers_in_forward_keep_their_values(body, tmp_path):
    """``torch.tensor(torch.finfo(dtype).min, device=x.device)`` (Hugging Face's mask fill) and a small list of taps
    failed the trace (a tensor made on the meta device has no values): they trace as ``full`` values."""
    ref, candidate, _ = _form(tmp_path, "constants", body, "[torch.randn(M, D, dtype=torch.float16)]",
                              config='{"M": 6, "D": 40}')
    _assert_correct(ref, candidate)


RUNNING_FORMS = {  # forward body (x, y: (M, D)) -> what it returns
    "cummax_values": "return torch.cummax(x, dim=1).values",
    "cummin_dim0_fp16": "return torch.cummin(x.half(), dim=0)[0] * 2",
    "logcumsumexp": "return torch.logcumsumexp(x, dim=1)",
    "logcumsumexp_reverse_then_sum": "c = torch.logcumsumexp(x.flip(1), dim=1).flip(1)\n        return c, c.sum(-1)",
}


@pytest.mark.parametrize("form", sorted(RUNNING_FORMS))
def test_running_max_min_and_logcumsumexp_are_scans(form, tmp_path):
    """cummax / cummin (their values) and logcumsumexp were declined ("the op cummax" / "logcumsumexp"): scans with
    the max / min combine or log(exp(a) + exp(b)), over a row of 5 tiles here (BR_MAX = 64), composed with flips,
    transposes and a sum like cumsum."""
    ref, candidate, source = _form(tmp_path, form, RUNNING_FORMS[form], "[torch.randn(M, D), torch.randn(M, D)]",
                                   "x, y")
    assert "T.alloc_shared((BM, BR)" in source and "BR_MAX = 64" in source
    _assert_correct(ref, candidate, ("normal", "offset"))


def test_the_indices_of_a_running_maximum_are_declined_naming_them(tmp_path):
    ref = write_reference(tmp_path, "cummax_indices", '''
        class Model(nn.Module):
            def forward(self, x):
                return torch.cummax(x, dim=1).indices
        ''', "[torch.randn(6, 40)]")
    with pytest.raises(DrafterUnavailable, match=r"the indices of a running maximum or minimum \(aten::cummax at "
                                                 r"cummax_indices.py:8"):
        _draft(ref)


@pytest.mark.parametrize("body", ["return torch.atan2(y, x), torch.sqrt(x * x + y * y)",
                                  "return torch.remainder(x * 3.0 + 3.141592653589793, 6.283185307179586) - 3.14159",
                                  "return torch.fmod(x.half() * 5.0, -1.5), torch.remainder(x, y)"])
def test_atan2_and_float_remainders_are_exact_intrinsics(body, tmp_path):
    """atan2 (an STFT's phase) and float fmod / remainder (a phase wrapped to [-pi, pi)) were declined: T.atan2 and
    T.fmod (C's atan2f / fmodf; fmod is exact, as torch's), remainder moved to the divisor's sign as torch does."""
    ref, candidate, _ = _form(tmp_path, "phase", body, "[torch.randn(M, D), torch.randn(M, D)]", "x, y",
                              config='{"M": 6, "D": 100}')
    _assert_correct(ref, candidate, ("normal", "ties", "normal_x3"))


LAYERNORM_HW = '''import torch
import torch.nn as nn

CONFIGS = [{"N": 64, "C": 32, "H": 64, "W": 64}, {"N": 16, "C": 128, "H": 32, "W": 32}]
SMALL_CONFIG = {"N": 2, "C": 3, "H": 6, "W": 10}
FREE_DIMS = ["N"]


class Model(nn.Module):
    def __init__(self, H=64, W=64):
        super().__init__()
        self.norm = nn.LayerNorm([H, W], eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.1)
            self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x):
        return self.norm(x)


def get_inputs(N=64, C=32, H=64, W=64):
    return [torch.randn(N, C, H, W)]


def get_init_inputs(N=64, C=32, H=64, W=64):
    return [H, W]
'''


def test_a_number_that_is_a_product_of_adjacent_sizes_is_lifted(tmp_path):
    """nn.LayerNorm([H, W]) normalizes rows of H * W values, a number (60, 4096, 1024 across configs) that was
    declined as following no shape or attribute (the (H, W) weight makes torch specialize H and W): it is now
    ``x.shape[2] * x.shape[3]``, read in forward, and the draft is correct at other sizes."""
    ref = tmp_path / "layernorm_hw.py"
    ref.write_text(LAYERNORM_HW)
    source = _check(ref, tmp_path, [{"N": 2, "C": 3, "H": 6, "W": 10}, {"N": 1, "C": 2, "H": 16, "W": 16}])
    assert "= x.shape[2] * x.shape[3]\n" in source


def test_the_mean_of_a_row_of_one_tile_is_corrected_by_its_deviations(tmp_path):
    """A row of one tile summed its values plainly, then the squared deviations: at inputs near 1000 the mean of 48
    values was off by up to 1.3e-4 (twice torch's error; LayerNorm over (4, 12) failed the evaluator's large-mean
    inputs). The deviations pass now also sums ``x - mean`` and corrects the sum with it."""
    ref = tmp_path / "layernorm_hw.py"
    ref.write_text(LAYERNORM_HW)
    candidate = tmp_path / "layernorm_hw_candidate.py"
    candidate.write_text(_draft(ref).source)
    results = check_candidate(load_spec(ref), candidate, device="cpu", configs=[{"N": 2, "C": 3, "H": 4, "W": 12}],
                              seeds=3, distributions=["offset_x1000"], seed=SEED)
    assert [r.correct for r in results] == [True], [r.message for r in results]


def test_per_channel_fake_quantization_is_pointwise_math(tmp_path):
    """torch.fake_quantize_per_channel_affine (QAT) has no meta kernel, so the trace failed ("make_fx could not trace
    ... fake_quantize_per_channel_affine_cachemask"): it is decomposed as ATen computes it, round(x * (1 / scale)) +
    zero point (ties to even), clamped, then back, and drafted with the scale's amax reduction."""
    ref, candidate, _ = _form(tmp_path, "fake_quant", "scale = x.abs().amax(dim=1) / 127.0\n        "
                              "zp = torch.zeros(x.shape[0], dtype=torch.int32, device=x.device)\n        "
                              "return torch.fake_quantize_per_channel_affine(x, scale, zp, 0, -128, 127)",
                              "[torch.randn(M, D)]", config='{"M": 6, "D": 40}')
    _assert_correct(ref, candidate, ("normal", "ties"))
