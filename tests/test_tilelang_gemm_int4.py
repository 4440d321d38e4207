"""int4 / uint4 tensors and tiles (``compiler/language/packed.py``): TileLang's int4 GEMM example
(``gemm_int4/example_tilelang_gemm_int4.py``, copied unchanged to ``bench/tilelang_examples``) and the rules of packed
buffers: two elements a byte, element 2k in the low nibble of byte k, the torch argument the int8 / uint8 tensor
they are packed in; T.gemm on mma.sync m16n8k64; element reads as int32; what cannot be done in whole bytes is an
E302 at the line."""

from pathlib import Path

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError
from tests.conftest import nvrtc_available

EXAMPLE = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "gemm_int4" / \
    "example_tilelang_gemm_int4.py"


def pack(t: torch.Tensor, dtype=torch.int8) -> torch.Tensor:
    """Elements in [-8, 8) or [0, 16) packed two a byte along the last dim, the even one in the low nibble."""
    t16 = t.to(torch.int16)
    return ((t16[..., ::2] & 15) | ((t16[..., 1::2] & 15) << 4)).to(torch.uint8).view(dtype)


@pytest.mark.parametrize("target", ["cpu", "sim:sm_80", "sim:sm_90a"])
def test_the_examples_int4_gemm_is_exact(tilelang, target):
    """The example's kernel (64 x 64 x 128 tiles, three stages) at M=N=64, K=256, its own packing helper: C equals
    the int32 product, on the interpreter and on the lowered program of both archs (mma.sync m16n8k64 there)."""
    ns = load_script(EXAMPLE)
    func = ns["matmul_nt_int4"](64, 64, 256, 64, 64, 128)
    kernel = tilelang.compile(func, out_idx=-1, target=target)
    torch.manual_seed(0)
    a, b = (torch.randint(-8, 8, shape, dtype=torch.int8) for shape in ((64, 256), (64, 256)))
    c = kernel(ns["pack_int4"](a), ns["pack_int4"](b))
    torch.testing.assert_close(c, a.to(torch.int32) @ b.to(torch.int32).T, rtol=0, atol=0)
    if target != "cpu":
        assert "mma.sync m16n8k64" in kernel.get_ir("thread")


def uint4_gemm(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), T.uint4), B: T.Tensor((N, K), T.uint4), C: T.Tensor((M, N), T.int32)):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((M, K), T.uint4)
            B_s = T.alloc_shared((N, K), T.uint4)
            C_f = T.alloc_fragment((M, N), T.int32)
            T.copy(A[0:M, 0:K], A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, transpose_B=True, clear_accum=True)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("target", ["cpu", "sim:sm_80"])
def test_uint4_gemm_takes_uint8_storage_and_is_exact(target):
    kernel = tileagent.compile(uint4_gemm(32, 16, 128), out_idx=-1, target=target)
    torch.manual_seed(1)
    a, b = torch.randint(0, 16, (32, 128)), torch.randint(0, 16, (16, 128))
    c = kernel(pack(a, torch.uint8), pack(b, torch.uint8))
    torch.testing.assert_close(c, (a @ b.T).to(torch.int32), rtol=0, atol=0)


def test_int4_tensor_wants_its_packed_bytes():
    kernel = tileagent.compile(uint4_gemm(32, 16, 128), out_idx=-1, target="cpu")
    with pytest.raises(Exception, match="parameter 'A' expects dtype uint8"):
        kernel(pack(torch.zeros(32, 128), torch.int8), pack(torch.zeros(16, 128), torch.uint8))


def unpack_kernel(N, dtype):
    @T.prim_func
    def main(X: T.Tensor((4, N), dtype), Y: T.Tensor((4, N), T.int32)):
        with T.Kernel(1, threads=32) as bx:
            X_s = T.alloc_shared((4, N), dtype)
            T.copy(X, X_s)
            for i, j in T.Parallel(4, N):
                Y[i, j] = X_s[i, j] + X[i, j] * 100

    return main


@pytest.mark.parametrize("dtype,lo,hi", [(T.int4, -8, 8), (T.uint4, 0, 16)])
def test_element_reads_are_int32_nibbles(dtype, lo, hi):
    """An element read of a packed buffer (global or shared) is its nibble as int32, int4 sign-extended."""
    x = torch.randint(lo, hi, (4, 32))
    kernel = tileagent.compile(unpack_kernel(32, dtype), out_idx=-1, target="cpu")
    y = kernel(pack(x, torch.int8 if dtype == T.int4 else torch.uint8))
    torch.testing.assert_close(y, (x * 101).to(torch.int32), rtol=0, atol=0)


@pytest.mark.skipif(not nvrtc_available(), reason="needs NVRTC")
def test_the_examples_int4_gemm_compiles_for_sm90a(tilelang):
    ns = load_script(EXAMPLE)
    kernel = tilelang.compile(ns["matmul_nt_int4"](1024, 1024, 1024, 128, 128, 64), out_idx=-1,
                              target="cuda:sm_90a")
    assert "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32" in kernel.get_kernel_source()
    assert kernel.cubin()[:4] == b"\x7fELF"


def _error(func) -> CompileError:
    with pytest.raises(CompileError) as info:
        tileagent.compile(func(), target="cpu")
    return info.value


def test_odd_last_dim_is_e302():
    def odd():
        @T.prim_func
        def main(X: T.Tensor((4, 33), T.int4)):
            with T.Kernel(1, threads=32) as bx:
                T.clear(X[0, 0:2])

        return main

    e = _error(odd)
    assert e.code == "E302"
    assert "parameter 'X': a int4 buffer's last dim is stored two elements a byte and must be even, got shape " \
           "(4, 33)" in e.message


def test_storing_one_element_is_e302():
    def store():
        @T.prim_func
        def main(X: T.Tensor((4, 32), T.int4)):
            with T.Kernel(1, threads=32) as bx:
                X_s = T.alloc_shared((4, 32), T.int4)
                T.copy(X, X_s)
                for i, j in T.Parallel(4, 32):
                    X_s[i, j] = 1
                T.copy(X_s, X)

        return main

    e = _error(store)
    assert (e.code, e.message) == ("E302", "cannot store one element of int4 buffer 'X_s' (two elements a byte)")
    assert e.span.line > 0


def test_converting_copy_and_mixed_gemm_are_e302():
    def convert():
        @T.prim_func
        def main(X: T.Tensor((16, 64), T.int4), Y: T.Tensor((16, 64), T.int32)):
            with T.Kernel(1, threads=128) as bx:
                f = T.alloc_fragment((16, 64), T.int32)
                T.copy(X, f)
                T.copy(f, Y)

        return main

    def mixed():
        @T.prim_func
        def main(X: T.Tensor((16, 64), T.int4), W: T.Tensor((16, 64), T.int8), Y: T.Tensor((16, 16), T.int32)):
            with T.Kernel(1, threads=128) as bx:
                X_s = T.alloc_shared((16, 64), T.int4)
                W_s = T.alloc_shared((16, 64), T.int8)
                f = T.alloc_fragment((16, 16), T.int32)
                T.copy(X, X_s)
                T.copy(W, W_s)
                T.gemm(X_s, W_s, f, transpose_B=True, clear_accum=True)
                T.copy(f, Y)

        return main

    e = _error(convert)
    assert e.code == "E302"
    assert e.message.startswith("T.copy from 'X' (int4) to 'f' (int32) converts each element")
    e = _error(mixed)
    assert e.code == "E302"
    assert "packed operands multiply only as two int4 (or two uint4) tiles into an int32 accumulator" in e.message


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_examples_own_check_passes_on_the_gpu(tilelang):
    """The example as its main() runs it: 1024^3 on the GPU, C exactly the int32 product (its own assert_close); and
    a uint4 gemm (on sm_90 both are two int8 / uint8 mmas a 4-bit one)."""
    ns = load_script(EXAMPLE)
    ns["check_int4_gemm_correctness"]()
    a, b = torch.randint(0, 16, (32, 128)), torch.randint(0, 16, (16, 128))
    c = tileagent.compile(uint4_gemm(32, 16, 128), out_idx=-1)(pack(a, torch.uint8).cuda(), pack(b, torch.uint8).cuda())
    torch.testing.assert_close(c.cpu(), (a @ b.T).to(torch.int32), rtol=0, atol=0)


def test_an_odd_element_reads_as_a_value_and_is_refused_as_a_tile_origin():
    def read_odd():
        @T.prim_func
        def main(X: T.Tensor((4, 32), T.int4), Y: T.Tensor((4,), T.int32)):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(4):
                    Y[i] = X[i, 3]

        return main

    x = torch.randint(-8, 8, (4, 32))
    y = tileagent.compile(read_odd(), out_idx=-1, target="cpu")(pack(x))
    torch.testing.assert_close(y, x[:, 3].to(torch.int32), rtol=0, atol=0)

    def copy_from_odd():
        @T.prim_func
        def main(X: T.Tensor((4, 32), T.int4), Y: T.Tensor((4, 4), T.int4)):
            with T.Kernel(1, threads=32) as bx:
                T.copy(X[0, 3], Y)

        return main

    e = _error(copy_from_odd)
    assert e.code == "E302" and e.message.startswith("a tile of int4 buffer 'X' starts at element 3 of its last dim")
