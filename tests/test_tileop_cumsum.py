"""T.cumsum(src, dst=None, dim=0, reverse=False), stage by stage: the DSL call and the checker's diagnostics, the
printer, the tile interpreter (the semantic reference) and the lowered per-thread program in the SIMT emulator,
against torch; the generated CUDA compiles with NVRTC for sm_80 and sm_90a."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CompileError


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiled_cumsum(M, N, BM, BN, scope, dim, reverse, dtype="float32", out_dtype=None, threads=128, in_place=False):
    """B = blockwise cumsum of A over (BM, BN) tiles, through a fragment or a shared tile."""
    out_dtype = out_dtype or dtype
    alloc = T.alloc_shared if scope == "shared" else T.alloc_fragment

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=threads) as (bx, by):
            s = alloc((BM, BN), dtype)
            t = alloc((BM, BN), out_dtype)
            T.copy(A[by * BM, bx * BN], s)
            if in_place:
                T.cumsum(s, dim=dim, reverse=reverse)
                T.copy(s, B[by * BM, bx * BN])
            else:
                T.cumsum(s, t, dim=dim, reverse=reverse)
                T.copy(t, B[by * BM, bx * BN])

    return main


def reference(a, BM, BN, dim, reverse, out_dtype=None):
    out = torch.empty(a.shape, dtype=torch.float64)
    for i in range(0, a.shape[0], BM):
        for j in range(0, a.shape[1], BN):
            t = a[i:i + BM, j:j + BN].double()
            out[i:i + BM, j:j + BN] = t.flip(dim).cumsum(dim).flip(dim) if reverse else t.cumsum(dim)
    return out.to(out_dtype or a.dtype)


def run(func, target, a, out_dtype):
    b = torch.full(a.shape, float("nan"), dtype=out_dtype) if out_dtype.is_floating_point else \
        torch.full(a.shape, -7, dtype=out_dtype)
    tileagent.compile(func, target=target)(a, b)
    return b


@pytest.mark.parametrize("target", ["cpu", "sim"])
@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("dim,reverse", [(0, False), (1, False), (0, True), (-1, True)])
def test_cumsum_of_ragged_tiles_matches_torch(target, scope, dim, reverse):
    a = torch.randn(100, 70)
    b = run(tiled_cumsum(100, 70, 32, 64, scope, dim, reverse), target, a, torch.float32)
    torch.testing.assert_close(b, reference(a, 32, 64, dim % 2, reverse), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("scope", ["shared", "fragment"])
def test_in_place_cumsum_with_more_lines_than_threads(scope):
    """dst defaults to src; 256 lines over 64 threads: each thread scans four lines."""
    a = torch.randn(256, 16)
    for target in ("cpu", "sim"):
        b = run(tiled_cumsum(256, 16, 256, 16, scope, 1, False, threads=64, in_place=True), target, a, torch.float32)
        torch.testing.assert_close(b, reference(a, 256, 16, 1, False), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("scope", ["shared", "fragment"])
def test_half_cumsum_accumulates_in_float32_and_rounds_once(scope):
    """float16 in and out: the running sum is float32, each output rounded once; interpreter and lowered code agree
    bit for bit, and both are as close to the exact sum as one rounding allows."""
    a = (torch.rand(64, 128) + 0.5).half()
    func = tiled_cumsum(64, 128, 16, 128, scope, 1, False, dtype="float16")
    cpu, sim = run(func, "cpu", a, torch.float16), run(func, "sim", a, torch.float16)
    assert torch.equal(cpu, sim)
    exact = reference(a, 16, 128, 1, False, torch.float64)
    assert ((cpu.double() - exact).abs() <= exact.abs() * 2 ** -11 * 1.01).all()


def test_integer_cumsum_is_exact():
    a = torch.randint(-1000, 1000, (48, 40), dtype=torch.int32)
    for target in ("cpu", "sim"):
        b = run(tiled_cumsum(48, 40, 16, 40, "shared", 0, True, dtype="int32"), target, a, torch.int32)
        assert torch.equal(b, reference(a, 16, 40, 0, True))


def test_cumsum_of_a_replicated_fragment():
    """A reduction's output is replicated over the reduced threads: only replica 0 feeds the scan, every replica
    gets the result."""
    M, N = 64, 32

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            row = T.alloc_fragment((M,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, row, dim=1)
            T.cumsum(row, dim=0)
            T.copy(row, B)

    a = torch.randn(M, N)
    for target in ("cpu", "sim"):
        b = torch.full((M,), float("nan"))
        tileagent.compile(main, target=target)(a, b)
        torch.testing.assert_close(b, a.sum(1).cumsum(0), rtol=1e-5, atol=1e-4)


def test_cumsum_prints_like_the_dsl():
    text = tileagent.compile(tiled_cumsum(64, 64, 32, 64, "shared", 1, True), target="cpu").get_ir("tile")
    assert "T.cumsum(s, t, dim=1, reverse=True)" in text
    text = tileagent.compile(tiled_cumsum(64, 64, 32, 64, "fragment", 0, False, in_place=True),
                             target="cpu").get_ir("tile")
    assert "T.cumsum(s, dim=0)" in text


def _error(src_scope, dst_scope, dst_shape, dim):
    alloc = {"shared": T.alloc_shared, "fragment": T.alloc_fragment}

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = alloc[src_scope]((64, 64), "float32")
            t = alloc[dst_scope](dst_shape, "float32")
            T.copy(A, s)
            T.cumsum(s, t, dim=dim)

    with pytest.raises(CompileError) as info:
        tileagent.compile(main, target="cpu")
    return info.value


def test_cumsum_diagnostics():
    e = _error("shared", "fragment", (64, 64), 1)
    assert e.code == "E501" and "both must be fragments or both shared tiles" in str(e)
    e = _error("shared", "shared", (64, 64), 2)
    assert e.code == "E404" and "dim 2 is out of range for the 2-d buffer 's'" in str(e)
    e = _error("fragment", "fragment", (64, 32), 1)
    assert e.code == "E402" and "dst 't' has shape (64, 32)" in str(e)

    @T.prim_func
    def global_operand(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.cumsum(A, dim=0)

    with pytest.raises(CompileError) as info:
        tileagent.compile(global_operand, target="cpu")
    assert info.value.code == "E501" and "'A' is in global memory" in str(info.value)


def test_cumsum_lowered_source_compiles_for_sm80_and_sm90a():
    from tileagent.compiler.runtime.nvrtc import compile_to_cubin

    for scope in ("shared", "fragment"):
        source = tileagent.compile(tiled_cumsum(100, 70, 32, 64, scope, 1, True, dtype="float16"),
                                   target="sim").get_kernel_source()
        for arch in ("sm_80", "sm_90a"):
            assert compile_to_cubin(source, arch, cache=False)[:4] == b"\x7fELF"
