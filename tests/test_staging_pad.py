"""Bank-conflict padding of staging tiles (compiler.layout.staging_pad): a shared tile that only carries a gemm's
accumulator out to global memory gets 16 bytes after each row, where wgmma's accumulator layout stores a warp's 8
rows x 16 bytes at once and rows of 256 bytes start on one bank; any other use of the tile keeps it dense. Checked
against hand-counted wavefronts, in the emitted CUDA, and by the sm_90a emulator against torch."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.layout.staging_pad import _wavefronts


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_wavefronts_of_hand_counted_stores():
    # wgmma's accumulator to fp16: lane l stores 4 bytes at row l // 4, bytes 4 * (l % 4) on
    rows_of = [(lane // 4, 4 * (lane % 4)) for lane in range(32)]
    assert _wavefronts([r * 256 + c for r, c in rows_of], 4) == 8  # every row starts on bank 0: 8 words a bank
    assert _wavefronts([r * 272 + c for r, c in rows_of], 4) == 1  # 16 bytes a row: row r on banks 4r..4r+3
    assert _wavefronts([16 * lane for lane in range(32)], 16) == 4  # 16-byte stores: 4 phases of 8 lanes
    assert _wavefronts([256 * lane for lane in range(32)], 16) == 32  # one row each: 8 lanes a bank, 4 phases
    assert _wavefronts([2 * lane for lane in range(32)], 2) == 1  # 2-byte stores: two lanes a word, no conflict


def _gemm_epilogue(M, N, K, bm, bn, parallel_read=False):
    """C = A @ B with each block's accumulator staged in C_s and copied out (C's rows are N apart: one bulk store a
    row); ``parallel_read``: the epilogue also reads C_s in a T.Parallel loop (not a staging tile any more)."""

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, K), "float16")
            B_s = T.alloc_shared((K, bn), "float16")
            C_s = T.alloc_shared((bm, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float")
            T.copy(A[by * bm, 0], A_s)
            T.copy(B[0, bx * bn], B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            T.copy(acc, C_s)
            if parallel_read:
                for i, j in T.Parallel(bm, bn):
                    C_s[i, j] = C_s[i, j] * 2
            T.copy(C_s, C[by * bm, bx * bn])
    return k


@pytest.mark.parametrize("parallel_read", [False, True])
def test_an_accumulators_staging_tile_is_padded_only_when_copies_alone_use_it(parallel_read):
    k = tileagent.compile(_gemm_epilogue(128, 256, 64, 64, 128, parallel_read), target="sim")
    src = k.get_kernel_source()
    assert "cp.async.bulk.global.shared::cta.bulk_group" in src
    assert ("C_s[tid * 136]" in src) == (not parallel_read)  # the bulk store's row r from thread r
    assert ("C_s[tid * 128]" in src) == parallel_read
    small = tileagent.compile(_gemm_epilogue(128, 256, 32, 64, 128), target="sim").get_kernel_source()
    assert "C_s[tid * 128]" in small  # 28 KB a block: 8 by shared memory per SM, padded 7: not padded
    a, b = torch.randn(128, 64, dtype=torch.float16), torch.randn(64, 256, dtype=torch.float16)
    c = torch.full((128, 256), float("nan"), dtype=torch.float16)
    k(a, b, c)
    want = (a.float() @ b.float()) * (2 if parallel_read else 1)
    torch.testing.assert_close(c.float(), want, rtol=1e-2, atol=1e-2)


def test_flash_attention_epilogue_is_padded(shared_example):
    """The shared example's O_s (128 x 128 fp16 from the P @ V accumulator): 136 halves a row for sm_90a."""
    fa = shared_example("flash_attn_fwd")
    k = fa.flash_attn_fwd.fn(2, 2, 256, 128, False, block_M=128, block_N=128, num_stages=2, threads=256)
    assert "&O_s[tid * 136]" in tileagent.compile(k, target="cuda:sm_90a").get_kernel_source()
