"""Tensor-core kernels (T.gemm on mma.sync) lowered and run in the SIMT emulator against torch, at ragged sizes.

The ``sim`` target lowers for sm_90a, where T.gemm runs on wgmma by default (tests/test_wgmma.py); here every kernel is
compiled with TileLang's pass config ``tl.disable_wgmma`` (``MMA``), so this file keeps testing the mma.sync path
within sm_90a's limits, as it did before wgmma became the default there. NVRTC builds both (sm_80 and sm_90a)."""

import pytest
import torch

import tileagent
import tileagent.language as T


@pytest.fixture(autouse=True)
def _seed_and_cp_async(monkeypatch):
    """Seeded; pipelines on cp.async (TILEAGENT_ENABLE_TMA=0): this file specifies them. TMA, sm_90a's default for
    pipelines that feed a T.gemm: tests/test_tma.py, tests/test_warp_specialize.py."""
    torch.manual_seed(0)
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")


MMA = {"tl.disable_wgmma": True}  # T.gemm on mma.sync on the sim target's sm_90a


def _gemm(M, N, K, bm, bn, bk, trans_a, trans_b, dtype, policy, stages):
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    a_tile = (bk, bm) if trans_a else (bm, bk)
    b_tile = (bn, bk) if trans_b else (bk, bn)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, acc, transpose_A=trans_a, transpose_B=trans_b, policy=policy)
            T.copy(acc, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_transposes_and_dtypes_with_tails(trans_a, trans_b, dtype):
    M, N, K = 40, 24, 40
    kernel = tileagent.compile(_gemm(M, N, K, 32, 32, 32, trans_a, trans_b, dtype, T.GemmWarpPolicy.Square, 2),
                               target="sim", pass_configs=MMA)
    td = getattr(torch, dtype)
    a = torch.randn((K, M) if trans_a else (M, K), dtype=td)
    b = torch.randn((N, K) if trans_b else (K, N), dtype=td)
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    ref = (a.T if trans_a else a).float() @ (b.T if trans_b else b).float()
    torch.testing.assert_close(c, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("policy", [T.GemmWarpPolicy.Square, T.GemmWarpPolicy.FullRow, T.GemmWarpPolicy.FullCol])
def test_gemm_warp_policies(policy):
    kernel = tileagent.compile(_gemm(64, 64, 32, 64, 64, 32, False, False, "float16", policy, 0), target="sim",
                               pass_configs=MMA)
    a, b = torch.randn(64, 32, dtype=torch.float16), torch.randn(32, 64, dtype=torch.float16)
    c = torch.full((64, 64), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("policy,bm,bn,split", [(T.GemmWarpPolicy.FullRow, 16, 32, (1, 4)),
                                                 (T.GemmWarpPolicy.FullCol, 64, 16, (2, 2))])
def test_full_row_and_col_fall_back_to_the_most_warps_that_fit(policy, bm, bn, split):
    """TileLang's rule: FullRow on a 16-row tile over 4 warps puts the warps along N (its sparse MLA top-k reduce-sum,
    once L005); FullCol on a 16-column tile puts 2 along N and 2 along M."""
    kernel = tileagent.compile(_gemm(bm, bn, 32, bm, bn, 32, False, False, "float16", policy, 0), target="sim",
                               pass_configs=MMA)
    assert list(kernel.layouts().gemm_partition.values()) == [split]
    a, b = torch.randn(bm, 32, dtype=torch.float16), torch.randn(32, bn, dtype=torch.float16)
    c = torch.full((bm, bn), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("configs", [MMA, {}], ids=["mma_sync", "default"])  # wgmma RS needs A stored M x K
@pytest.mark.parametrize("M,K,N,threads", [(32, 64, 32, 128), (64, 32, 64, 128), (16, 32, 64, 64)])
def test_register_a_stored_k_by_m_with_transpose_a(M, K, N, threads, configs):
    """A in registers stored K x M, ``T.gemm(a, b, c, transpose_A=True)`` (DSA's indexer backward: dq = dlogits^T @ k
    from a fragment cast from shared; was L005 'needs transpose_A=False'): A takes the A-operand layout with its dims
    swapped; the emulator against torch, and the CUDA compiles."""
    @T.prim_func
    def f(A: T.Tensor((K, M), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            a_s = T.alloc_shared((K, M), "float32")
            b_s = T.alloc_shared((K, N), "float16")
            a = T.alloc_fragment((K, M), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            for i, j in T.Parallel(K, M):
                a_s[i, j] = A[i, j] * 2.0
            T.copy(B, b_s)
            T.copy(a_s, a)
            T.clear(acc)
            T.gemm(a, b_s, acc, transpose_A=True)
            T.copy(acc, C)

    kernel = tileagent.compile(f, target="sim", pass_configs=configs)
    assert [c.instruction.name for c in kernel.layouts().instructions.values()] == ["mma.sync m16n8k16"]
    a, b = torch.randn(K, M, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, (a.float() * 2).T @ b.float(), rtol=1e-3, atol=1e-3)
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_shared_gemm_relu_with_col_swizzle(shared_example):
    mod = shared_example("gemm_relu")
    kernel = tileagent.compile(mod.matmul.fn(136, 72, 64, 64, 64, 32), target="sim", pass_configs=MMA)
    a, b = torch.randn(136, 64, dtype=torch.float16), torch.randn(64, 72, dtype=torch.float16)
    c = torch.full((136, 72), float("nan"), dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c, mod.reference(a, b), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("is_causal", [False, True])
def test_shared_flash_attn_fwd(shared_example, is_causal):
    mod = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(mod.flash_attn_fwd.fn(1, 1, 150, 32, is_causal), out_idx=[3], target="sim",
                               pass_configs=MMA)
    q, k, v = (torch.randn(1, 150, 1, 32, dtype=torch.float16) for _ in range(3))
    torch.testing.assert_close(kernel(q, k, v), mod.reference(q, k, v, is_causal), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("variant", ["shared", "fragment"])
def test_shared_mla_decode(shared_example, variant):
    mod = shared_example("mla_decode")
    kernel = tileagent.compile(mod.mla_decode.fn(1, 64, 70, variant=variant), out_idx=[4], target="sim",
                               pass_configs=MMA)
    q, q_pe = torch.randn(1, 64, 512, dtype=torch.float16), torch.randn(1, 64, 64, dtype=torch.float16)
    kv, k_pe = torch.randn(1, 70, 1, 512, dtype=torch.float16), torch.randn(1, 70, 1, 64, dtype=torch.float16)
    torch.testing.assert_close(kernel(q, q_pe, kv, k_pe), mod.reference(q, q_pe, kv, k_pe), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_tensor_core_kernels_compile_with_nvrtc(shared_example, arch):
    funcs = [_gemm(64, 64, 64, 64, 64, 32, False, True, "bfloat16", T.GemmWarpPolicy.Square, 2),
             shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 128, 64),
             shared_example("flash_attn_fwd").flash_attn_fwd.fn(1, 2, 256, 64, True),
             shared_example("mla_decode").mla_decode.fn(1, 64, 128, variant="fragment")]
    for func in funcs:
        cubin = tileagent.compile(func, target="sim").cubin(arch)  # the default: wgmma where it applies on sm_90a
        assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("stages", [0, 1, 2, 3, 4])
def test_gemm_pipeline_stages_with_ragged_k(stages):
    """Every num_stages, K = 72 with 32-deep tiles: the last tile is zero-filled past K by cp.async."""
    M, N, K = 40, 24, 72
    kernel = tileagent.compile(_gemm(M, N, K, 32, 32, 32, False, False, "float16", T.GemmWarpPolicy.Square, stages),
                               target="sim", pass_configs=MMA)
    src = kernel.get_kernel_source()
    assert ("cp.async.cg.shared.global" in src) == (stages >= 2)
    if stages >= 2:
        assert f"cp.async.wait_group {stages - 2};" in src and "cp.async.wait_group 0;" in src
        assert ", 16, %2;" in src  # the zero-filling form for the K tail
        assert src.count("cp.async.commit_group;") == stages  # one per prologue stage + one in the loop
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def _staged_copy_then_gemm(order, stage):
    M = N = K = 64

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((M, 16), "float16")
            B_s = T.alloc_shared((16, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // 16, num_stages=2, order=order, stage=stage):
                T.copy(A[0, k * 16], A_s)
                T.copy(B[k * 16, 0], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[0, 0])

    return main


@pytest.mark.parametrize("order,stage,pipelined", [([0, 1, 2], [0, 0, 1], True), ([1, 0, 2], [0, 0, 1], True),
                                                   ([0, 1, 2], [0, 1, 1], True), ([0, 1, 2], [0, 0, 0], False)])
def test_manual_pipeline_order_and_stage(order, stage, pipelined):
    """order/stage by hand: stage-0 copies are issued ahead; a gemm put in stage 0 cannot be, so the loop runs
    plainly (still correct)."""
    kernel = tileagent.compile(_staged_copy_then_gemm(order, stage), target="sim", pass_configs=MMA)
    src = kernel.get_kernel_source()
    assert ("cp.async" in src) == pipelined
    if pipelined and stage[1] == 1:  # only A's copy is a producer: B's copy is an ordinary consumer
        assert src.count("cp.async.cg.shared.global") == 2  # A in the prologue and in the loop
    a, b = torch.randn(64, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16)
    c = torch.full((64, 64), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_mla_decode_pipelines_within_the_shared_memory_of_one_block(shared_example):
    """At B64 H128 ctx8192 both variants pipeline with two stages inside 227 KiB: the `shared` variant's tiles take
    229376 bytes, and its cross-warp row reductions keep one partial per (row, warp) in the scratch (64 x 8 x 4 =
    2048 bytes, where one slot per thread and register took 8192 and pushed it to 237568). On wgmma (sm_90a's
    default) the scratch is 512 bytes and the arena may be rounded up by 1008 to the swizzle atom: 230896."""
    import re

    mod = shared_example("mla_decode")
    for variant, configs in (("shared", MMA), ("fragment", MMA), ("shared", None), ("fragment", None)):
        src = tileagent.compile(mod.mla_decode.fn(64, 128, 8192, variant=variant), out_idx=[4],
                                target="sim", pass_configs=configs).get_kernel_source()
        shared = int(re.search(r"(\d+) bytes of dynamic shared memory", src).group(1))
        assert shared <= 232448 and "cp.async" in src, (variant, shared)
        assert ("wgmma.mma_async" in src) == (configs is None)
        if variant == "shared":
            assert shared == (229376 + 2048 if configs else 229376 + 512 + 1008), shared


def test_pipeline_with_a_dynamic_trip_count_shorter_than_its_stages():
    """K is dynamic: the loop may run fewer iterations than the prologue would fill (K = 16: one tile, 3 stages),
    or end on a partial tile (K = 72)."""
    K = T.dynamic("K")

    @T.prim_func
    def main(A: T.Tensor((32, K), "float16"), B: T.Tensor((K, 32), "float16"), C: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((32, 32), "float16")
            B_s = T.alloc_shared((32, 32), "float16")
            acc = T.alloc_fragment((32, 32), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=3):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[0, 0])

    kernel = tileagent.compile(main, target="sim", pass_configs=MMA)
    assert "cp.async.wait_group 1;" in kernel.get_kernel_source()
    for k in (16, 72):
        a, b = torch.randn(32, k, dtype=torch.float16), torch.randn(k, 32, dtype=torch.float16)
        c = torch.full((32, 32), float("nan"))
        kernel(a, b, c)
        torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("configs", [MMA, {}], ids=["cp_async", "tma"])
def test_pipeline_copies_indexed_through_a_name_the_body_binds(configs):
    """TileLang's varlen attention starts its loop at a run-time tile (``actual_k = k + start``) and copies
    ``K[kv_start + actual_k * 32 : ...]``: the copy is still issued stages ahead (it ran as a plain loop of synchronous
    loads before, 0.44 of TileLang's speed on the H100), and the results are the same."""
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((32, 64), "float16"), B: T.Tensor((N, 32), "float16"), starts: T.Tensor((2,), "int32"),
             C: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((32, 32), "float16")
            B_s = T.alloc_shared((32, 32), "float16")
            acc = T.alloc_fragment((32, 32), "float32")
            T.clear(acc)
            row0 = starts[0]
            start = starts[1]
            for k in T.Pipelined(2, num_stages=2):
                actual_k = k + start
                T.copy(A[0, k * 32], A_s)
                T.copy(B[row0 + actual_k * 32, 0], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[0, 0])

    kernel = tileagent.compile(main, target="sim", pass_configs=configs)
    assert "software pipeline: 2 stages of A_s, B_s" in kernel.get_ir(after="plan_pipelines")
    a, b = torch.randn(32, 64, dtype=torch.float16), torch.randn(200, 32, dtype=torch.float16)
    c = torch.full((32, 32), float("nan"))
    kernel(a, b, torch.tensor([5, 1], dtype=torch.int32), c)
    torch.testing.assert_close(c, a.float() @ b[37:101].float(), rtol=1e-3, atol=1e-3)


def test_loop_invariant_a_operand_is_loaded_once_before_the_loop(shared_example):
    """Flash attention's Q tile never changes inside the K/V loop: its atoms go to registers before the loop (and the
    results stay right: test_shared_flash_attn_fwd); the GEMM's A tile changes every iteration and is not hoisted."""
    fa = tileagent.compile(shared_example("flash_attn_fwd").flash_attn_fwd.fn(1, 1, 150, 32, False), out_idx=[3],
                           target="sim", pass_configs=MMA).get_kernel_source()
    head, loop = fa.split("for (int k = 0;", 1)
    assert "a_hoisted" in head and "ldmatrix.sync.aligned.m8n8.x4.shared" in head
    # P (float32 scores cast to float16, used only as the second gemm's A) lives as packed pairs
    assert "unsigned int p[" in head and "tl_cvt_pack_f16x2(s[2 * tl_i], s[2 * tl_i + 1])" in loop
    gemm = tileagent.compile(shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 128, 64),
                             target="sim", pass_configs=MMA).get_kernel_source()
    assert "a_hoisted" not in gemm
