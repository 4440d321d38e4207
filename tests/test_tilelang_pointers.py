"""``T.ptr`` and ``T.make_tensor`` (compiler/language/pointers.py): TileLang's grouped GEMM by pointer tables
(``grouped_gemm/example_grouped_gemm_fwd_ptr.py``, copied unchanged to ``bench/tilelang_examples``), each group's A,
B and C a tensor of its own passed only as an address, against torch on the CPU interpreter, its lowering in the SIMT
emulator (no TMA: the host has no tensor map for them), NVRTC; and the errors of bad addresses."""

import inspect
from pathlib import Path

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.errors import KernelFault

EXAMPLE = Path(__file__).resolve().parents[1] / "bench/tilelang_examples/grouped_gemm/example_grouped_gemm_fwd_ptr.py"


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_grouped_gemm_by_pointer_tables_matches_torch(tilelang, target):
    """The example's own test sizes (groups of 16, 33 and 64 rows, K 128, N 96, 32 x 32 x 32 tiles), its inputs and
    its check; C starts as NaN, so every element the kernel owes is written."""
    ns = load_script(EXAMPLE)
    torch.manual_seed(0)
    sizes = [16, 33, 64]
    program = ns["grouped_gemm_ptr"](sizes, 128, 96, 32, 32, 32)
    kernel = tilelang.compile(program, target=target, pass_configs={"tl.disable_warp_specialized": True})
    a, b, c, a_ptrs, b_ptrs, c_ptrs, offsets = ns["construct_inputs"](sizes, 128, 96, 32, "cpu", torch.float16)
    for t in c:
        t.fill_(float("nan"))
    kernel(a_ptrs, b_ptrs, c_ptrs, offsets)
    ns["verify_outputs"](c, ns["torch_grouped_gemm_ptr"]([x[:n] for x, n in zip(a, sizes)], b), sizes)
    assert not any(t[:n].isnan().any() for t, n in zip(c, sizes))


def test_grouped_gemm_by_pointer_tables_lowers_without_tma_and_compiles(tilelang):
    ns = load_script(EXAMPLE)
    kernel = tilelang.compile(ns["grouped_gemm_ptr"]([64, 128, 256], 256, 256, 64, 128, 64, threads=256),
                              target="cuda:sm_90a")
    src = kernel.get_kernel_source()
    assert "half* A = reinterpret_cast<half*>(" in src and "cp.async.bulk.tensor" not in src
    assert "no TMA: A, B, C made from device addresses" in kernel.get_ir("thread")
    assert kernel.cubin()[:4] == b"\x7fELF"


def _table_kernel(address_dtype="int64"):
    @T.prim_func
    def f(P: T.Tensor((2,), address_dtype), Y: T.Tensor((2, 4), "float32")):
        with T.Kernel(2, threads=32) as bx:
            X = T.make_tensor(P[bx], (4,), "float32")  # <- make
            for i in T.Parallel(4):
                Y[bx, i] = X[i] * 2.0

    return f


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_a_null_address_is_a_kernel_fault_at_the_make_tensor_line(target):
    x = torch.arange(4, dtype=torch.float32)
    table = torch.tensor([x.data_ptr(), 0], dtype=torch.int64)
    kernel = tileagent.compile(_table_kernel(), target=target)
    y = torch.zeros(2, 4)
    with pytest.raises(KernelFault) as info:
        kernel(table, y)
    assert "T.make_tensor 'X': address 0x0 is null, negative or not aligned to its 4-byte float32 elements" in str(
        info.value)
    src, start = inspect.getsourcelines(_table_kernel)
    assert info.value.span.line == start + next(k for k, t in enumerate(src) if "# <- make" in t)
    table[1] = x.data_ptr()
    kernel(table, y)
    torch.testing.assert_close(y, torch.stack([x * 2, x * 2]))


def test_an_address_that_is_not_a_64_bit_integer_is_E302():
    with pytest.raises(CompileError) as info:
        tileagent.compile(_table_kernel("int32"), target="cpu")
    assert info.value.code == "E302"
    assert "T.make_tensor: the address is int32, not a 64-bit integer" in info.value.message
    assert "T.Tensor([n], T.ptr)" in info.value.hint


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_grouped_gemm_by_pointer_tables_on_the_gpu(tilelang):
    """The example's own test on the GPU (its tensors on cuda, its check), then the example's sizes of main()."""
    ns = load_script(EXAMPLE)
    ns["test_grouped_gemm_ptr"]()
    ns["run_tilelang_grouped_gemm_ptr"]([64, 128, 256], 1024, 1024, 64, 128, 64, threads=256)
