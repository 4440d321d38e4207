"""Pipelined loops whose copies sit under a data-dependent ``if`` (``compiler.lower.pipeline._guarded_copies``):
TileLang's block-sparse GEMM and attention copy their tiles only where a block mask says so. The copies are issued
stages ahead with a start past the tensor where the mask is off (the tile fills with zeros that nothing reads); run
against torch on the CPU and in the SIMT emulator with TMA (producer warpgroup or not) and with cp.async."""

import pytest
import torch

import tileagent
import tileagent.language as T


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _block_sparse_gemm(M, N, K, bm=32, bn=32, bk=32, stages=2, read_outside=False):
    """C = A @ B over the K blocks where Mask[by, bx, k] (TileLang's example_blocksparse_gemm.py); ``read_outside``:
    the loop also reads the A tile outside the ``if`` (then the copy must stay under it)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             Mask: T.Tensor((M // bm, N // bn, K // bk), "bool"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // bk, num_stages=stages):
                if Mask[by, bx, k]:
                    T.copy(A[by * bm, k * bk], A_s)
                    T.copy(B[k * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, acc)
                if read_outside:
                    T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * bm, bx * bn])

    return main


def _reference(a, b, mask, bm=32, bn=32, bk=32):
    m = mask.repeat_interleave(bm, 0).repeat_interleave(bn, 1)  # (M, N, K / bk)
    out = torch.zeros(a.shape[0], b.shape[1])
    for k in range(mask.shape[2]):
        part = a[:, k * bk:(k + 1) * bk].float() @ b[k * bk:(k + 1) * bk].float()
        out += torch.where(m[:, :, k], part, torch.zeros(()))
    return out


@pytest.mark.parametrize("mode", ["cpu", "ws", "tma", "cp_async"])
def test_block_sparse_gemm_is_pipelined_and_right(mode, monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0" if mode == "cp_async" else "1")
    monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "0" if mode == "tma" else "1")
    M, N, K = 64, 64, 160
    kernel = tileagent.compile(_block_sparse_gemm(M, N, K), target="cpu" if mode == "cpu" else "sim")
    if mode != "cpu":
        assert "software pipeline: 2 stages of A_s, B_s" in kernel.get_ir(after="plan_pipelines")
        ir = kernel.get_ir("thread")
        assert ("warp-specialized" in ir) == (mode == "ws") and ("TMA 2d box" in ir) == (mode != "cp_async")
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    mask = torch.rand(M // 32, N // 32, K // 32) < 0.5
    mask[0, 0] = False  # a block with no K block at all: C stays 0 there
    c = torch.full((M, N), float("nan"))
    kernel(a, b, mask, c)
    torch.testing.assert_close(c, _reference(a, b, mask), rtol=1e-3, atol=1e-3)


def test_a_tile_read_outside_the_if_keeps_its_copy_under_it():
    kernel = tileagent.compile(_block_sparse_gemm(64, 64, 96, read_outside=True), target="sim")
    assert "software pipeline" not in kernel.get_ir(after="plan_pipelines")
    a, b = torch.randn(64, 96, dtype=torch.float16), torch.randn(96, 64, dtype=torch.float16)
    mask = torch.ones(2, 2, 3, dtype=torch.bool)
    mask[1, 1, 1] = False  # there the second gemm reads the tiles of block 0 again
    c = torch.full((64, 64), float("nan"))
    kernel(a, b, mask, c)
    want = 2 * _reference(a, b, torch.ones(2, 2, 3, dtype=torch.bool))
    part = [a[32:, k * 32:(k + 1) * 32].float() @ b[k * 32:(k + 1) * 32, 32:].float() for k in range(2)]
    want[32:, 32:] += part[0] - 2 * part[1]  # block 1 skipped by both gemms, block 0's tiles read again
    torch.testing.assert_close(c, want, rtol=1e-3, atol=1e-3)
