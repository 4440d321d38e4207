"""TileLang's chunked retention forward (``linear_attention/example_retention_fwd.py``, copied unchanged to
``bench/tilelang_examples``): numbers against torch in the SIMT emulator, and the code its sm_90a build gets: the
global tile scaled into shared memory as 16-byte runs on both sides (a swizzled shared run included), no bounds check
on ``i_b = i_bh // H`` (a Let's range), and one more block per SM from a launch bound where the registers alone held
it back (``compiler.runtime.occupancy_bound``: TileLang's CUDA for the kernel fits three blocks too)."""

import math
import re
from pathlib import Path

import pytest
import torch

from tileagent.compat.run import load_script
from tileagent.compiler.resources import cubin_functions

EXAMPLE = Path(__file__).resolve().parents[1] / "bench/tilelang_examples/linear_attention/example_retention_fwd.py"


def _reference(q, k, v):
    """o[t] = sum over s <= t of decay_h^(t - s) (q_t . k_s) / sqrt(D) v_s, decay_h = 1 - 2^(-5 - h)."""
    B, S, H, D = q.shape
    t = torch.arange(S)
    out = torch.empty(B, S, H, v.shape[-1])
    for h in range(H):
        decay = torch.tensor(1 - 2.0 ** (-5 - h))
        mask = torch.where(t[:, None] >= t[None, :], decay ** (t[:, None] - t[None, :]).clamp(min=0).float(), 0.0)
        scores = q[:, :, h].float() @ k[:, :, h].float().transpose(1, 2) * D ** -0.5
        out[:, :, h] = (scores * mask) @ v[:, :, h].float()
    return out


def test_retention_forward_matches_torch_in_the_emulator(tilelang):
    ns = load_script(EXAMPLE)
    torch.manual_seed(0)
    B, S, H, D = 1, 128, 2, 128  # two 64-wide blocks along K and V: the kernel's partial outputs, summed
    q, k, v = (torch.randn(B, S, H, D, dtype=torch.float16) * 0.5 for _ in range(3))
    kernel = tilelang.compile(ns["chunk_retention_fwd_kernel"].get_tir(B, S, H, D, D), out_idx=3, target="sim",
                              pass_configs={"tl.disable_warp_specialized": True})
    out = kernel(q, k, v).sum(0)
    torch.testing.assert_close(out.float(), _reference(q, k, v), rtol=2e-2, atol=2e-2)


def test_retention_forward_moves_its_tiles_as_vectors_and_fits_three_blocks_per_sm(tilelang):
    ns = load_script(EXAMPLE)
    kernel = tilelang.compile(ns["chunk_retention_fwd_kernel"].get_tir(4, 2048, 32, 128, 128), out_idx=3,
                              target="cuda:sm_90a", pass_configs={"tl.disable_warp_specialized": True})
    src = kernel.get_kernel_source()
    body = src[src.index("__global__"):]
    assert "i_b >= 0" not in body and "i_b < 4" not in body  # i_b = i_bh // 32 with i_bh < 128
    assert "*reinterpret_cast<const uint4*>(&Q[tl_s])" in body  # q = Q * scale: 8 halves a load
    assert re.search(r"\*reinterpret_cast<uint4\*>\(&q\[tl_d\]\) = ", body)  # and a store, through the swizzle
    info = cubin_functions(kernel.cubin())["chunk_retention_fwd_kernel"]
    # three blocks' registers fit the SM's 64K: by a launch bound (178 -> 168, runtime.occupancy_bound) or, since its
    # one-warpgroup wgmmas lost their warpgroup term, from ptxas's first build (168)
    assert info.registers <= 168 and 3 * 128 * info.registers <= 65536 and info.frame_bytes == 0
    shared = math.ceil(kernel.module.kernels[0].shared_bytes / 1024)
    assert 3 * (shared + 1) <= 228  # shared memory holds three blocks: the registers were what held them back


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_retention_forward_on_the_gpu(tilelang):
    """The bench's sizes (B 4, S 2048, H 32, D 128) on the GPU against torch, output poisoned first."""
    ns = load_script(EXAMPLE)
    torch.manual_seed(0)
    B, S, H, D = 4, 2048, 32, 128
    q, k, v = (torch.randn(B, S, H, D, dtype=torch.float16, device="cuda") * 0.5 for _ in range(3))
    kernel = tilelang.compile(ns["chunk_retention_fwd_kernel"].get_tir(B, S, H, D, D), target="cuda",
                              pass_configs={"tl.disable_warp_specialized": True})
    out = torch.full((2, B, S, H, D), float("nan"), dtype=torch.float16, device="cuda")
    kernel(q, k, v, out)
    want = _reference(q[:, :256].cpu(), k[:, :256].cpu(), v[:, :256].cpu())  # causal: a prefix needs only itself
    torch.testing.assert_close(out.sum(0)[:, :256].float().cpu(), want, rtol=2e-2, atol=2e-2)
    assert not out.isnan().any()
