"""The opt-in sm_90a wgmma.mma_async entry of the gemm registry (compiler.instructions.wgmma): chosen only with
TILEAGENT_ENABLE_WGMMA=1, run in the SIMT emulator against torch (descriptors decoded as the hardware does), a missing
wait or fence fails the emulator, the accumulator layout is the PTX m64nNk16 D figure, and NVRTC compiles it for
sm_90a."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.instructions import wgmma as wgmma_entry
from tileagent.compiler.tir import WgmmaFence, WgmmaWait
from tests.test_gemm_sim import _gemm


@pytest.fixture
def wgmma_on(monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _run_gemm_relu(mod, M, N, K, tiles, dtype=torch.float16):
    kernel = tileagent.compile(mod.matmul.fn(M, N, K, *tiles, dtype=str(dtype).split(".")[1]), target="sim")
    a, b = torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)
    c = torch.full((M, N), float("nan"), dtype=dtype)
    kernel(a, b, c)
    torch.testing.assert_close(c.float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=2e-2)
    return kernel


def test_default_codegen_keeps_mma_sync(shared_example, monkeypatch):
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)
    kernel = tileagent.compile(shared_example("gemm_relu").matmul.fn(128, 128, 64, 128, 64, 64), target="sim")
    assert "mma.sync m16n8k16" in kernel.get_ir("thread")
    assert "wgmma" not in kernel.get_kernel_source()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemm_relu_example_on_wgmma_in_the_emulator(shared_example, wgmma_on, dtype):
    # two 64-row atoms per warpgroup, two K tiles through the 3-stage cp.async pipeline, ragged M and N
    kernel = _run_gemm_relu(shared_example("gemm_relu"), 136, 72, 128, (128, 64, 64), dtype)
    assert "wgmma.mma_async m64nNk16 SS" in kernel.get_ir("thread")
    src = kernel.get_kernel_source()
    sfx = "f16" if dtype == torch.float16 else "bf16"
    assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{sfx}.{sfx} " in src
    assert src.count("wgmma.wait_group.sync.aligned 0;") == 1 and "wgmma.commit_group.sync.aligned;" in src
    assert src.index("fence.proxy.async.shared::cta;") < src.index("wgmma.fence.sync.aligned;") < \
        src.index("wgmma.mma_async") < src.index("wgmma.wait_group")


def test_k_major_b_and_two_warpgroups(wgmma_on):
    func = _gemm(130, 40, 96, 64, 40, 64, False, True, "float16", T.GemmWarpPolicy.Square, 2)
    kernel = tileagent.compile(func, target="sim")
    assert "wgmma" in kernel.get_ir("thread")
    a, b = torch.randn(130, 96, dtype=torch.float16), torch.randn(40, 96, dtype=torch.float16)
    c = torch.full((130, 40), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=1e-3, atol=1e-3)


def test_tiles_the_entry_does_not_take_fall_back_to_mma_sync(shared_example, wgmma_on):
    # the example's own tiles: B is 64 x 128 (256-byte rows), not a 128B-swizzle canonical layout
    kernel = _run_gemm_relu(shared_example("gemm_relu"), 128, 128, 64, (128, 128, 64))
    assert "mma.sync m16n8k16" in kernel.get_ir("thread")


def _drop(monkeypatch, kind):
    from tileagent.compiler.lower import wgmma as lowering

    real = lowering.lower_wgmma
    monkeypatch.setattr(lowering, "lower_wgmma", lambda ctx, s: [x for x in real(ctx, s) if not isinstance(x, kind)])


def test_missing_wait_fails_the_emulator(shared_example, wgmma_on, monkeypatch):
    _drop(monkeypatch, WgmmaWait)
    with pytest.raises(EmulationError, match="wgmma group\\(s\\) still pending when the block ends"):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 64, (128, 64, 64))


def test_missing_fence_fails_the_emulator(shared_example, wgmma_on, monkeypatch):
    _drop(monkeypatch, WgmmaFence)
    with pytest.raises(EmulationError, match="Wgmma issued without a wgmma.fence"):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 64, (128, 64, 64))


def test_wrong_descriptor_stride_gives_wrong_numbers(shared_example, wgmma_on, monkeypatch):
    from tileagent.compiler.lower import wgmma as lowering

    monkeypatch.setattr(lowering, "SBO", 512)  # the emulator decodes the descriptor, not the compiler's layout
    with pytest.raises(AssertionError):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 64, (128, 64, 64))


def test_accumulator_layout_is_the_ptx_m64nNk16_d_figure():
    M, N, q = 256, 24, 2
    frag = wgmma_entry.accumulator_layout(M, N, q, 128 * q)
    for r in range(M):
        for c in range(N):
            group, within = divmod(r, M // q)
            atom, rr = divmod(within, 64)
            w, g, h = rr // 16, rr % 8, rr % 16 // 8
            j, t, p = c // 8, c % 8 // 2, c % 2
            assert frag.thread((r, c)) == 128 * group + 32 * w + 4 * g + t
            assert frag.slot((r, c)) == ((atom * 2 + h) * (N // 8) + j) * 2 + p


def test_entry_reasons(shared_example, monkeypatch):
    from types import SimpleNamespace

    from tileagent.compiler.ir.stmt import Gemm
    from tileagent.compiler.ir.visit import walk

    func = shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 64, 64)
    g = next(s for s in walk(func.body) if isinstance(s, Gemm))
    entry = wgmma_entry.WgmmaM64NK16()
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)
    assert entry.reason(g, 128, None) == "opt-in: set TILEAGENT_ENABLE_WGMMA=1"
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "1")
    assert entry.reason(g, 128, SimpleNamespace(arch="sm_80", name="cuda:sm_80", features=("cp_async",))) == \
        "needs sm_90a; the target is cuda:sm_80"
    assert entry.reason(g, 128, SimpleNamespace(arch="sm_90a", name="cuda:sm_90a", features=None)) is None
    assert entry.reason(g, 96, None).startswith("T.gemm on wgmma needs whole warpgroups (128 threads)")


def test_nvrtc_compiles_the_wgmma_kernel_for_sm_90a(shared_example, wgmma_on):
    kernel = tileagent.compile(shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 64, 64), target="sim")
    assert "wgmma.mma_async" in kernel.get_kernel_source()
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_prompts_gemm_relu_with_dynamic_m_and_ragged_k_on_wgmma(wgmma_on):
    from tests.conftest import REPO, load_module

    mod = load_module(REPO / "prompts" / "examples" / "gemm_relu.py")
    kernel = tileagent.compile(mod.gemm_relu.fn(None, 72, 136, block_M=128, block_N=64, block_K=64), out_idx=[2],
                               target="sim")
    assert "wgmma" in kernel.get_ir("thread")
    a, b = torch.randn(70, 136, dtype=torch.float16), torch.randn(136, 72, dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), mod.reference(a, b), rtol=1e-2, atol=1e-2)
