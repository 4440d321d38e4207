"""The acceptance programs of ../shared/examples, as written, on the CPU target at small, ragged sizes."""

import pytest
import torch

from tests.conftest import REPO, load_module


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_gemm_relu_with_col_swizzle_matches_reference(shared_example):
    shared_example("gemm_relu").check(device="cpu", M=256, N=192, K=128)


def test_gemm_relu_with_ragged_sizes_matches_reference(shared_example):
    shared_example("gemm_relu").check(device="cpu", M=200, N=136, K=72)


@pytest.mark.parametrize("C", [32, 96, 160, 320, 1024])
def test_rmsnorm_silu_matches_reference_with_ragged_rows(shared_example, C):
    shared_example("rmsnorm_silu").check(device="cpu", M=37, C=C)


def test_softmax_matches_reference(shared_example):
    shared_example("softmax").check(device="cpu", M=29, N=512)


@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_attn_fwd_matches_reference_with_ragged_seq_len(shared_example, is_causal):
    shared_example("flash_attn_fwd").check(device="cpu", batch=1, heads=2, seq_len=200, dim=64, is_causal=is_causal)


@pytest.mark.parametrize("variant", ["shared", "fragment"])
def test_mla_decode_matches_reference(shared_example, variant):
    shared_example("mla_decode").check(device="cpu", batch=2, heads=128, seqlen_kv=150, variant=variant)


def test_prompt_example_rmsnorm_silu_matches_reference():
    load_module(REPO / "prompts" / "examples" / "rmsnorm_silu.py").check(device="cpu", M=37, C=160)


def test_wrong_kernel_is_caught_by_check(shared_example):
    """The CPU path really computes: a kernel missing the ReLU does not pass the reference."""
    mod = shared_example("gemm_relu")
    kernel = mod.matmul(64, 64, 64, block_M=64, block_N=64, block_K=32)
    a, b = torch.randn(64, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16)
    c = torch.full((64, 64), float("nan"), dtype=torch.float16)
    kernel(a, b, c)
    assert not torch.isnan(c).any()
    assert (c >= 0).all()
    with pytest.raises(AssertionError):
        torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)


def test_prompt_example_softmax_matches_reference():
    load_module(REPO / "prompts" / "examples" / "softmax.py").check(device="cpu", M=5, N=512)
