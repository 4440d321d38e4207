"""The last gemm of a warp-specialized pipeline issued one iteration late (compiler.lower.defer_gemm): flash
attention's P @ V beside the next iteration's softmax. Run in the SIMT emulator against torch (which leaves a
pending accumulator NaN and faults a write to a pending wgmma's A registers), the schedule read from get_ir, the
rules that keep it off, NVRTC on the CUDA, and on an H200."""

import pytest
import torch

import tileagent
from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.lower import defer_gemm
from tileagent.compiler.tir import WgmmaWait


@pytest.fixture(autouse=True)
def _ws(monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "1")
    monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "force")  # at these small tiles the occupancy rule says no
    monkeypatch.delenv("TILEAGENT_WGMMA_OVERLAP", raising=False)
    torch.manual_seed(0)


def _fa(shared_example, seq, causal=False, stages=3, target="sim"):
    fa = shared_example("flash_attn_fwd")
    return fa, tileagent.compile(fa.flash_attn_fwd.fn(1, 1, seq, 128, causal, 64, 32, stages, 128), target=target)


def _run(fa, kernel, seq, causal=False):
    q, k, v = (torch.randn(1, seq, 1, 128, dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.testing.assert_close(o, fa.reference(q, k, v, causal), rtol=1e-2, atol=1e-2)


def _loop(ir: str, head: str) -> list[str]:
    """The lines of the loop whose header is ``head`` in ``get_ir("thread")``."""
    lines = ir.splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip() == head)
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = [x.strip() for x in lines[start + 1:] if x.strip()]
    ends = [i for i, x in enumerate(lines[start + 1:]) if x.strip() and len(x) - len(x.lstrip()) <= indent]
    return body[:ends[0]] if ends else body


@pytest.mark.parametrize("seq", [200, 32, 97])
def test_flash_attention_deferred_matches_torch_in_the_emulator(shared_example, seq):
    """Ragged and single-iteration lengths (32: the peeled iteration and the gemm after the loop only)."""
    fa, kernel = _fa(shared_example, seq)
    assert "wgmma.wait_group 1" in kernel.get_ir("thread")
    _run(fa, kernel, seq)


def test_a_dynamic_length_is_the_same_trip_count_for_every_block(shared_example):
    """A symbolic sequence length: the trip count is unknown when compiling but the same for every block, so the
    gemm is deferred; one build runs both lengths."""
    import tileagent.language as T

    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(fa.flash_attn_fwd.fn(1, 1, T.dynamic("S"), 128, False, 64, 32, 3, 128), target="sim")
    assert "wgmma.wait_group 1" in kernel.get_ir("thread")
    for seq in (200, 32):
        _run(fa, kernel, seq)


def test_the_schedule_hand_checked(shared_example, monkeypatch):
    """200 rows of 32, stages not split: iteration 0 peeled, the loop from 1: Q @ K^T, then P @ V of the iteration
    before on its stage, wait_group 1, the softmax, wait_group 0, the previous stage released, then P and the
    rescale."""
    monkeypatch.setenv("TILEAGENT_SPLIT_STAGES", "0")
    _, kernel = _fa(shared_example, 200)
    ir = kernel.get_ir("thread")
    loop = _loop(ir, "for k in T.serial(1, 7):")
    waits = [x for x in loop if x.startswith(("wgmma.wait_group", "wgmma.fence", "mbarrier.arrive"))]
    assert waits == ["wgmma.fence", "wgmma.fence", "wgmma.wait_group 1", "wgmma.wait_group 0",
                     "mbarrier.arrive tl_mbar[4 + (k + 2) % 3] (one per warp)"]
    assert sum("exp2" in x for x in loop[loop.index("wgmma.wait_group 1"):loop.index("wgmma.wait_group 0")]) > 0
    pv = [x for x in loop if "m64n128k16" in x]  # P @ V on the stage of iteration k - 1, K_s on iteration k's
    assert pv and all("x B V_s@(k + 2) % 3 * 4096" in x for x in pv)
    assert all("x B K_s@k % 3 * 4" in x for x in loop if "m64n32k16" in x)


def test_a_missing_wait_before_the_new_p_fails_in_the_emulator(shared_example, monkeypatch):
    """Without the wait_group 0 before ``after``, the new P overwrites registers the pending P @ V reads."""
    real = defer_gemm.iteration

    def without_second_wait(*args, **kwargs):
        return [x for x in real(*args, **kwargs) if not (isinstance(x, WgmmaWait) and x.pending == 0)]

    monkeypatch.setattr(defer_gemm, "iteration", without_second_wait)
    fa, kernel = _fa(shared_example, 200)
    with pytest.raises(EmulationError, match="pending"):
        _run(fa, kernel, 200)


def test_a_persistent_loop_with_tile_coordinates_in_lets_is_specialized_and_matches_torch(shared_example):
    """Causal, the longest query tiles first: the tile index is a Let on the tile loop's path, which the producer
    computes again in its own copy of the loop (it rules specialization out otherwise); the trip count varies by
    tile, so P @ V is not deferred."""
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(_persistent_fa(200, causal=True), target="sim")
    ir = kernel.get_ir("thread")
    assert "warp-specialized" in ir and "wgmma.wait_group 1" not in ir
    _run(fa, kernel, 200, causal=True)


@pytest.mark.parametrize("seq", [200, 32, 97])
def test_two_split_stages_match_torch_in_the_emulator(shared_example, seq):
    """Two stages: K and V fill and free on barriers of their own, so K's stage is free once Q @ K^T retired."""
    fa, kernel = _fa(shared_example, seq, stages=2)
    assert "wgmma.wait_group 1" in kernel.get_ir("thread")
    _run(fa, kernel, seq)


def test_split_stages_hand_checked(shared_example):
    """The producer fills K on barriers 1-2 (freed on 3-4), V on 5-6 (freed on 7-8); each iteration waits for K,
    issues Q @ K^T, waits for the previous iteration's V, issues its P @ V, frees K's stage after wait_group 1 and
    V's previous stage after wait_group 0; after the loop the last V is waited for."""
    _, kernel = _fa(shared_example, 200, stages=2)
    ir = kernel.get_ir("thread")
    producer = _loop(ir, "for k_p4 in T.serial(7):")
    assert [x.split(" <-")[0].split(",")[0] for x in producer if not x.startswith("tma.load")] == [
        "mbarrier.wait tl_mbar[3 + k_p4 % 2]", "mbarrier.arrive.expect_tx tl_mbar[1 + k_p4 % 2]",
        "mbarrier.wait tl_mbar[7 + k_p4 % 2]", "mbarrier.arrive.expect_tx tl_mbar[5 + k_p4 % 2]"]
    loop = _loop(ir, "for k in T.serial(1, 7):")
    sync = [x for x in loop if x.startswith(("wgmma.wait_group", "mbarrier"))]
    assert sync == ["mbarrier.wait tl_mbar[1 + k % 2], parity k // 2 % 2",
                    "mbarrier.wait tl_mbar[5 + (k - 1) % 2], parity (k - 1) // 2 % 2", "wgmma.wait_group 1",
                    "mbarrier.arrive tl_mbar[3 + k % 2] (one per warp)", "wgmma.wait_group 0",
                    "mbarrier.arrive tl_mbar[7 + (k + 1) % 2] (one per warp)"]
    assert "mbarrier.wait tl_mbar[5], parity 1" in ir  # the last (7th) V: stage 0, its 4th use


@pytest.mark.parametrize("early", [True, False])
def test_the_rescale_of_the_accumulator_runs_before_p_at_v(shared_example, monkeypatch, early):
    """``acc *= alpha`` of iteration k - 1 runs right before that iteration's P @ V is issued (FA3's order), in the
    loop and after it, so that after wait_group 0 only the new P is written; TILEAGENT_EARLY_RESCALE=0 keeps it
    after the wait. Same numbers either way."""
    monkeypatch.setenv("TILEAGENT_EARLY_RESCALE", "1" if early else "0")
    fa, kernel = _fa(shared_example, 200, stages=2)
    ir = kernel.get_ir("thread")
    loop = _loop(ir, "for k in T.serial(1, 7):")
    rescale = next(i for i, x in enumerate(loop) if x.startswith("acc[") and "* alpha[" in x)
    pv = next(i for i, x in enumerate(loop) if "m64n128k16" in x)
    assert (rescale < pv) == early
    assert (rescale > loop.index("wgmma.wait_group 0")) != early
    tail = ir[ir.index("mbarrier.wait tl_mbar[5], parity 1"):]
    assert ("* alpha[" in tail[:tail.index("m64n128k16")]) == early
    _run(fa, kernel, 200)


def test_a_missing_wait_for_v_fails_in_the_emulator(shared_example, monkeypatch):
    """Without the wait for the previous iteration's V, P @ V reads a tile TMA has not landed."""
    real = defer_gemm.iteration
    monkeypatch.setattr(defer_gemm, "iteration", lambda *args: real(*args[:6]))  # (..., release_early): no wait_late
    fa, kernel = _fa(shared_example, 200, stages=2)
    with pytest.raises((EmulationError, AssertionError)):
        _run(fa, kernel, 200)


@pytest.mark.parametrize("why", ["two stages, split off", "switch", "not specialized", "causal"])
def test_not_deferred(shared_example, monkeypatch, why):
    """Two stages without split stages (TILEAGENT_SPLIT_STAGES=0: the stage would be freed half an iteration late),
    TILEAGENT_WGMMA_OVERLAP=0, no producer warpgroup, a trip count that depends on the block (causal: its query
    block bounds the key blocks, through the Let n_blocks)."""
    stages = 2 if why.startswith("two stages") else 3
    if why.startswith("two stages"):
        monkeypatch.setenv("TILEAGENT_SPLIT_STAGES", "0")
    if why == "switch":
        monkeypatch.setenv("TILEAGENT_WGMMA_OVERLAP", "0")
    if why == "not specialized":
        monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "0")
    fa, kernel = _fa(shared_example, 200, causal=why == "causal", stages=stages)
    assert "wgmma.wait_group 1" not in kernel.get_ir("thread")
    _run(fa, kernel, 200, causal=why == "causal")


@pytest.mark.parametrize("anchor", [True, False])
def test_nvrtc_compiles_the_deferred_example(shared_example, monkeypatch, anchor):
    """With the wait's anchor: the running row sums stored to a word after the 13 barriers (Q's, 3 x 4 of the split
    stages; the word not initialized as one) just before wait_group 0 in the loop; TILEAGENT_WAIT_ANCHOR=0: no
    store, 13 barrier slots."""
    monkeypatch.setenv("TILEAGENT_WAIT_ANCHOR", "1" if anchor else "0")
    _, kernel = _fa(shared_example, 4096, target="cuda:sm_90a")
    src = kernel.get_kernel_source()
    assert "wgmma.wait_group.sync.aligned 1;" in src
    stores = [i for i, x in enumerate(src.splitlines()) if "st.shared.b32" in x]
    waits = [i for i, x in enumerate(src.splitlines()) if "wgmma.wait_group.sync.aligned 0;" in x]
    if anchor:
        assert len(stores) == 2 and all("&v_tl_mbar[13]" in src.splitlines()[i] for i in stores)
        assert any(w == stores[-1] + 1 for w in waits)
        assert "tl_b < 13;" in src and "tl_b < 14;" not in src  # the word is no barrier
    else:
        assert not stores and "v_tl_mbar[13]" not in src
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="needs an sm_90a GPU")
@pytest.mark.parametrize("causal,stages", [(False, 3), (True, 3), (False, 2)])
def test_gpu_flash_attention_128x128(shared_example, monkeypatch, causal, stages):
    """The schedules the deferral is for (the H200's best): 128 x 128 tiles, 3 or 2 (split) stages, two consumer
    warpgroups; causal beside them, not deferred."""
    monkeypatch.delenv("TILEAGENT_WARP_SPECIALIZE", raising=False)
    monkeypatch.delenv("TILEAGENT_ENABLE_TMA", raising=False)
    fa = shared_example("flash_attn_fwd")
    kernel = fa.flash_attn_fwd(2, 4, 1000, 128, causal, 128, 128, stages, 256)
    assert ("wgmma.wait_group 1" in kernel.get_ir("thread")) != causal
    q, k, v = (torch.randn(2, 1000, 4, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    torch.testing.assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), rtol=1e-2, atol=1e-2)


def _persistent_fa(seq, block_M=64, block_N=32, stages=2, threads=128, blocks=2, causal=False):
    """The example's flash attention with its query tiles walked by ``blocks`` blocks (``T.Persistent``): the
    pipeline runs once per tile, so its barriers' phases carry over from one tile to the next. Causal: the longest
    query tiles first, their index a Let on the tile loop's path (``bx = n - 1 - x``)."""
    import tileagent.language as T

    dim, scale, half = 128, (1.0 / 128) ** 0.5 * 1.44269504, "float16"
    shape = [1, seq, 1, dim]

    @T.prim_func
    def main(Q: T.Tensor(shape, half), K: T.Tensor(shape, half), V: T.Tensor(shape, half), O: T.Tensor(shape, half)):
        with T.Kernel(blocks, threads=threads) as b:
            Q_s = T.alloc_shared([block_M, dim], "float16")
            K_s = T.alloc_shared([block_N, dim], "float16")
            V_s = T.alloc_shared([block_N, dim], "float16")
            s = T.alloc_fragment([block_M, block_N], "float")
            p = T.alloc_fragment([block_M, block_N], "float16")
            acc = T.alloc_fragment([block_M, dim], "float")
            m_new = T.alloc_fragment([block_M], "float")
            m_old = T.alloc_fragment([block_M], "float")
            alpha = T.alloc_fragment([block_M], "float")
            l_blk = T.alloc_fragment([block_M], "float")
            l_run = T.alloc_fragment([block_M], "float")
            for (x,) in T.Persistent([T.ceildiv(seq, block_M)], blocks, b):
                bx = (T.ceildiv(seq, block_M) - 1 - x) if causal else x
                T.copy(Q[0, bx * block_M:(bx + 1) * block_M, 0, :], Q_s)
                T.fill(acc, 0)
                T.fill(l_run, 0)
                T.fill(m_new, -T.infinity("float"))
                n_blocks = T.min(T.ceildiv(seq, block_N), T.ceildiv((bx + 1) * block_M, block_N)) if causal \
                    else T.ceildiv(seq, block_N)
                for k in T.Pipelined(n_blocks, num_stages=stages):
                    T.copy(K[0, k * block_N:(k + 1) * block_N, 0, :], K_s)
                    for i, j in T.Parallel(block_M, block_N):
                        masked = k * block_N + j >= seq or (causal and bx * block_M + i < k * block_N + j)
                        s[i, j] = T.if_then_else(masked, -T.infinity("float"), 0)
                    T.gemm(Q_s, K_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                    T.copy(m_new, m_old)
                    T.reduce_max(s, m_new, dim=1, clear=False)
                    for i in T.Parallel(block_M):
                        alpha[i] = T.exp2(m_old[i] * scale - m_new[i] * scale)
                    for i, j in T.Parallel(block_M, block_N):
                        s[i, j] = T.exp2(s[i, j] * scale - m_new[i] * scale)
                    T.reduce_sum(s, l_blk, dim=1)
                    for i in T.Parallel(block_M):
                        l_run[i] = l_run[i] * alpha[i] + l_blk[i]
                    T.copy(s, p)
                    for i, j in T.Parallel(block_M, dim):
                        acc[i, j] *= alpha[i]
                    T.copy(V[0, k * block_N:(k + 1) * block_N, 0, :], V_s)
                    T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_M, dim):
                    acc[i, j] /= l_run[i]
                T.copy(acc, O[0, bx * block_M:(bx + 1) * block_M, 0, :])

    return main


@pytest.mark.parametrize("stages", [2, 3])
def test_split_stages_inside_a_persistent_loop_match_torch_in_the_emulator(shared_example, stages):
    """Two blocks walk four query tiles, each its pipeline twice: warp-specialized (the Q tile loaded again on the
    tile loop's path is no staged tile), deferred on split stages, both sides counting earlier executions."""
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(_persistent_fa(200, stages=stages), target="sim")
    ir = kernel.get_ir("thread")
    assert "wgmma.wait_group 1" in ir and "warp-specialized" in ir
    _run(fa, kernel, 200)
