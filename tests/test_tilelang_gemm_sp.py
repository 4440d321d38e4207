"""TileLang's 2:4 structured-sparse GEMM (``gemm_sp/example_gemm_sp.py``, copied unchanged to
``bench/tilelang_examples``): ``T.gemm_sp`` decompresses A in shared memory and runs the dense GEMM
(compiler/language/sparse.py); and the language its compressor (``sparse_utils.py``) needs: ``T.device_assert``, a
tuple assignment that swaps elements, ``T.copy`` of a thread's slice into its registers in per-thread code."""

import inspect
from pathlib import Path

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compat.run import load_script
from tileagent.compiler.errors import KernelFault

EXAMPLE = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "gemm_sp" / "example_gemm_sp.py"


@pytest.fixture
def example(tilelang):
    import sys

    ns = load_script(EXAMPLE)
    return ns, sys.modules["sparse_utils"]


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_the_examples_sparse_gemm_matches_the_dense_product(example, tilelang, target):
    """The example's kernel at 128^3 (64 x 64 x 64 tiles, two stages, float32 C, int16 metadata) on inputs its
    generator makes 2:4 sparse, compressed by its PyTorch reference compressor: C equals A @ B."""
    ns, utils = example
    func = ns["matmul_sp_fp16"].__wrapped__(128, 128, 128, T.float32, T.int16, 64, 64, 64, 2, 128,
                                            T.GemmWarpPolicy.Square, True)
    torch.manual_seed(0)
    a = ns["randn_semi_sparse"](128, 128, device="cpu", dtype=torch.half)
    b = torch.randn(128, 128, dtype=torch.half)
    a_sparse, e = utils.torch_compress(a, torch.int16)
    c = tilelang.compile(func, out_idx=[-1], target=target)(a_sparse, e, b)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-4)


def test_the_examples_sparse_gemm_compiles_for_sm90a_on_wgmma(example, tilelang):
    ns, _ = example
    func = ns["matmul_sp_fp16"].__wrapped__(1024, 1024, 1024, T.float32, T.int16, 128, 128, 64, 2, 128,
                                            T.GemmWarpPolicy.Square, True)
    kernel = tilelang.compile(func, out_idx=[-1], target="cuda:sm_90a")
    assert "wgmma.mma_async m64nNk16 SS" in kernel.get_ir("thread")
    assert kernel.cubin()[:4] == b"\x7fELF"


def test_the_examples_compressor_indexes_past_its_two_slot_array(example):
    """The compressor writes ``nz_idx[nz_count]`` after the group's second nonzero (nz_count == 2, nz_idx has two
    slots): out of bounds of a register array. The CPU interpreter says so at the line (on a GPU it writes past the
    array, undefined behaviour that happens to work); the sparse GEMM's own tests use the PyTorch compressor."""
    ns, _ = example
    a = ns["randn_semi_sparse"](16, 1024, device="cpu", dtype=torch.half)
    with pytest.raises(KernelFault) as info:
        ns["compress"](a, meta_dtype=torch.int16)
    assert info.value.message == "index 2 is out of bounds for dim 0 of 'nz_idx' (shape (2,))"
    line = EXAMPLE.with_name("sparse_utils.py").read_text().splitlines()[info.value.span.line - 1]
    assert line.strip().startswith("nz_idx[nz_count] = T.if_then_else(")


def _asserting(threshold):
    @T.prim_func
    def f(X: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            t = T.get_thread_binding()
            T.device_assert(X[bx * 32 + t] < threshold, "X too large")  # <- assert

    return f


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_device_assert_stops_the_kernel_with_its_message_at_its_line(target):
    x = torch.arange(64, dtype=torch.float32)
    tileagent.compile(_asserting(100.0), target=target)(x)
    with pytest.raises(KernelFault) as info:
        tileagent.compile(_asserting(40.0), target=target)(x)
    assert info.value.message == "T.device_assert failed: X too large"
    src, start = inspect.getsourcelines(_asserting)
    assert info.value.span.line == start + next(k for k, t in enumerate(src) if "# <- assert" in t)
    assert "__trap();  // T.device_assert: X too large" in tileagent.compile(
        _asserting(40.0), target="cuda:sm_90a").get_kernel_source()


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_a_threads_slice_copied_into_its_registers_and_its_elements_swapped(target):
    """Per-thread code: each thread copies its 4-element slice of a row into a local array (T.copy), swaps the first
    two elements with a tuple assignment (both read before either is stored) and writes the slice back."""
    @T.prim_func
    def f(X: T.Tensor((4, 32), "float16"), Y: T.Tensor((4, 32), "float16")):
        with T.Kernel(4, threads=8) as bx:
            t = T.get_thread_binding()
            r = T.alloc_local((4,), "float16")
            T.copy(X[bx, t * 4:(t + 1) * 4], r)
            r[0], r[1] = r[1], r[0]
            T.copy(r, Y[bx, t * 4:(t + 1) * 4])

    x = torch.randn(4, 32).half()
    y = torch.zeros_like(x)
    tileagent.compile(f, target=target)(x, y)
    want = x.view(4, 8, 4)[:, :, [1, 0, 2, 3]].reshape(4, 32)
    torch.testing.assert_close(y, want)


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_device_assert_inside_t_parallel_checks_every_iteration(target):
    @T.prim_func
    def f(X: T.Tensor((256,), "int32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(256):
                T.device_assert(X[i] != 7, "a seven")

    x = torch.arange(256, dtype=torch.int32) + 8
    tileagent.compile(f, target=target)(x)
    x[200] = 7
    with pytest.raises(KernelFault, match="T.device_assert failed: a seven"):
        tileagent.compile(f, target=target)(x)
