"""On a CUDA device: the lowered kernels compiled by NVRTC and launched, against torch. Skipped without a GPU."""

import pytest
import torch

import tileagent
from tests import kernels as K
from tests.conftest import REPO, load_module

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


@pytest.mark.parametrize("C", [32, 96, 160, 192, 320, 1024, 4096, 8192])
@pytest.mark.parametrize("M", [1, 7, 1000])
def test_rmsnorm_silu_example_on_gpu(C, M):
    mod = load_module(REPO / "prompts" / "examples" / "rmsnorm_silu.py")
    kernel = mod.rmsnorm_silu(None, C)
    x = torch.randn(M, C, device="cuda", dtype=torch.float16)
    g = torch.randn(C, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(x, g), mod.reference(x, g), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("M,N", [(777, 2048), (3, 4096), (64, 96)])
def test_softmax_example_on_gpu(M, N):
    mod = load_module(REPO / "prompts" / "examples" / "softmax.py")
    x = torch.randn(M, N, device="cuda", dtype=torch.float16) * 4
    torch.testing.assert_close(mod.softmax(None, N)(x), mod.reference(x), rtol=1e-2, atol=1e-3)



@pytest.mark.parametrize("M,N,threads,dtype", [(64, 256, 512, "float16"), (64, 64, 128, "float16"),
                                               (32, 128, 128, "float32")])
def test_column_sums_through_padded_scratch_on_gpu(M, N, threads, dtype):
    """Column reductions whose warps' partials meet at [warp][column] with a padding word after every 32
    (compiler/lower/reduce.py _spread), and sum_dim1's example, against torch on the device."""
    from tests.test_lowering_sim import _column_sum

    x = torch.randn(M, N, device="cuda").to(getattr(torch, dtype))
    out = _nan(N)
    tileagent.compile(_column_sum(M, N, threads, dtype))(x, out)
    torch.testing.assert_close(out, x.float().sum(0), rtol=1e-5, atol=1e-4)
    mod = load_module(REPO / "prompts" / "examples" / "sum_dim1.py")
    x = torch.randn(64, 1000, 300, device="cuda")
    torch.testing.assert_close(mod.sum_dim1(None, 1000, 300)(x), x.sum(1, keepdim=True), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("L,E", [(1, 8), (100_000, 256), (262_144, 8)])
def test_bincount_example_on_gpu(L, E):
    """Shared-memory bins with atomics, then one global atomic per bin: exact counts, skewed to bin 0."""
    load_module(REPO / "prompts" / "examples" / "bincount.py").check(device="cuda", L=L, E=E)


def test_own_kernels_on_gpu():
    x, b = torch.randn(37, 96, device="cuda", dtype=torch.float16), torch.randn(96, device="cuda", dtype=torch.float16)
    y = _nan(37, 96, dtype=torch.float16)
    tileagent.compile(K.bias_gelu(37, 96))(x, b, y)
    torch.testing.assert_close(y, K.REFERENCES["bias_gelu"](x, b), rtol=1e-2, atol=1e-2)
    x = torch.randn(13, 160, device="cuda", dtype=torch.float16)
    w, bb = torch.randn(160, device="cuda", dtype=torch.float16), torch.randn(160, device="cuda", dtype=torch.float16)
    y = _nan(13, 160, dtype=torch.float16)
    tileagent.compile(K.layernorm(13, 160))(x, w, bb, y)
    torch.testing.assert_close(y, K.REFERENCES["layernorm"](x, w, bb), rtol=1e-2, atol=1e-2)
    x, y = torch.randn(64, 80, device="cuda"), _nan(80)
    tileagent.compile(K.column_max(64, 80))(x, y)
    torch.testing.assert_close(y, K.REFERENCES["column_max"](x))
    x, y = torch.randn(70, 45, device="cuda", dtype=torch.float16), _nan(45, 70, dtype=torch.float16)
    tileagent.compile(K.transpose(70, 45))(x, y)
    torch.testing.assert_close(y, K.REFERENCES["transpose"](x))
    x, y = torch.randn(50, 64, device="cuda"), torch.zeros(64, device="cuda")
    tileagent.compile(K.column_sum_atomic(50, 64))(x, y)
    torch.testing.assert_close(y, K.REFERENCES["column_sum_atomic"](x), rtol=1e-5, atol=1e-5)
    a, b = torch.randn(200, 256, device="cuda", dtype=torch.float16), torch.randn(256, 96, device="cuda",
                                                                                 dtype=torch.float16)
    c = torch.zeros(200, 96, device="cuda")
    tileagent.compile(K.splitk_gemm(200, 96, 256, 4))(a, b, c)  # tile-form atomic_add, vectorized
    torch.testing.assert_close(c, K.REFERENCES["splitk_gemm"](a, b), rtol=1e-3, atol=1e-3)
    kernel = tileagent.compile(K.scale_rows(0, 100))
    for m in (3, 5000):
        x, y = torch.randn(m, 100, device="cuda"), _nan(m, 100)
        kernel(x, y)
        torch.testing.assert_close(y, K.REFERENCES["scale_rows"](x))


def test_shared_memory_over_48_kib_launches():
    kernel = tileagent.compile(K.transpose(256, 256, block=128, threads=256, dtype="float32"))
    assert kernel.module.kernels[0].shared_bytes > 48 * 1024
    x, y = torch.randn(256, 256, device="cuda"), _nan(256, 256)
    kernel(x, y)
    torch.testing.assert_close(y, x.T.contiguous())


@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("dim,reverse", [(0, False), (1, True)])
def test_cumsum_on_gpu(scope, dim, reverse):
    """T.cumsum on the device: float32 against torch; float16 bit for bit equal to the tile interpreter."""
    from tests.test_tileop_cumsum import reference, tiled_cumsum

    a = torch.randn(100, 70, device="cuda")
    b = _nan(100, 70)
    tileagent.compile(tiled_cumsum(100, 70, 32, 64, scope, dim, reverse))(a, b)
    torch.testing.assert_close(b.cpu(), reference(a.cpu(), 32, 64, dim, reverse), rtol=1e-5, atol=1e-4)
    func = tiled_cumsum(100, 70, 32, 64, scope, dim, reverse, dtype="float16")
    h = (torch.rand(100, 70) + 0.5).half()
    on_cpu = torch.full((100, 70), float("nan"), dtype=torch.float16)
    tileagent.compile(func, target="cpu")(h, on_cpu)
    on_gpu = _nan(100, 70, dtype=torch.float16)
    tileagent.compile(func)(h.cuda(), on_gpu)
    assert torch.equal(on_gpu.cpu(), on_cpu)


WGMMA_CASES = [  # (where, M, N, K, dtype, schedule, the instruction the gemm must lower to)
    ("shared", 1024, 1024, 1024, torch.float16, (128, 64, 64), "m64n64k16.f32.f16.f16, A K-major 128B swizzle, "
                                                              "B N-major 128B swizzle"),
    ("shared", 1000, 776, 520, torch.bfloat16, (128, 64, 64), "m64n64k16.f32.bf16.bf16"),
    # the example's own tiles: B 64 x 128 = two 128-byte column blocks (LBO 8192)
    ("shared", 1000, 776, 520, torch.float16, (128, 128, 64), "m64n128k16.f32.f16.f16, A K-major 128B swizzle, "
                                                               "B N-major 128B swizzle"),
    # at 4096 the grid keeps two blocks per SM when pairs merge along x: one 128 x 256 block (compiler/lower/coarsen.py)
    ("shared", 4096, 4096, 4096, torch.float16, (128, 128, 64), "m64n256k16"),
    ("prompts", 1000, 768, 520, torch.float16, dict(block_M=128, block_N=64, block_K=64), "m64n64k16"),
    # the prompt example's defaults 128/128/32: A rows of 64 bytes (64B swizzle)
    ("prompts", 1000, 768, 520, torch.float16, {}, "m64n128k16.f32.f16.f16, A K-major 64B swizzle, B N-major 128B"),
    # the drafter's tuned configs: two warpgroups, N = 256 (four column blocks); 2 stages of 128/128/64 in bf16
    ("prompts", 1000, 768, 520, torch.float16, dict(block_M=128, block_N=256, block_K=32, threads=256), "m64n256k16"),
    ("prompts", 1000, 768, 520, torch.bfloat16, dict(block_M=128, block_N=128, block_K=64, num_stages=2, threads=256),
     "m64n128k16.f32.bf16.bf16"),
]


@pytest.mark.skipif(torch.cuda.get_device_capability() != (9, 0), reason="wgmma needs an sm_90a GPU")
@pytest.mark.parametrize("where,M,N,K,dtype,schedule,instruction", WGMMA_CASES)
def test_gemm_relu_examples_with_wgmma_on_gpu(monkeypatch, where, M, N, K, dtype, schedule, instruction):
    """By default on the H200: the gemm examples at the examples' and the drafter's schedules lower to
    wgmma.mma_async (the instruction named in get_ir) and match torch."""
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)  # wgmma is the default on sm_90a
    import os
    from pathlib import Path

    shared = Path(os.environ.get("TILEAGENT_SHARED", REPO.parent / "shared")) / "examples"
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    name = str(dtype).split(".")[1]
    if where == "shared":
        mod = load_module(shared / "gemm_relu.py")
        kernel = tileagent.compile(mod.matmul.fn(M, N, K, *schedule, dtype=name))
        c = _nan(M, N, dtype=dtype)
        kernel(a, b, c)
    else:
        mod = load_module(REPO / "prompts" / "examples" / "gemm_relu.py")
        kernel = tileagent.compile(mod.gemm_relu.fn(None, N, K, dtype=name, **schedule), out_idx=[2])
        c = kernel(a, b)
    torch.cuda.synchronize()
    assert "wgmma.mma_async" in kernel.get_kernel_source() and instruction in kernel.get_ir("thread")
    tol = 5e-2 * (K / 1024) ** 0.5 + 2e-2  # fp16 / bf16 output of sums of K unit-variance products
    torch.testing.assert_close(c.float(), torch.relu(a.float() @ b.float()), rtol=2e-2, atol=tol)


@pytest.mark.skipif(torch.cuda.get_device_capability() != (9, 0), reason="wgmma needs an sm_90a GPU")
@pytest.mark.parametrize("dim,causal", [(128, False), (64, True)])
def test_flash_attn_example_with_wgmma_on_gpu(monkeypatch, dim, causal):
    """By default on the H200: flash_attn_fwd's Q @ K^T (K-major B; head dim 128 = two 128-byte column blocks)
    lowers to wgmma SS, P @ V to wgmma RS (P in registers, packed from the scores' accumulator), no mma.sync is
    left, and the output matches SDPA."""
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)  # wgmma is the default on sm_90a
    import os
    from pathlib import Path

    shared = Path(os.environ.get("TILEAGENT_SHARED", REPO.parent / "shared")) / "examples"
    mod = load_module(shared / "flash_attn_fwd.py")
    kernel = tileagent.compile(mod.flash_attn_fwd.fn(2, 4, 1000, dim, causal))
    q, k, v = (torch.randn(2, 1000, 4, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    o = _nan(2, 1000, 4, dim, dtype=torch.float16)
    kernel(q, k, v, o)
    torch.cuda.synchronize()
    ir = kernel.get_ir("thread")
    assert "B K-major 128B swizzle" in ir and "wgmma.mma_async m64nNk16 RS" in ir and "mma.sync" not in ir
    torch.testing.assert_close(o, mod.reference(q, k, v, causal), rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(torch.cuda.get_device_capability() != (9, 0), reason="wgmma needs an sm_90a GPU")
@pytest.mark.parametrize("variant", ["shared", "fragment"])
def test_mla_decode_with_wgmma_on_gpu(monkeypatch, variant):
    """By default on the H200: mla_decode's three gemms (64 heads on two warpgroups) run on wgmma with N split over
    the warpgroups (scores m64n32 each, P @ V m64n256 each; the fragment variant's P in registers, RS) and match the
    reference."""
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)  # wgmma is the default on sm_90a
    import os
    from pathlib import Path

    shared = Path(os.environ.get("TILEAGENT_SHARED", REPO.parent / "shared")) / "examples"
    mod = load_module(shared / "mla_decode.py")
    kernel = tileagent.compile(mod.mla_decode.fn(4, 128, 1000, variant=variant))
    q, q_pe = torch.randn(4, 128, 512, device="cuda").half(), torch.randn(4, 128, 64, device="cuda").half()
    kv, k_pe = torch.randn(4, 1000, 1, 512, device="cuda").half(), torch.randn(4, 1000, 1, 64, device="cuda").half()
    o = _nan(4, 128, 512, dtype=torch.float16)
    kernel(q, q_pe, kv, k_pe, o)
    torch.cuda.synchronize()
    ir = kernel.get_ir("thread")
    assert "m64n256k16" in ir and "8 warps (4 x 2)" in ir and "mma.sync m16n8k16" not in ir
    torch.testing.assert_close(o, mod.reference(q, q_pe, kv, k_pe), rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(torch.cuda.get_device_capability() != (9, 0), reason="tests switching sm_90a's wgmma off")
@pytest.mark.parametrize("how", ["pass config", "environment"])
def test_tensor_core_examples_on_mma_sync_with_wgmma_switched_off(monkeypatch, how):
    """tl.disable_wgmma (pass config) or TILEAGENT_ENABLE_WGMMA=0: gemm_relu, flash attention (causal) and MLA decode
    keep mma.sync on the H200 (no wgmma in the source) and match torch."""
    import os
    from pathlib import Path

    configs = {"tl.disable_wgmma": True} if how == "pass config" else None
    if how == "environment":
        monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "0")
    shared = Path(os.environ.get("TILEAGENT_SHARED", REPO.parent / "shared")) / "examples"
    gemm, fa, mla = (load_module(shared / f"{n}.py") for n in ("gemm_relu", "flash_attn_fwd", "mla_decode"))
    kernels = []
    a, b = torch.randn(1000, 520, device="cuda").half(), torch.randn(520, 776, device="cuda").half()
    kernels.append(tileagent.compile(gemm.matmul.fn(1000, 776, 520, 128, 128, 64), pass_configs=configs))
    c = _nan(1000, 776, dtype=torch.float16)
    kernels[-1](a, b, c)
    torch.testing.assert_close(c, gemm.reference(a, b), rtol=2e-2, atol=5e-2)
    kernels.append(tileagent.compile(fa.flash_attn_fwd.fn(2, 4, 1000, 128, True), pass_configs=configs))
    q, k, v = (torch.randn(2, 1000, 4, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    o = _nan(2, 1000, 4, 128, dtype=torch.float16)
    kernels[-1](q, k, v, o)
    torch.testing.assert_close(o, fa.reference(q, k, v, True), rtol=1e-2, atol=1e-2)
    kernels.append(tileagent.compile(mla.mla_decode.fn(4, 128, 1000, variant="shared"), pass_configs=configs))
    q, q_pe = torch.randn(4, 128, 512, device="cuda").half(), torch.randn(4, 128, 64, device="cuda").half()
    kv, k_pe = torch.randn(4, 1000, 1, 512, device="cuda").half(), torch.randn(4, 1000, 1, 64, device="cuda").half()
    o = _nan(4, 128, 512, dtype=torch.float16)
    kernels[-1](q, q_pe, kv, k_pe, o)
    torch.testing.assert_close(o, mla.reference(q, q_pe, kv, k_pe), rtol=2e-2, atol=2e-2)
    torch.cuda.synchronize()
    for kernel in kernels:
        assert "wgmma" not in kernel.get_kernel_source() and "mma.sync m16n8k16" in kernel.get_ir("thread")
