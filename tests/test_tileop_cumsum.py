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


def test_split_spreads_few_long_lines_over_the_block():
    """One line over the whole block, chunks of at least MIN_CHUNK, a power of two threads a line whose butterfly
    partners exist; many lines keep one thread each."""
    from tileagent.compiler.tileops.cumsum import Split, split

    assert split((1, 4096), 1, 256) == Split(lines=1, n=4096, parts=256, chunk=17)  # 241 parts hold elements
    assert split((1, 4096), -1, 128) == Split(1, 4096, 128, 33)
    assert split((2, 1000), 1, 128) == Split(2, 1000, 64, 17)
    assert split((64,), 0, 128) == Split(1, 64, 16, 5)
    assert split((64, 16), 1, 128) == Split(64, 16, 2, 9)
    assert split((256, 16), 1, 64) == Split(256, 16, 1, 16)
    assert split((1, 256), 1, 48) == Split(1, 256, 16, 17)  # 32 lanes would need a second, partial warp
    assert split((1, 256), 1, 96) == Split(1, 256, 64, 5)


def _split_case(M, N, scope, dim, reverse, threads, dtype="float32"):
    """(interpreter result, emulated lowered result, exact float64 reference, kernel) of one (M, N) tile."""
    torch_dtype = getattr(torch, dtype)
    if torch_dtype.is_floating_point:  # magnitudes from 1e-3 to 1e3: a changed order changes the rounding
        a = (torch.randn(M, N) * 10.0 ** torch.randint(-3, 4, (M, N))).to(torch_dtype)
    else:
        a = torch.randint(-1000, 1000, (M, N), dtype=torch_dtype)
    func = tiled_cumsum(M, N, M, N, scope, dim, reverse, dtype=dtype, threads=threads)
    cpu, sim = run(func, "cpu", a, torch_dtype), run(func, "sim", a, torch_dtype)
    return cpu, sim, reference(a, M, N, dim % 2, reverse, torch.float64), tileagent.compile(func, target="sim")


@pytest.mark.parametrize("scope,dim,reverse,threads,parts", [
    ("fragment", 1, False, 256, 256),  # a (1, 4096) row on 256 threads: 8 warps, warp totals through the scratch
    ("shared", 1, True, 128, 128),  # the suffix scan of a shared row, in place, chunks of 33
    ("fragment", -1, True, 96, 64),  # 64 of 96 threads: the third warp idles through the shuffles
])
def test_a_long_row_is_scanned_by_the_whole_block(scope, dim, reverse, threads, parts):
    """A (1, 4096) tile: each thread scans a chunk, shuffles give the chunk offsets; the lowered program agrees with
    the interpreter bit for bit and with the exact sums within float32 rounding."""
    cpu, sim, exact, kernel = _split_case(1, 4096, scope, dim, reverse, threads)
    assert torch.equal(cpu, sim)
    torch.testing.assert_close(sim.double(), exact, rtol=1e-5, atol=2e-3)
    where = "in place" if scope == "shared" else "in the shared scratch"
    assert f"chunk scans {where}: {parts} threads a line" in kernel.get_ir("thread")
    source = kernel.get_kernel_source()
    assert "__shfl_xor_sync" in source and "__syncthreads" in source


@pytest.mark.parametrize("M,N,scope,dim,reverse,threads", [
    (2, 1000, "fragment", 1, False, 128),  # 2 lines x 64 threads: two warps a line
    (2, 256, "shared", 1, True, 64),  # 2 lines x 32 threads: one warp a line
    (300, 3, "shared", 0, False, 128),  # down 3 columns of 300: 32 threads a column, a short last chunk
    (4, 70, "fragment", 1, True, 128),  # 32 threads a line, chunks of 4, the last parts empty
])
def test_few_lines_split_among_many_threads_match_torch(M, N, scope, dim, reverse, threads):
    cpu, sim, exact, _ = _split_case(M, N, scope, dim, reverse, threads)
    assert torch.equal(cpu, sim)
    torch.testing.assert_close(sim.double(), exact, rtol=1e-5, atol=2e-3)


@pytest.mark.parametrize("dtype,scope", [("int32", "fragment"), ("int64", "shared"), ("int16", "fragment")])
def test_integer_rows_split_among_threads_are_exact(dtype, scope):
    cpu, sim, exact, kernel = _split_case(2, 2048, scope, 1, True, 128, dtype=dtype)
    assert torch.equal(cpu, sim) and torch.equal(sim, exact.to(sim.dtype))
    assert "64 threads a line" in kernel.get_ir("thread")


@pytest.mark.parametrize("scope", ["shared", "fragment"])
def test_half_row_split_among_threads_rounds_once(scope):
    """float16 in and out over a (1, 2048) row: float32 sums, one rounding; interpreter and lowered code agree."""
    a = (torch.rand(1, 2048) + 0.5).half()
    func = tiled_cumsum(1, 2048, 1, 2048, scope, 1, False, dtype="float16", threads=128)
    cpu, sim = run(func, "cpu", a, torch.float16), run(func, "sim", a, torch.float16)
    assert torch.equal(cpu, sim)
    exact = reference(a, 1, 2048, 1, False, torch.float64)
    assert ((cpu.double() - exact).abs() <= exact.abs() * 2 ** -11 * 1.01).all()


@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("dim,reverse", [(0, True), (1, False), (2, True)])
def test_a_3d_tile_is_scanned_along_any_dim(scope, dim, reverse):
    """(4, 3, 50) on 128 threads: 150 lines of 4 (one thread each), 200 lines of 3, or 12 lines of 50 split 8
    ways; interpreter and lowered code agree bit for bit and match torch."""
    alloc = T.alloc_shared if scope == "shared" else T.alloc_fragment

    @T.prim_func
    def main(A: T.Tensor((4, 3, 50), "float32"), B: T.Tensor((4, 3, 50), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = alloc((4, 3, 50), "float32")
            T.copy(A, s)
            T.cumsum(s, dim=dim, reverse=reverse)
            T.copy(s, B)

    a = torch.randn(4, 3, 50)
    cpu, sim = run(main, "cpu", a, torch.float32), run(main, "sim", a, torch.float32)
    assert torch.equal(cpu, sim)
    want = a.double().flip(dim).cumsum(dim).flip(dim) if reverse else a.double().cumsum(dim)
    torch.testing.assert_close(sim.double(), want, rtol=1e-5, atol=1e-4)


def test_a_split_line_rounds_its_sums_mostly_at_chunk_magnitude():
    """Each output is its chunk's own prefix sum plus the chunk's offset: a few roundings at the line's magnitude
    (sums up to 4.1e6 here, half an ulp 0.125), where one thread's running sum rounds at every element."""
    from tileagent.compiler.tileops.cumsum import split_scan

    x = torch.randn(8, 4096) + 1000.0
    exact = x.double().cumsum(1)

    def worst(y):
        return float((y.double() - exact).abs().max())

    assert worst(split_scan(x, 256, 16)) < 1.0 < 2.0 < worst(split_scan(x, 1, 4096))


def test_chunk_scans_read_one_bank_per_lane():
    """Chunks of 32 float32s side by side put a warp's 32 lanes in one bank at every step; split chunks are odd, and
    so is the scratch's stride per part, so the lanes' elements lie in 32 distinct banks."""
    from tileagent.compiler.lower.cumsum import stride
    from tileagent.compiler.tileops.cumsum import split

    for shape, threads in (((1, 4096), 128), ((1, 4096), 256), ((2, 1000), 128), ((64, 16), 128), ((256, 16), 64)):
        sp = split(shape, 1, threads)
        lanes = torch.arange(32)
        assert len(set((lanes * stride(sp) % 32).tolist())) == 32
        assert sp.parts == 1 or len(set((lanes * sp.chunk % 32).tolist())) == 32


def test_a_large_shared_row_is_split_in_place():
    """A float32 (1, 32768) shared row on 256 threads: chunks of 129 scanned in the tile itself; the scratch holds
    only the 8 warp totals, so the kernel fits where a copy of the row in the scratch would not (128 KB + 128 KB)."""
    a = torch.randn(1, 32768)
    func = tiled_cumsum(1, 32768, 1, 32768, "shared", 1, False, threads=256, in_place=True)
    kernel = tileagent.compile(func, target="sim")
    assert "chunk scans in place: 256 threads a line, 129 elements each" in kernel.get_ir("thread")
    assert kernel.module.kernels[0].shared_bytes <= 32768 * 4 + 64
    cpu, sim = run(func, "cpu", a, torch.float32), run(func, "sim", a, torch.float32)
    assert torch.equal(cpu, sim)
    torch.testing.assert_close(sim.double(), a.double().cumsum(1), rtol=1e-5, atol=1e-2)


def test_a_reduction_after_an_in_place_split_reuses_the_scratch_safely():
    """The warp totals of a shared row split in place live in the scratch; a reduction across warps right after
    writes it too: a barrier ends the totals' reads (the emulator reports the race without it)."""

    @T.prim_func
    def main(A: T.Tensor((1, 4096), "float32"), B: T.Tensor((1, 4096), "float32"), C: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            s = T.alloc_shared((1, 4096), "float32")
            f = T.alloc_fragment((1, 4096), "float32")
            r = T.alloc_fragment((1,), "float32")
            T.copy(A, s)
            T.copy(A, f)
            T.cumsum(s, dim=1)
            T.reduce_sum(f, r, dim=1)
            T.copy(s, B)
            T.copy(r, C)

    a = torch.randn(1, 4096)
    out = {}
    for target in ("cpu", "sim"):
        out[target] = torch.full((1, 4096), float("nan")), torch.full((1,), float("nan"))
        tileagent.compile(main, target=target)(a, *out[target])
    assert torch.equal(out["cpu"][0], out["sim"][0])
    torch.testing.assert_close(out["sim"][1], a.sum(1, keepdim=True)[0], rtol=1e-5, atol=1e-4)


def test_a_large_half_shared_row_keeps_one_thread_per_line():
    """A float16 shared tile cannot hold exact chunk sums; its float32 copy would take 128 KB of scratch (over
    SHARED_SCRATCH_MAX), so one thread scans the row in place as before, and the interpreter knows it."""
    from tileagent.compiler.ir.visit import walk
    from tileagent.compiler.tileops.cumsum import CumSum, split_of

    func = tiled_cumsum(1, 32768, 1, 32768, "shared", 1, False, dtype="float16", threads=256, in_place=True)
    kernel = tileagent.compile(func, target="sim")
    assert "sequential scan per line in place" in kernel.get_ir("thread")
    assert kernel.module.kernels[0].shared_bytes <= 32768 * 2 + 64
    assert split_of(next(s for s in walk(kernel.func.body) if isinstance(s, CumSum)), 256).parts == 1


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

    for scope, shape, threads in (("shared", (32, 64), 128), ("fragment", (32, 64), 128),
                                  ("fragment", (1, 4096), 256), ("shared", (2, 2048), 128)):
        for arch in ("sm_80", "sm_90a"):  # each lowered for its arch (sm_90a's may store by cp.async.bulk)
            source = tileagent.compile(tiled_cumsum(100, 4096, *shape, scope, 1, True, dtype="float16",
                                                    threads=threads), target=f"sim:{arch}").get_kernel_source()
            assert compile_to_cubin(source, arch, cache=False)[:4] == b"\x7fELF"


def test_the_split_scan_becomes_ptx_that_ptxas_assembles():
    """The PTX emitter (the default path where ptxas exists) covers the chunk scans, shuffles and warp totals."""
    from tileagent.compiler import passes
    from tileagent.compiler.runtime import ptxas
    from tileagent.compiler.target import for_arch
    from tileagent.compiler.targets.ptx import generate

    kernel = tileagent.compile(tiled_cumsum(1, 4096, 1, 4096, "fragment", 1, True, threads=256), target="cpu:sm_90a")
    module = passes.run(kernel.func, for_arch("sm_90a", "sim"), kernel.options, until="lower_tile_ops").module
    ptx = generate(module, "sm_90a")
    assert ptx.count("shfl.sync.bfly") == 5
    assert ptxas.ptx_to_cubin(ptx, "sm_90a", cache=False)[:4] == b"\x7fELF"
