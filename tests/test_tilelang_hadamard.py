"""TileLang's fast Hadamard transform (``bench/tilelang_examples/hadamard_transform``: per-thread code exchanging values
with ``T.tvm_warp_shuffle`` and through a shared tile laid out by ``tilelang.cuda.intrinsics.make_mma_swizzle_layout``)
on the CPU: the program's own main and check at a small size with the GPU lowering checked; the SIMT emulator of the
CUDA lowering on a size whose shared tile is XOR-swizzled; its CUDA compiled by NVRTC for sm_90a. Also the pieces:
the swizzle helpers' index maps as our Layouts, and the warp shuffle's semantics on the interpreter and the
emulator."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import nvrtc_available, write_source
from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.jit import compile_defaults

HADAMARD = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "hadamard_transform"


@pytest.fixture
def hadamard(tilelang, monkeypatch):
    """The example's namespace, with its ``device="cuda"`` inputs made on the CPU."""
    pytest.importorskip("scipy")  # its reference builds the matrix with scipy.linalg.hadamard
    randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, device=None, **k: randn(*a, **k))
    return load_script(HADAMARD / "example_hadamard.py")


def test_hadamard_main_passes_its_own_check_with_the_gpu_lowering_checked(hadamard, monkeypatch, capsys):
    """dim 2048: 256 threads of 8 elements, shuffles within warps, then two exchanges through the shared tile
    (rows of 32 bytes: make_mma_swizzle_layout's identity map) around a shuffle across the 8 warps."""
    monkeypatch.setattr(sys, "argv", ["example_hadamard.py", "--batch", "2", "--dim", "2048"])
    with compile_defaults(lowering_check=True):
        hadamard["main"]()
    assert "All tests passed." in capsys.readouterr().out


def test_hadamard_swizzled_exchange_on_the_emulator_and_nvrtc(tilelang, hadamard):
    """dim 8192: the shared tile is (256, 32) float32, 128-byte rows: the swizzle helper's map is our
    Swizzle(3, 2, 3) XOR layout, which the CUDA indexes with; the emulator of that CUDA lowering matches the
    reference."""
    import tilelang.language as T

    kernel = hadamard["hadamard"].compile(n=8192, dtype=T.float32, b=1)
    x = torch.randn(1, 8192, generator=torch.Generator().manual_seed(0))
    sim = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="sim")
    torch.testing.assert_close(sim(x), hadamard["ref_program"](x), atol=1e-2, rtol=1e-2)
    if not nvrtc_available():
        return
    cuda = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="cuda:sm_90a")
    src = cuda.get_kernel_source()
    assert "shared[(src_tx * 32 + j_2) ^ ((((src_tx * 32 + j_2) / 32) % 8) * 4)] = local[exchange_base + j_2];" in src
    assert "__shfl_sync(0xffffffffu, local[j_1], tl_floormod<int>(another_tx, 32), 32)" in src
    assert cuda.cubin()[:4] == b"\x7fELF"


def _offsets(fn, shape):
    """Row-major offsets of ``fn``'s outputs (the physical buffer spanning each output's range)."""
    from tileagent.compiler.layout.index_map import offsets_of_index_map

    return offsets_of_index_map(shape, fn)


@pytest.mark.parametrize("shape, dtype, bytes_", [((256, 32), "float32", 4), ((128, 32), "float16", 2),
                                                  ((64, 128), "float16", 2), ((32, 64), "int8", 1)])
def test_mma_swizzle_layout_is_kept_as_the_equal_layout(tilelang, shape, dtype, bytes_):
    """TileLang's get_swizzle_layout over a tile (128-, 64-byte rows; a 256-byte row cut into two 128-byte column
    blocks) is recognized as a Layout of ours with the same offset at every element."""
    from tilelang.cuda.intrinsics import get_swizzle_layout

    from tileagent.compiler.layout.index_map import layout_of_index_map

    fn = lambda i, j: get_swizzle_layout(i, j, shape[-1], dtype)  # noqa: E731
    layout = layout_of_index_map(shape, bytes_, fn)
    assert layout is not None and layout.swizzle is not None
    assert np.array_equal(layout.table(), _offsets(fn, shape))
    # the first row whose XOR is 1 (row 1 of 128-byte blocks, row 2 of 64-byte ones) keeps chunk 0 in chunk 1
    block = min(128, shape[-1] * bytes_) // bytes_
    per16 = 16 // bytes_
    row = 8 // (block // per16)
    assert int(layout.offset((row, 0))) == row * block + per16


def test_t_layout_on_shared_tiles_kept_dropped_or_refused(tilelang, tmp_path, caplog):
    """An identity or swizzle T.Layout on a shared tile is kept; a map that is no layout of ours is dropped with a
    log line (results unchanged); on a fragment it is an E701 with the reason."""
    path = write_source(tmp_path, "layouts.py", """\
        import tilelang
        import tilelang.language as T
        from tilelang.cuda.intrinsics import make_mma_swizzle_layout


        @tilelang.jit(out_idx=[1])
        def copy(frag_layout):
            @T.prim_func
            def main(X: T.Tensor((64, 64), "float16"), Y: T.Tensor((64, 64), "float16")):
                with T.Kernel(1, threads=128) as bx:
                    S = T.alloc_shared((64, 64), "float16")
                    R = T.alloc_shared((64, 64), "float16")
                    F = T.alloc_fragment((64, 64), "float32")
                    T.annotate_layout({S: make_mma_swizzle_layout(S),
                                       R: T.Layout((64, 64), lambda i, j: [j, i])})
                    if frag_layout:
                        T.annotate_layout({F: T.Layout((64, 64), lambda i, j: [i, j])})
                    T.copy(X, S)
                    T.copy(S, R)
                    T.copy(R, Y)
            return main
        """)
    ns = load_script(path)
    x = torch.randn(64, 64).half()
    with caplog.at_level("INFO", logger="tileagent.compiler"):
        torch.testing.assert_close(ns["copy"](False)(x), x)
    assert "T.Layout of shared tile R is no layout of ours: its layout is inferred" in caplog.text
    with pytest.raises(CompileError) as e:
        ns["copy"](True)
    assert e.value.code == "E701" and "T.Layout on fragment buffer 'F' is not supported" in e.value.message


SHUFFLE = """\
    import tilelang
    import tilelang.language as T


    @tilelang.jit(out_idx=[1])
    def shuffle(width, mask=0xFFFFFFFF):
        @T.prim_func
        def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                tx = T.get_thread_binding(0)
                v = T.alloc_local((1,), "float32")
                v[0] = X[tx]
                Y[tx] = T.tvm_warp_shuffle(mask, v[0], tx * 3 + 1, width, 32)
        return main
    """


@pytest.mark.parametrize("width", [32, 8])
def test_warp_shuffle_semantics_on_the_interpreter_and_the_emulator(tilelang, tmp_path, width):
    """Thread t gets thread (t // width) * width + (3 t + 1) % width's value (the lane modulo the width), on both
    CPU executors; the CUDA is __shfl_sync."""
    ns = load_script(write_source(tmp_path, "shfl.py", SHUFFLE))
    kernel = ns["shuffle"](width)
    x = torch.arange(64, dtype=torch.float32) * 10
    t = torch.arange(64)
    want = x[t // width * width + (3 * t + 1) % width]
    assert torch.equal(kernel(x), want)
    sim = tilelang.compile(kernel.func, out_idx=[1], target="sim")
    assert torch.equal(sim(x), want)
    if nvrtc_available():
        cuda = tilelang.compile(kernel.func, out_idx=[1], target="cuda:sm_90a")
        assert f"__shfl_sync(0xffffffffu, v[0], tx_1 * 3 + 1, {width})" in cuda.get_kernel_source()
        assert cuda.cubin()[:4] == b"\x7fELF"


def test_warp_shuffle_with_a_partial_mask_is_E701(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "shfl.py", SHUFFLE))
    with pytest.raises(CompileError) as e:
        ns["shuffle"](32, mask=0xFFFF)
    assert e.value.code == "E701" and e.value.message == (
        "T.tvm_warp_shuffle with mask 65535: only the full mask (0xFFFFFFFF, every lane of the warp taking part) is "
        "supported")


def test_missing_tilelang_cuda_modules_name_what_is_missing(tilelang):
    with pytest.raises(CompileError) as e:
        import tilelang.cuda.codegen  # noqa: F401
    assert e.value.code == "E701" and "of tilelang.cuda only intrinsics' mma.sync helpers are provided" in \
        e.value.message
    with pytest.raises(CompileError) as e:
        import tilelang.cuda.intrinsics.macro.wgmma_macro_generator  # noqa: F401
    assert "only mma_macro_generator (TensorCoreIntrinEmitter: mma.sync on local arrays) is provided" in e.value.message
    with pytest.raises(CompileError) as e:  # bitnet's prefill benchmark: a name TileLang itself no longer has
        from tilelang.cuda.intrinsics.macro.mma_macro_generator import INT4TensorCoreIntrinEmitter  # noqa: F401
    assert e.value.code == "E701" and e.value.message.startswith(
        "INT4TensorCoreIntrinEmitter is not in TileLang's mma_macro_generator: TileLang removed it")


def test_sparse_layout_metadata_and_gemm_sp_shapes(tilelang, tmp_path):
    """TileLang's 2:4 metadata helpers have its values; T.gemm_sp checks that E indexes A
    (tests/test_tilelang_gemm_sp.py runs it)."""
    import tilelang.language as T
    from tilelang.cuda.intrinsics.sparse_layout import GROUP_CONFIG, get_e_factor, get_e_replicate_factor

    assert GROUP_CONFIG[T.float16] == (2, 4) and GROUP_CONFIG[T.float32] == (1, 2)
    assert get_e_factor(T.float16, T.int16) == 16 and get_e_factor("int8", "int8") == 8
    assert get_e_factor(T.float32, T.int32) == 16
    assert get_e_replicate_factor(T.int8) == 1 and get_e_replicate_factor(T.bfloat16) == 2
    ns = load_script(write_source(tmp_path, "sp.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[-1])
        def sp():
            @T.prim_func
            def main(A: T.Tensor((64, 32), "float16"), E: T.Tensor((64, 4), "int16"),
                     B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    a = T.alloc_shared((64, 32), "float16")
                    e = T.alloc_shared((64, 2), "int16")
                    b = T.alloc_shared((64, 64), "float16")
                    c = T.alloc_fragment((64, 64), "float32")
                    T.gemm_sp(a, e, b, c)
            return main
        """))
    with pytest.raises(CompileError) as e:
        ns["sp"]()
    assert e.value.code == "E403" and e.value.message == (
        "T.gemm_sp: E (64, 2) does not index A_sparse (64, 32): 64 rows of 4 int16 elements, each covering 16 "
        "values of K")


def test_t_layout_on_a_wgmma_operand_leaves_it_the_canonical_layout(tilelang, tmp_path):
    """A row-major T.Layout on a T.gemm operand is a hint: on sm_90a the gemm runs on wgmma, whose canonical
    swizzled layout the tile keeps (TileLang's own gemm lays out such a tile itself); the result is A @ B."""
    ns = load_script(write_source(tmp_path, "wg.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[2])
        def mm():
            @T.prim_func
            def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
                     C: T.Tensor((64, 64), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    a = T.alloc_shared((64, 64), "float16")
                    b = T.alloc_shared((64, 64), "float16")
                    c = T.alloc_fragment((64, 64), "float32")
                    T.annotate_layout({a: T.Layout((64, 64), lambda i, j: [i, j])})
                    T.copy(A, a)
                    T.copy(B, b)
                    T.gemm(a, b, c, clear_accum=True)
                    T.copy(c, C)
            return main
        """))
    kernel = ns["mm"]()
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    if nvrtc_available():
        cuda = tilelang.compile(kernel.func, out_idx=[2], target="cuda:sm_90a")
        assert "wgmma.mma_async" in cuda.get_kernel_source() and cuda.cubin()[:4] == b"\x7fELF"
