"""Row gathers (``compiler.lower.gather``): a ``T.Parallel`` loop filling a shared tile with rows of a global tensor
picked by an index (TileLang's sparse MLA: ``KV_shared[i, d] = KV[b, Indices[..., k * BI + i], g, d]``) moves each
thread's runs as one access of 16 bytes, and in a ``T.Pipelined`` loop it is a producer issued ahead by cp.async.
Checked against torch in the SIMT emulator of the lowering, with indices outside the table (rows of zeros)."""

import pytest
import torch

import tileagent
import tileagent.language as T


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _gather_gemm(N, R, D, BI, topk, stages):
    """O[n] = Q[n] @ sum over the blocks k of KV[Idx[n, k * BI:(k + 1) * BI]]^T (rows outside KV count as zeros)."""

    @T.prim_func
    def main(KV: T.Tensor((R, D), "bfloat16"), Idx: T.Tensor((N, topk), "int32"),
             Q: T.Tensor((N, 64, D), "bfloat16"), O: T.Tensor((N, 64, BI), "float32")):
        with T.Kernel(N, threads=128) as bx:
            Q_s = T.alloc_shared((64, D), "bfloat16")
            KV_s = T.alloc_shared((BI, D), "bfloat16")
            acc = T.alloc_fragment((64, BI), "float32")
            T.copy(Q[bx, :, :], Q_s)
            T.clear(acc)
            for k in T.Pipelined(topk // BI, num_stages=stages):
                for i, d in T.Parallel(BI, D):
                    KV_s[i, d] = KV[Idx[bx, k * BI + i], d]
                T.gemm(Q_s, KV_s, acc, transpose_B=True)
            T.copy(acc, O[bx, :, :])

    return main


def _gathered_rows(kv, idx):
    inside = (idx >= 0) & (idx < kv.shape[0])
    return torch.where(inside[..., None], kv[idx.clamp(0, kv.shape[0] - 1).long()], torch.zeros((), dtype=kv.dtype))


@pytest.mark.parametrize("target,stages", [("sim:sm_90a", 2), ("sim:sm_90a", 3), ("sim:sm_80", 2),
                                           ("sim:sm_90a", 0)])
def test_gathered_rows_feed_the_gemm(target, stages):
    N, R, D, BI, topk = 2, 40, 64, 16, 48
    kernel = tileagent.compile(_gather_gemm(N, R, D, BI, topk, stages), target=target)
    ir = kernel.get_ir("thread")
    if stages:
        assert f"software pipeline: {stages} stages of KV_s" in kernel.get_ir(after="plan_pipelines")
        assert "row gather: cp.async 16B" in ir
    else:
        assert "row gather: vectorized ld/st x8" in ir
    kv, q = torch.randn(R, D).bfloat16(), torch.randn(N, 64, D).bfloat16()
    idx = torch.randint(-3, R + 5, (N, topk), dtype=torch.int32)
    idx[0, :3] = torch.tensor([-1, R, R + 100])  # rows outside the table: zeros
    out = torch.full((N, 64, BI), float("nan"))
    kernel(kv, idx, q, out)
    rows = _gathered_rows(kv, idx).float().reshape(N, topk // BI, BI, D).sum(1)  # sum over k of Q @ rows^T
    torch.testing.assert_close(out, torch.einsum("nhd,nbd->nhb", q.float(), rows), rtol=1e-4, atol=1e-4)


def _gather_sum(N, R, D, BI, topk, offset=0, write_tile_after=False):
    """O[n, d] = sum of KV[Idx[n, j], offset + d] over j (a consumer of T.Parallel math, no gemm); with
    ``write_tile_after`` the kernel also writes the tile after the loop, so the gather cannot be issued ahead."""

    @T.prim_func
    def main(KV: T.Tensor((R, D + offset), "float16"), Idx: T.Tensor((N, topk), "int32"),
             O: T.Tensor((N, D), "float32")):
        with T.Kernel(N, threads=64) as bx:
            rows = T.alloc_shared((BI, D), "float16")
            part = T.alloc_fragment((BI, D), "float32")
            total = T.alloc_fragment((D,), "float32")
            acc = T.alloc_fragment((D,), "float32")
            T.clear(acc)
            for k in T.Pipelined(topk // BI, num_stages=2):
                for i, d in T.Parallel(BI, D):
                    rows[i, d] = KV[Idx[bx, k * BI + i], offset + d]
                for i, d in T.Parallel(BI, D):
                    part[i, d] = rows[i, d]
                T.reduce_sum(part, total, dim=0)
                for d in T.Parallel(D):
                    acc[d] += total[d]
            if write_tile_after:
                T.clear(rows)
            T.copy(acc, O[bx, :])

    return main


@pytest.mark.parametrize("offset,write_tile_after", [(0, False), (8, False), (3, False), (0, True)])
def test_gathered_rows_summed(offset, write_tile_after):
    N, R, D, BI, topk = 3, 50, 32, 8, 24
    kernel = tileagent.compile(_gather_sum(N, R, D, BI, topk, offset, write_tile_after), target="sim:sm_90a")
    ir = kernel.get_ir("thread")
    assert ("software pipeline" in kernel.get_ir(after="plan_pipelines")) == (not write_tile_after)
    how = "scalar ld/st" if offset % 2 else "vectorized ld/st x4" if write_tile_after else "cp.async 8B"
    assert f"row gather: {how}" in ir  # 64 threads over 8 x 32: 4 halves a thread; an odd offset: no aligned run
    kv = torch.randn(R, D + offset, dtype=torch.float16)
    idx = torch.randint(-2, R + 2, (N, topk), dtype=torch.int32)
    out = torch.full((N, D), float("nan"))
    kernel(kv, idx, out)
    want = _gathered_rows(kv, idx)[..., offset:].float().sum(1)
    torch.testing.assert_close(out, want, rtol=1e-3, atol=1e-3)


def test_switched_off_the_loop_moves_elements_and_stays_in_place(monkeypatch):
    monkeypatch.setenv("TILEAGENT_ROW_GATHER", "0")
    kernel = tileagent.compile(_gather_sum(2, 20, 16, 8, 16), target="sim:sm_90a")
    assert "software pipeline" not in kernel.get_ir(after="plan_pipelines")
    assert "row gather" not in kernel.get_ir("thread")
    kv, idx = torch.randn(20, 16, dtype=torch.float16), torch.randint(0, 20, (2, 16), dtype=torch.int32)
    out = torch.empty(2, 16)
    kernel(kv, idx, out)
    torch.testing.assert_close(out, kv[idx.long()].float().sum(1), rtol=1e-3, atol=1e-3)


def _varlen_sum(R, D, BN, n_blocks, form):
    """O[s, d] = sum of X[start_s + j, d] over the rows j < len_s of sequence s (cu_seqlens), tiles of BN rows filled
    under a row condition, zeros past the sequence (TileLang's varlen attention backward fills K and V so)."""

    @T.prim_func
    def main(X: T.Tensor((R, D), "float16"), Cu: T.Tensor((3,), "int32"), O: T.Tensor((2, D), "float32")):
        with T.Kernel(2, threads=64) as bx:
            rows = T.alloc_shared((BN, D), "float16")
            part = T.alloc_fragment((BN, D), "float32")
            total = T.alloc_fragment((D,), "float32")
            acc = T.alloc_fragment((D,), "float32")
            start = Cu[bx]
            length = Cu[bx + 1] - Cu[bx]
            T.clear(acc)
            for k in T.Pipelined(n_blocks, num_stages=2):
                for i, d in T.Parallel(BN, D):
                    if form == "if":
                        if k * BN + i < length:
                            rows[i, d] = X[start + k * BN + i, d]
                        else:
                            rows[i, d] = 0
                    else:
                        rows[i, d] = T.if_then_else(k * BN + i < length, X[start + k * BN + i, d], 0)
                for i, d in T.Parallel(BN, D):
                    part[i, d] = rows[i, d]
                T.reduce_sum(part, total, dim=0)
                for d in T.Parallel(D):
                    acc[d] += total[d]
            T.copy(acc, O[bx, :])

    return main


@pytest.mark.parametrize("form", ["if", "if_then_else"])
def test_rows_under_a_row_condition(form):
    kernel = tileagent.compile(_varlen_sum(40, 32, 8, 3, form), target="sim:sm_90a")
    assert "software pipeline: 2 stages of rows" in kernel.get_ir(after="plan_pipelines")
    assert "row gather: cp.async 8B" in kernel.get_ir("thread")
    x, cu = torch.randn(40, 32, dtype=torch.float16), torch.tensor([0, 13, 37], dtype=torch.int32)
    out = torch.full((2, 32), float("nan"))
    kernel(x, cu, out)  # the second sequence's 24 rows: all three tiles; the first's 13: rows past it read as zeros
    torch.testing.assert_close(out, torch.stack([x[:13].float().sum(0), x[13:37].float().sum(0)]),
                               rtol=1e-3, atol=1e-3)


def _paged_gather(BS, HD, block_s):
    """A vLLM-style paged cache gathered into rows (played LLM 49's answer): token s of sequence b is row s % BS of
    page BT[b, s // BS]; zeros at and past the sequence's length."""
    NB, B, MB, S = T.dynamic("NB, B, MB, S")

    @T.prim_func
    def main(K: T.Tensor((NB, BS, HD), "float16"), BT: T.Tensor((B, MB), "int32"), SL: T.Tensor((B,), "int32"),
             Out: T.Tensor((B, S, HD), "float16")):
        with T.Kernel(T.ceildiv(S, block_s), B, threads=64) as (bs, b):
            ks = T.alloc_shared((block_s, HD), "float16")
            n = SL[b]
            for i, d in T.Parallel(block_s, HD):
                s = bs * block_s + i
                ks[i, d] = T.if_then_else(s < n, K[BT[b, s // BS], s % BS, d], 0.0)
            T.copy(ks, Out[b, bs * block_s, 0])

    return main


def test_a_paged_cache_is_gathered_by_runs():
    BS, HD, NB, B, MB = 4, 32, 9, 2, 4
    kernel = tileagent.compile(_paged_gather(BS, HD, 8), target="sim:sm_90a")
    assert "row gather: vectorized ld/st x4" in kernel.get_ir("thread")  # the element lets taken in
    k = torch.randn(NB, BS, HD, dtype=torch.float16)
    bt = torch.randint(0, NB, (B, MB), dtype=torch.int32)
    sl = torch.tensor([11, 16], dtype=torch.int32)
    out = torch.full((B, MB * BS, HD), float("nan"), dtype=torch.float16)
    kernel(k, bt, sl, out)
    want = k[bt.long()].reshape(B, MB * BS, HD)
    want[torch.arange(MB * BS)[None, :] >= sl[:, None]] = 0
    torch.testing.assert_close(out, want)
