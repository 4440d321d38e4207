"""TileLang's GEMM written with ``TensorCoreIntrinEmitter``
(``bench/tilelang_examples/gemm/example_gemm_intrinsics.py``: per-thread ldmatrix / mma.sync / stmatrix on
``T.alloc_local`` arrays, through ``tilelang.cuda.intrinsics.macro.mma_macro_generator``) on the CPU: its own main
and check at 128 with the GPU lowering checked; float16 and int8 against torch on the interpreter and the SIMT
emulator of the CUDA lowering; the CUDA (mma.sync asm) compiled by NVRTC for sm_90a. Also: the compat layer's
fragment maps equal the lane tables the executors run mma.sync with, and the emitter's unsupported forms are E701s
naming them."""

from pathlib import Path

import pytest
import torch

from tests.conftest import nvrtc_available, write_source
from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.jit import compile_defaults

GEMM = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "gemm" / "example_gemm_intrinsics.py"


@pytest.fixture
def example(tilelang):
    return load_script(GEMM)


def test_gemm_intrinsics_main_passes_its_own_check(example, capsys):
    """main(M=N=K=128): the profiler's benchmark and ``assert_allclose`` against ``A @ B.T`` (float16 in, float32
    accumulation, float16 out) with the GPU lowering checked."""
    with compile_defaults(lowering_check=True):
        example["main"](M=128, N=128, K=128)
    assert float(capsys.readouterr().out.split()[-1]) > 0  # its printed latency


@pytest.mark.parametrize("dtypes", [("float16", "float16", "float32"), ("int8", "int32", "int32")])
def test_gemm_intrinsics_on_both_executors_and_nvrtc(tilelang, example, dtypes):
    """M = 128, N = 256, K = 64 (two K chunks of the software pipeline, two blocks): the interpreter and the emulator
    of the CUDA lowering give A @ B.T (int8: exactly, m16n8k32), and NVRTC compiles the mma.sync asm."""
    in_dtype, out_dtype, accum = dtypes
    gen = torch.Generator().manual_seed(1)
    if in_dtype == "int8":
        a, b = (torch.randint(-128, 128, (n, 64), generator=gen, dtype=torch.int8) for n in (128, 256))
        want = (a.long() @ b.long().T).int()
    else:
        a, b = (torch.randn(n, 64, generator=gen).half() for n in (128, 256))
        want = (a.float() @ b.float().T).half()
    with compile_defaults(lowering_check=True):
        kernel = example["tl_matmul"].compile(M=128, N=256, K=64, in_dtype=in_dtype, out_dtype=out_dtype,
                                              accum_dtype=accum)
        got = kernel(a, b)
    sim = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="sim")(a, b)
    if in_dtype == "int8":
        assert torch.equal(got, want) and torch.equal(sim, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
        assert torch.equal(sim, got)  # the same mma semantics (compiler.emulate_tensor) on both executors
    if nvrtc_available():
        cuda = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="cuda:sm_90a")
        src = cuda.get_kernel_source()
        call = "tl_mma_m16n8k32_s8(C_local[0], C_local[1]" if in_dtype == "int8" else \
            "tl_mma_m16n8k16_f16(C_local[0], C_local[1]"
        assert call in src and src.count("tl_mma_m16n8k") == 33  # 32 atoms (4 x 8 per warp) and the helper
        assert cuda.cubin()[:4] == b"\x7fELF"


def test_fragment_maps_equal_the_lane_tables_of_mma_sync(tilelang):
    """The compat layer's mma_load / mma_store maps (what the emitter loads into and stores from each lane's array)
    are, element for element, the PTX lane layouts compiler.emulate_tensor runs mma.sync with (A 16 x 16, B as
    (k, n) 16 x 8, C 16 x 8; 8-bit: the same over byte pairs)."""
    from tilelang.cuda.intrinsics.layout import mma_layout as m

    from tileagent.compiler.emulate_tensor import _MMA_A, _MMA_B, _MMA_C

    lane = torch.arange(32)[:, None]
    assert all(torch.equal(torch.as_tensor(x), y.expand(32, 8)) for x, y in
               zip(m.mma_load_a_32x8_to_shared_16x16_layout(lane, torch.arange(8)), _MMA_A))
    n, k = m.mma_load_b_32x8_to_shared_16x16_layout(lane, torch.arange(4))  # the first n8 atom of B as (n, k)
    assert torch.equal(k, _MMA_B[0].expand(32, 4)) and torch.equal(n.expand(32, 4), _MMA_B[1])
    r, c = m.mma_store_32x8_to_shared_16x16_layout(lane, torch.arange(4))
    assert torch.equal(r, _MMA_C[0].expand(32, 4)) and torch.equal(c, _MMA_C[1].expand(32, 4))
    u = torch.arange(16)  # 8-bit A: element u is byte u % 2 of unit u // 2 of the 16-bit layout
    r8, c8 = m.mma_load_a_32x16_to_shared_16x32_layout(lane, u)
    assert torch.equal(r8, _MMA_A[0].expand(32, 8).repeat_interleave(2, 1))
    assert torch.equal(c8, (2 * _MMA_A[1].expand(32, 8)).repeat_interleave(2, 1) + u % 2)
    n8, k8 = m.mma_load_b_32x16_to_shared_16x32_layout(lane, torch.arange(8))
    assert torch.equal(k8, (2 * _MMA_B[0].expand(32, 4)).repeat_interleave(2, 1) + torch.arange(8) % 2)
    assert torch.equal(n8.expand(32, 8), _MMA_B[1].repeat_interleave(2, 1))


@pytest.mark.parametrize("kwargs, message", [
    (dict(a_dtype="float32", b_dtype="float32", accum_dtype="float32"),
     "TensorCoreIntrinEmitter: operands of float32 x float32 (mma.sync m16n8k8 tf32) is not supported by TileAgent"),
    (dict(reduce_k=2), "TensorCoreIntrinEmitter: reduce_k=2 / num_elems_per_byte=1 (split-K warps or packed "
                       "sub-byte operands) is not supported by TileAgent")])
def test_emitter_forms_it_does_not_take_are_E701(tilelang, kwargs, message):
    from tilelang.cuda.intrinsics import TensorCoreIntrinEmitter

    with pytest.raises(CompileError) as e:
        TensorCoreIntrinEmitter(**{"warp_row_tiles": 32, "warp_col_tiles": 32, "chunk": 32, **kwargs})
    assert e.value.code == "E701" and e.value.message.startswith(message)


def test_mma_on_locals_needs_whole_warps_and_local_operands(tilelang, tmp_path):
    """The emitter's mma on fragment operands is an E701; on a block of 48 threads (not whole warps) the interpreter
    faults at the mma."""
    ns = load_script(write_source(tmp_path, "bad_mma.py", """\
        import tilelang
        import tilelang.language as T
        from tilelang.cuda.intrinsics import TensorCoreIntrinEmitter


        @tilelang.jit(out_idx=[1])
        def bad(threads, scope):
            em = TensorCoreIntrinEmitter(a_dtype="float16", b_dtype="float16", accum_dtype="float32",
                                         b_transposed=True, block_row_warps=1, block_col_warps=1,
                                         warp_row_tiles=16, warp_col_tiles=16, chunk=16)

            @T.prim_func
            def main(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
                with T.Kernel(1, threads=threads) as bx:
                    S = T.alloc_shared((16, 16), "float16")
                    a = T.alloc_local((8,), "float16")
                    b = T.alloc_local((8,), "float16")
                    c = T.alloc_local((8,), "float32") if scope == "local" else T.alloc_fragment((16, 16), "float32")
                    T.copy(A, S)
                    T.clear(c)
                    em.ldmatrix_a(a, S, 0)
                    em.ldmatrix_b(b, S, 0)
                    em.mma(a, b, c)
                    em.stmatrix(c, C, 0, 0)
            return main
        """))
    with pytest.raises(CompileError) as e:
        ns["bad"](32, "fragment")
    assert e.value.code == "E701" and "mma on fragment (T.alloc_fragment) operands" in e.value.message
    a = torch.randn(16, 16).half()
    torch.testing.assert_close(ns["bad"](32, "local")(a), a.float() @ a.float().T, rtol=1e-3, atol=1e-3)
    with pytest.raises(Exception, match="mma.sync is warp-wide, but the block has 48 threads"):
        ns["bad"](48, "local")(a)


EMITTER_GEMM = """\
    import tilelang
    import tilelang.language as T
    from tilelang.cuda.intrinsics import TensorCoreIntrinEmitter


    @tilelang.jit(out_idx=[2])
    def gemm(dtype, acc, a_t, b_t, warp_cols_tiles):
        em = TensorCoreIntrinEmitter(a_dtype=dtype, b_dtype=dtype, accum_dtype=acc, a_transposed=a_t,
                                     b_transposed=b_t, block_row_warps=2, block_col_warps=1, warp_row_tiles=16,
                                     warp_col_tiles=warp_cols_tiles, chunk=em_k(dtype), is_m_first=True)
        M, N, K = 32, warp_cols_tiles, 2 * em_k(dtype)
        a_shape, b_shape = ((K, M) if a_t else (M, K)), ((N, K) if b_t else (K, N))

        @T.prim_func
        def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), acc)):
            with T.Kernel(1, threads=64) as bx:
                As = T.alloc_shared(a_shape, dtype)
                Bs = T.alloc_shared(b_shape, dtype)
                a = T.alloc_local((em.local_size_a,), dtype)
                b = T.alloc_local((em.warp_cols * em.local_size_b,), dtype)
                c = T.alloc_local((em.warp_cols * em.local_size_out,), acc)
                T.copy(A, As)
                T.copy(B, Bs)
                T.clear(c)
                for ki in T.serial(2):
                    em.ldmatrix_a(a, As, ki)
                    em.ldmatrix_b(b, Bs, ki)
                    em.mma(a, b, c)
                em.stmatrix(c, C, 0, 0)
        return main


    def em_k(dtype):
        return 32 if dtype == "int8" else 16
    """


@pytest.mark.parametrize("dtype, a_t, b_t, cols", [("float16", True, False, 24), ("float16", False, True, 16),
                                                   ("int8", True, False, 16), ("bfloat16", False, False, 8)])
def test_emitter_orientations_and_narrow_warp_tiles(tilelang, tmp_path, dtype, a_t, b_t, cols):
    """Transposed A / B, n8 column atoms (num=2 ldmatrix, 24 = three of them), is_m_first: the interpreter (the
    element stores) and the emulator of the CUDA lowering (ldmatrix.x4 / .x2 / .trans where TileLang uses it, else
    element loads: 8-bit operands stored M- or N-major) both give A @ B; NVRTC compiles it."""
    ns = load_script(write_source(tmp_path, "em.py", EMITTER_GEMM))
    acc = "int32" if dtype == "int8" else "float32"
    k = 64 if dtype == "int8" else 32
    gen = torch.Generator().manual_seed(2)
    if dtype == "int8":
        a, b = torch.randint(-9, 9, (32, k), generator=gen, dtype=torch.int8), \
            torch.randint(-9, 9, (k, cols), generator=gen, dtype=torch.int8)
        want = (a.long() @ b.long()).int()
    else:
        a, b = (torch.randn(*s, generator=gen).to(getattr(torch, dtype)) for s in ((32, k), (k, cols)))
        want = a.float() @ b.float()
    args = (a.T.contiguous() if a_t else a, b.T.contiguous() if b_t else b)
    with compile_defaults(lowering_check=True):
        kernel = ns["gemm"](dtype, acc, a_t, b_t, cols)
        got = kernel(*args)
    sim = tilelang.compile(kernel.func, out_idx=[2], target="sim")(*args)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert torch.equal(sim, got)
    if nvrtc_available():
        cuda = tilelang.compile(kernel.func, out_idx=[2], target="cuda:sm_90a")
        src = cuda.get_kernel_source()
        ldm = {("float16", True): "ldmatrix.sync.aligned.m8n8.x4.trans", ("int8", True): None,
               ("float16", False): "ldmatrix.sync.aligned.m8n8.x4",
               ("bfloat16", False): "ldmatrix.sync.aligned.m8n8.x2.trans"}[dtype, a_t]
        assert (ldm in src) if ldm else "ldmatrix" not in src
        assert cuda.cubin()[:4] == b"\x7fELF"
