"""T.gemm on float32 / tfloat32 operands: mma.sync m16n8k8 .tf32 (compiler/instructions/mma_sync.py) and, K-major on
sm_90a, wgmma m64nNk8 .tf32 (compiler/instructions/wgmma.py), lowered and run in the SIMT emulator against torch on
TF32-truncated inputs, in every operand orientation and with A in registers; the CUDA compiles with NVRTC."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tests.test_gemm_sim import MMA, _gemm


@pytest.fixture(autouse=True)
def _seed_and_cp_async(monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` with the 13 low mantissa bits dropped: what the tensor core reads of a float32 register."""
    return (x.view(torch.int32) & -8192).view(torch.float32)


def _instructions(kernel) -> set:
    return {choice.instruction.name for choice in kernel.layouts().instructions.values()}


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_float32_gemm_runs_on_tf32_mma_in_every_orientation(trans_a, trans_b):
    """K-major operands (A as M x K, B as N x K) go through ldmatrix, the others element by element; the result
    equals a float64 product of the truncated inputs within float32 summation error (a float32 product of the full
    inputs differs by about 1e-3: TF32 keeps 10 mantissa bits)."""
    M, N, K = 40, 24, 72
    func = _gemm(M, N, K, 32, 32, 32, trans_a, trans_b, "float32", T.GemmWarpPolicy.Square, 2)
    kernel = tileagent.compile(func, target="sim", pass_configs=MMA)
    assert _instructions(kernel) == {"mma.sync m16n8k8"}
    a = torch.randn((K, M) if trans_a else (M, K))
    b = torch.randn((N, K) if trans_b else (K, N))
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    ref = ((_tf32(a).T if trans_a else _tf32(a)).double() @ (_tf32(b).T if trans_b else _tf32(b)).double()).float()
    torch.testing.assert_close(c, ref, rtol=1e-5, atol=1e-5)
    assert (c - (a.T if trans_a else a) @ (b.T if trans_b else b)).abs().max() > 1e-4  # truncated, as on the GPU
    source = tileagent.compile(func, target="cuda:sm_80").get_kernel_source()
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in source
    assert ("ldmatrix" in source) == (not trans_a or trans_b)  # ldmatrix serves the K-major operands only
    for arch in ("sm_80", "sm_90a"):
        assert tileagent.compile(func, target=f"cuda:{arch}", pass_configs=MMA).cubin()[:4] == b"\x7fELF"


def test_tf32_gemm_with_a_in_registers():
    """A float32 fragment as A (a computed operand, as in chunked linear attention): the A-operand layout holds one
    element a register; B from shared memory."""

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float32"), B: T.Tensor((32, 64), "float32"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((64, 32), "float32")
            B_s = T.alloc_shared((32, 64), "float32")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_f)
            for i, j in T.Parallel(64, 32):
                A_f[i, j] = A_f[i, j] * 2.0
            T.copy(B, B_s)
            T.clear(acc)
            T.gemm(A_f, B_s, acc)
            T.copy(acc, C)

    kernel = tileagent.compile(main, out_idx=[2], target="sim", pass_configs=MMA)
    assert _instructions(kernel) == {"mma.sync m16n8k8"}
    a, b = torch.randn(64, 32), torch.randn(32, 64)
    ref = (_tf32(a * 2).double() @ _tf32(b).double()).float()
    torch.testing.assert_close(kernel(a, b), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tileagent.compile(main, out_idx=[2], target="cpu")(a, b), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("M,N,K,tiles", [(128, 64, 96, (64, 64, 32)), (128, 128, 64, (128, 128, 64))])
def test_k_major_tf32_gemm_takes_wgmma_k8_on_sm_90a(M, N, K, tiles, monkeypatch):
    """On sm_90a a K-major float32 gemm (A (M, K), B (N, K)) runs on wgmma m64nNk8 .tf32 (32 bytes of a row per
    instruction, as k16 for 16-bit types: the same descriptors), TMA feeding the canonical 128B-swizzled tiles; the
    emulator reads the truncated operands; NVRTC accepts the instruction. B stored K x N keeps mma.sync (PTX has no
    transposes for .tf32) and the IR says why."""
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)
    monkeypatch.delenv("TILEAGENT_ENABLE_TMA", raising=False)
    func = _gemm(M, N, K, *tiles, False, True, "float32", T.GemmWarpPolicy.Square, 2)
    kernel = tileagent.compile(func, target="sim")
    assert f"m64n{tiles[1]}k8.f32.tf32.tf32, A K-major 128B swizzle, B K-major 128B swizzle" in kernel.get_ir("thread")
    a, b = torch.randn(M, K), torch.randn(N, K)
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, (_tf32(a).double() @ _tf32(b).double().T).float(), rtol=1e-5, atol=1e-5)
    cuda = tileagent.compile(func, target="cuda:sm_90a")
    assert f"wgmma.mma_async.sync.aligned.m64n{tiles[1]}k8.f32.tf32.tf32" in cuda.get_kernel_source()
    assert cuda.cubin()[:4] == b"\x7fELF"
    mn = tileagent.compile(_gemm(M, N, K, *tiles, False, False, "float32", T.GemmWarpPolicy.Square, 2), target="sim")
    assert "mma.sync m16n8k8" in mn.get_ir("thread") and "takes TF32 operands K-major only" in mn.get_ir("thread")


def test_a_tf32_gemm_whose_k_is_not_a_multiple_of_8_is_E602_naming_it():
    from tileagent.compiler.diagnostics import CompileError

    func = _gemm(32, 32, 36, 32, 32, 36, False, True, "float32", T.GemmWarpPolicy.Square, 0)
    with pytest.raises(CompileError) as e:
        tileagent.compile(func, target="cuda:sm_90a", pass_configs=MMA).get_kernel_source()
    assert e.value.code == "E602" and "needs K a multiple of 8, got 36" in e.value.message, e.value.message


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_tf32_gemm_on_the_gpu_matches_the_emulated_fragments(trans_a, trans_b):
    """On the device, wgmma off (mma.sync m16n8k8) and on (K-major operands: wgmma m64nNk8 .tf32), against a float64
    product of the truncated inputs: the operand layouts of the emulator are the hardware's. The hardware
    may truncate the operands or round them; either is within 2**-10 relative of an operand, so the bound is set
    by that, about 1e-2 absolute on these sums of 160 products."""
    M, N, K = 136, 72, 160
    func = _gemm(M, N, K, 64, 64, 32, trans_a, trans_b, "float32", T.GemmWarpPolicy.Square, 2)
    a = torch.randn((K, M) if trans_a else (M, K), device="cuda")
    b = torch.randn((N, K) if trans_b else (K, N), device="cuda")
    ref = ((_tf32(a).T if trans_a else _tf32(a)).double() @ (_tf32(b).T if trans_b else _tf32(b)).double()).float()
    for configs in (MMA, {}):
        c = torch.full((M, N), float("nan"), device="cuda")
        tileagent.compile(func, target="cuda", pass_configs=configs)(a, b, c)
        torch.testing.assert_close(c, ref, rtol=0, atol=2e-2)
