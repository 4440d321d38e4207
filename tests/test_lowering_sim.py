"""The lowered per-thread program, run in the SIMT emulator (target "sim"), against torch, at ragged sizes; and the
generated CUDA compiled by NVRTC for sm_80 and sm_90a. This is how CI checks layout inference and lowering."""

import inspect
import re

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CompileError
from tests import kernels as K


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


CASES = {
    "bias_gelu": (lambda: K.bias_gelu(37, 96),
                  lambda: (torch.randn(37, 96, dtype=torch.float16), torch.randn(96, dtype=torch.float16)),
                  lambda: _nan(37, 96, dtype=torch.float16)),
    "layernorm": (lambda: K.layernorm(13, 160),
                  lambda: (torch.randn(13, 160, dtype=torch.float16), torch.randn(160, dtype=torch.float16),
                           torch.randn(160, dtype=torch.float16)),
                  lambda: _nan(13, 160, dtype=torch.float16)),
    "column_max": (lambda: K.column_max(64, 80), lambda: (torch.randn(64, 80),), lambda: _nan(80)),
    "transpose": (lambda: K.transpose(70, 45), lambda: (torch.randn(70, 45, dtype=torch.float16),),
                  lambda: _nan(45, 70, dtype=torch.float16)),
    "column_sum_atomic": (lambda: K.column_sum_atomic(50, 64), lambda: (torch.randn(50, 64),),
                          lambda: torch.zeros(64)),
    "splitk_gemm": (lambda: K.splitk_gemm(40, 64, 128, 2),
                    lambda: (torch.randn(40, 128, dtype=torch.float16), torch.randn(128, 64, dtype=torch.float16)),
                    lambda: torch.zeros(40, 64)),
    "splitk_gemm_elementwise": (lambda: K.splitk_gemm(40, 64, 128, 2, elementwise=True),
                                lambda: (torch.randn(40, 128, dtype=torch.float16),
                                         torch.randn(128, 64, dtype=torch.float16)),
                                lambda: torch.zeros(40, 64)),
}


def test_tile_atomic_add_is_vectorized():
    """Split-K partial tiles go out as float2 atomics (float4 needs runs of 4, which the mma accumulator layout
    does not have), with the per-element fallback below sm_90 in the same source."""
    src = tileagent.compile(K.splitk_gemm(40, 64, 128, 2), target="sim").get_kernel_source()
    assert "atomicAdd(reinterpret_cast<float2*>(&C[" in src and "#if __CUDA_ARCH__ >= 900" in src


def test_element_atomic_adds_of_adjacent_registers_are_vectorized():
    """T.atomic_add per element in T.Parallel (attention backward's dQ): each thread's pairs of adjacent accumulator
    columns go out as one float2 atomic, under the row bounds check (40 rows, blocks of 32); a column sum whose
    threads hold 4 adjacent columns each, as one float4."""
    ir = tileagent.compile(K.splitk_gemm(40, 64, 128, 2, elementwise=True), target="sim").get_ir("thread")
    adds = [line.strip() for line in ir.splitlines() if "atomic_add" in line]
    assert adds and all(":+2], acc[" in a for a in adds), adds
    assert "float2" in tileagent.compile(K.splitk_gemm(40, 64, 128, 2, elementwise=True),
                                         target="cuda:sm_90a").get_kernel_source()
    ir = tileagent.compile(K.column_sum_atomic(50, 64), target="sim").get_ir("thread")
    assert "T.atomic_add(Y[tid % 16 * 4:+4], s[0:+4])" in ir


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_kernel_matches_torch_in_the_emulator(name):
    factory, inputs, output = CASES[name]
    kernel = tileagent.compile(factory(), target="sim")
    ins, out = inputs(), output()
    kernel(*ins, out)
    torch.testing.assert_close(out, K.REFERENCES[name](*ins), rtol=1e-2, atol=1e-2)


def test_dynamic_rows_run_with_two_sizes_in_the_emulator():
    kernel = tileagent.compile(K.scale_rows(0, 100), target="sim")
    for m in (3, 5):
        x, y = torch.randn(m, 100), _nan(m, 100)
        kernel(x, y)
        torch.testing.assert_close(y, K.REFERENCES["scale_rows"](x))


@pytest.mark.parametrize("C", [32, 96, 160, 192, 320, 1024])
def test_shared_rmsnorm_silu_lowers_correctly(shared_example, C):
    mod = shared_example("rmsnorm_silu")
    kernel = tileagent.compile(mod.rmsnorm_silu.fn(7, C), target="sim")
    x, g = torch.randn(7, C, dtype=torch.float16), torch.randn(C, dtype=torch.float16)
    y = _nan(7, C, dtype=torch.float16)
    kernel(x, g, y)
    torch.testing.assert_close(y, mod.reference(x, g), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("M,N", [(3, 256), (2, 2048)])
def test_shared_softmax_lowers_correctly(shared_example, M, N):
    mod = shared_example("softmax")
    kernel = tileagent.compile(mod.softmax.fn(M, N), target="sim")
    x = torch.randn(M, N, dtype=torch.float16) * 4
    y = _nan(M, N, dtype=torch.float16)
    kernel(x, y)
    torch.testing.assert_close(y, mod.reference(x), rtol=1e-2, atol=1e-3)


def _marked_lines(fn) -> dict:
    src, start = inspect.getsourcelines(fn)
    return {text.split("# <- ")[1].strip(): start + k for k, text in enumerate(src) if "# <- " in text}


def test_layout_conflict_names_both_fragments_and_lines():
    """``a`` (the larger tile, so laid out first by its copy) read transposed in a loop over part of it: no
    thread map serves both (a transposed read of a fragment without a layout yet takes the loop's map instead)."""
    @T.prim_func
    def f(X: T.Tensor((64, 8), "float32"), Y: T.Tensor((4, 64), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((64, 8), "float32")
            c = T.alloc_fragment((4, 64), "float32")
            T.copy(X, a)  # <- copy
            for i, j in T.Parallel(4, 64):  # <- loop
                c[i, j] = a[j, i]  # <- conflict
            T.copy(c, Y)

    lines = _marked_lines(test_layout_conflict_names_both_fragments_and_lines)
    with pytest.raises(CompileError) as info:
        tileagent.compile(f, target="sim")
    err = info.value
    assert err.code == "L001" and err.span.line == lines["conflict"]
    assert f"between 'a' (layout from line {lines['copy']}: T.copy, default layout)" in err.message
    assert f"loop at line {lines['loop']}, which runs on the layout of 'c'" in err.message
    assert err.hint and len(err.notes) == 2


def _serial_rows(S, N):
    """TileLang's split-KV combine pattern: a fragment written by T.Parallel(S, N), reduced over dim 0, then read and
    written row by row as x[k, j] with k an enclosing T.serial variable, and a slice of it copied out."""

    @T.prim_func
    def f(X: T.Tensor((S, N), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((2, N), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((S, N), "float32")
            m = T.alloc_fragment((N,), "float32")
            acc = T.alloc_fragment((N,), "float32")
            for k, j in T.Parallel(S, N):
                x[k, j] = X[k, j]
            T.reduce_max(x, m, dim=0, clear=True)
            T.clear(acc)
            for k in T.serial(S):
                for j in T.Parallel(N):
                    acc[j] += T.exp(x[k, j] - m[j])
                    x[k, j] = x[k, j] * (k + 1)
            T.copy(acc, Y)
            T.copy(x[1:3, :], Z)

    return f


def test_fragment_indexed_by_an_enclosing_serial_variable_keeps_that_dim_in_registers():
    kernel = tileagent.compile(_serial_rows(4, 96), target="sim")
    layouts = {b.name: f for b, f in kernel.layouts().fragments.items()}
    assert [lv.is_thread for lv in layouts["x"].dims[0]] == [False]  # every owner holds the whole column
    x = torch.randn(4, 96)
    y, z = _nan(96), _nan(2, 96)
    kernel(x, y, z)
    torch.testing.assert_close(y, torch.exp(x - x.max(0).values).sum(0))
    torch.testing.assert_close(z, x[1:3] * torch.tensor([[2.0], [3.0]]))
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_serial_index_into_a_dim_spread_over_threads_is_L004():
    @T.prim_func
    def f(A: T.Tensor((32, 32), "float16"), B: T.Tensor((32, 32), "float16"), Y: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((32, 32), "float16")
            b = T.alloc_shared((32, 32), "float16")
            acc = T.alloc_fragment((32, 32), "float32")
            s = T.alloc_fragment((32,), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.clear(acc)
            T.gemm(a, b, acc)
            T.clear(s)
            for i in T.serial(32):
                for j in T.Parallel(32):
                    s[j] += acc[i, j]  # <- row
            T.copy(s, Y)

    lines = _marked_lines(test_serial_index_into_a_dim_spread_over_threads_is_L004)
    with pytest.raises(CompileError) as info:
        tileagent.compile(f, target="sim")
    err = info.value
    assert err.code == "L004" and err.span.line == lines["row"]
    assert "fragment 'acc' is indexed in the T.Parallel loop at line" in err.message
    assert "spreads that dim over threads" in err.message and "T.alloc_shared" in err.hint


def test_parallel_variable_running_past_a_fragment_is_L004_on_the_gpu_path():
    """TileLang's attention-sink backward writes sinks[i] (a [heads] fragment) for i in T.Parallel(block_M); guarded
    by an if such a loop is fine on the CPU interpreter, but the GPU layouts cover the declared shape (was I000)."""
    @T.prim_func
    def f(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=64):
            sinks = T.alloc_fragment((4,), "float32")
            for i in T.Parallel(64):
                sinks[i] = A[0]  # <- write
            T.copy(sinks, B)

    lines = _marked_lines(test_parallel_variable_running_past_a_fragment_is_L004_on_the_gpu_path)
    with pytest.raises(CompileError) as info:
        tileagent.compile(f, target="sim")
    err = info.value
    assert err.code == "L004" and err.span.line == lines["write"]
    assert "'sinks' (shape (4,)) is indexed by 'i', a T.Parallel variable running to 63, past dim 0" in err.message
    assert "allocate 'sinks' with the loop's extent (64)" in err.hint


def test_a_fragment_used_element_by_element_past_its_shape_takes_the_loops_size():
    """The attention-sink backward as TileLang runs it: ``sinks = T.alloc_fragment([heads])`` (8) written and read as
    ``sinks[i]`` in ``T.Parallel(block_M)`` (64) loops only, which TileLang lays out by the loops: the fragment is
    declared at 64 (compiler/frontend_grow.py) and the kernel computes what TileLang's does. The test above, whose
    fragment is also a T.copy source, stays an L004."""
    @T.prim_func
    def f(A: T.Tensor((4,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            sinks = T.alloc_fragment((8,), "float32")
            acc = T.alloc_fragment((64,), "float32")
            for i in T.Parallel(64):
                sinks[i] = A[1] * 2.0
            for i in T.Parallel(64):
                acc[i] = sinks[i] + i
            T.copy(acc, B)

    a = torch.arange(4, dtype=torch.float32)
    for target in ("sim", "cpu"):
        b = torch.full((64,), float("nan"))
        tileagent.compile(f, target=target)(a, b)
        torch.testing.assert_close(b, 2.0 + torch.arange(64, dtype=torch.float32))


def test_copy_offset_read_from_a_var_runs_in_the_emulator():
    """TileLang's grouped GEMM copies B[cur_batch_idx, ...] with cur_batch_idx a T.alloc_var: the region's start reads
    the var's register (it once reached codegen as a tile-level load: I000)."""
    @T.prim_func
    def f(Sel: T.Tensor((2,), "int32"), A: T.Tensor((4, 64), "float16"), B: T.Tensor((2, 64), "float16")):
        with T.Kernel(2, threads=64) as bx:
            row = T.alloc_var("int32")
            s = T.alloc_shared((64,), "float16")
            row = Sel[bx]
            T.copy(A[row, 0:64], s)
            T.copy(s, B[bx, 0:64])

    kernel = tileagent.compile(f, target="sim")
    a, out = torch.randn(4, 64, dtype=torch.float16), _nan(2, 64, dtype=torch.float16)
    kernel(torch.tensor([3, 1], dtype=torch.int32), a, out)
    torch.testing.assert_close(out, a[[3, 1]])
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_sliced_copy_between_fragments_runs_as_a_parallel_loop_in_the_emulator():
    """TileLang's split-KV decoding copies T.copy(lse_local[k, :], lse_split) with k a T.serial variable (once E602:
    whole register tiles only); compiler.desugar makes it the T.Parallel loop it means."""
    @T.prim_func
    def f(X: T.Tensor((4, 96), "float32"), Y: T.Tensor((96,), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((4, 96), "float32")
            row = T.alloc_fragment((96,), "float32")
            acc = T.alloc_fragment((96,), "float32")
            for k, j in T.Parallel(4, 96):
                x[k, j] = X[k, j]
            T.clear(acc)
            for k in T.serial(4):
                T.copy(x[k, :], row)
                for j in T.Parallel(96):
                    acc[j] += row[j] * (k + 1)
            T.copy(acc, Y)

    kernel = tileagent.compile(f, target="sim")
    x, y = torch.randn(4, 96), _nan(96)
    kernel(x, y)
    torch.testing.assert_close(y, (x * torch.arange(1.0, 5.0)[:, None]).sum(0))
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_loop_over_more_dims_than_a_fragment_it_reads_runs_on_that_fragments_owners():
    """TileLang's GQA decoding with logits normalizes S_shared[h, k] by scores_max[h] in T.Parallel(H, K): the loop
    runs each (h, k) on the threads holding scores_max[h] (once L001 against the blocked default)."""
    @T.prim_func
    def f(X: T.Tensor((16, 64), "float32"), S: T.Tensor((16, 8), "float32"), Y: T.Tensor((16, 8), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((16, 64), "float32")
            m = T.alloc_fragment((16,), "float32")
            s = T.alloc_shared((16, 8), "float32")
            T.copy(X, x)
            T.reduce_max(x, m, dim=1)
            T.copy(S, s)
            for h, k in T.Parallel(16, 8):
                s[h, k] = s[h, k] - m[h]
            T.copy(s, Y)

    kernel = tileagent.compile(f, target="sim")
    x, sc, y = torch.randn(16, 64), torch.randn(16, 8), _nan(16, 8)
    kernel(x, sc, y)
    torch.testing.assert_close(y, sc - x.max(1, keepdim=True).values)
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_layouts_print_one_line_per_fragment_and_loop(shared_example):
    kernel = tileagent.compile(shared_example("softmax").softmax.fn(4, 512), target="sim")
    text = str(kernel.layouts())
    assert text.startswith("x: Fragment(1, 512)")
    assert "row_max: Fragment(1,)" in text and "replicated x128" in text
    assert text.count("T.Parallel(i, j)") == 2


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_lowered_kernels_compile_with_nvrtc(shared_example, arch):
    kernels = [factory() for factory, _, _ in CASES.values()] + [
        K.scale_rows(0, 100), shared_example("rmsnorm_silu").rmsnorm_silu.fn(1000, 320),
        shared_example("softmax").softmax.fn(777, 2048)]
    for func in kernels:
        cubin = tileagent.compile(func, target="sim").cubin(arch)
        assert cubin[:4] == b"\x7fELF"


def test_profiler_times_and_checks_on_the_cpu_target():
    kernel = tileagent.compile(K.bias_gelu(16, 64), out_idx=[2], target="cpu")
    profiler = kernel.get_profiler()
    profiler.assert_allclose(K.REFERENCES["bias_gelu"], atol=1e-2, rtol=1e-2)
    assert profiler.do_bench(warmup=1, rep=3) > 0


def test_shared_buffers_with_disjoint_lifetimes_share_bytes():
    @T.prim_func
    def f(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            first = T.alloc_shared((64, 64), "float32")
            second = T.alloc_shared((64, 64), "float32")
            T.copy(X, first)
            T.copy(first, Y)
            T.copy(Y, second)
            T.copy(second, Y)

    kernel = tileagent.compile(f, target="sim")
    offsets = {b.name: o for b, o in kernel.module.kernels[0].shared_offsets.items()}
    assert offsets["first"] == offsets["second"] == 0
    assert kernel.module.kernels[0].shared_bytes == 64 * 64 * 4
    x, y = torch.randn(64, 64), torch.full((64, 64), float("nan"))
    kernel(x, y)
    torch.testing.assert_close(y, x)


def _row_sum_and_max(M, N, threads):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32"), Mx: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads) as _:
            x = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            m = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            T.reduce_sum(x, s, dim=1)
            T.reduce_max(x, m, dim=1)
            T.copy(s, S)
            T.copy(m, Mx)

    return main


@pytest.mark.parametrize("M,N,threads,scratch_floats", [
    (2, 512, 256, 2 * 4),  # each row over 128 threads: 4 warps meet in shared memory (one slot each per thread: 256)
    (4, 40, 128, 4 * 2),  # 64 threads per row over 40 columns (padding in the reduced dim), 2 registers per thread
    (3, 96, 256, 4 * 4),  # 3 rows padded to 4
    (2, 64, 256, 2 * 2),  # the fragment replicated over the block's two halves: replicas write the same values
])
def test_cross_warp_row_reductions_keep_one_partial_per_row_and_warp(M, N, threads, scratch_floats):
    """Rows split across warps: after the shuffles, one float per (row, warp) goes through the shared scratch (not
    one per thread and register), every holder of a row gets the same total, padding is not counted. The sum and
    the max share one round (compiler.lower.reduce.fused_runs): the scratch holds both's partials."""
    import re

    kernel = tileagent.compile(_row_sum_and_max(M, N, threads), target="sim")
    src = kernel.get_kernel_source()
    assert int(re.search(r"float\* scratch_float32 = .*// (\d+) x float", src).group(1)) == 2 * scratch_floats
    x, s, m = torch.randn(M, N), _nan(M), _nan(M)
    kernel(x, s, m)
    torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-5)
    assert torch.equal(m, x.amax(1))



def _column_sum(M, N, threads, dtype):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), S: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=threads) as _:
            x = T.alloc_fragment((M, N), dtype)
            acc = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((N,), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(M, N):
                acc[i, j] = T.cast(x[i, j], "float32")
            T.reduce_sum(acc, s, dim=0)
            T.copy(s, S)

    return main


@pytest.mark.parametrize("M,N,threads,dtype", [
    (64, 256, 512, "float16"),  # mean_seq's column tile: 8 columns a lane, 16 warps (one row each) meet in shared
    (64, 64, 128, "float16"),  # 8 columns a lane, 8 lanes a row, 4 warps
    (32, 128, 128, "float32"),  # sum_dim's: 4 columns a lane, 4 warps
])
def test_column_reduction_partials_meet_in_shared_memory_without_bank_conflicts(M, N, threads, dtype):
    """A reduction down columns whose rows are spread over warps: the partials sit at [warp][column] with a padding
    word after every 32, so the lanes of a warp (a 16-byte vector of columns each) write and read 32 different
    banks; at [column][warp] they had 8-way (4 warps, 8 lanes a row) to 32-way (16 warps) conflicts: ~65000
    cycles a block for mean_seq's 16 warps. Every column's total is torch's."""
    import re

    kernel = tileagent.compile(_column_sum(M, N, threads, dtype), target="sim")
    src = kernel.get_kernel_source()
    accesses = re.findall(r"scratch_float32\[(.*?)\](?: = |;)", src)
    assert accesses
    for text in accesses:
        loop = re.findall(r"\b(r\d+)\b", text)
        expr = text.replace("/", "//")
        for warp in range(threads // 32):
            for r in range(2 if loop else 1):
                env = {"tid": 0, **{v: r for v in loop}}
                slots = {lane: eval(expr, {**env, "tid": warp * 32 + lane}) for lane in range(32)}
                banks = {}
                for slot in set(slots.values()):
                    banks.setdefault(slot % 32, set()).add(slot)
                assert max(len(v) for v in banks.values()) == 1, (text, warp, banks)
    x, out = torch.randn(M, N).to(getattr(torch, dtype)), _nan(N)
    kernel(x, out)
    torch.testing.assert_close(out, x.float().sum(0), rtol=1e-5, atol=1e-4)


def _mask_kernel(cond, M=96, N=80, bM=32, bN=16, out_dtype="float32"):
    """Out[r, c] = 1 where cond(r, c, row index, col index, k) else -2, written tile by tile: a T.Parallel mask over
    each (bM, bN) tile of a serial loop, as attention's masks are."""

    @T.prim_func
    def main(Out: T.Tensor((M, N), out_dtype)):
        with T.Kernel(M // bM, threads=128) as bx:
            s = T.alloc_fragment((bM, bN), out_dtype)
            for k in T.serial(N // bN):
                for i, j in T.Parallel(bM, bN):
                    s[i, j] = T.if_then_else(cond(bx * bM + i, k * bN + j, i, j, k), 1.0, -2.0)
                T.copy(s, Out[bx * bM, k * bN])

    return main


MASKS = {  # name: (the DSL condition, torch's over the row and column grids, whether it is split by tile)
    "causal": (lambda r, c, i, j, k: r >= c, lambda r, c: r >= c, True),
    "strict_offset": (lambda r, c, i, j, k: r > c + 5, lambda r, c: r > c + 5, True),
    "ragged": (lambda r, c, i, j, k: c < 40, lambda r, c: c < 40, True),
    "slope": (lambda r, c, i, j, k: 2 * r - 3 * j <= c + 7, lambda r, c: 2 * r - 3 * (c % 16) <= c + 7, True),
    "nonlinear": (lambda r, c, i, j, k: i * j >= k, lambda r, c: (r % 32) * (c % 16) >= c // 16, False),
}


@pytest.mark.parametrize("name", sorted(MASKS))
def test_masks_are_split_by_tile_and_keep_their_values(name):
    """compiler.desugar.split_masks: a mask linear in the loop's variables becomes 'every point / no point / the
    loop', tested once per tile; the emulated kernel equals torch's mask at every element, on tiles wholly inside,
    wholly outside and across the boundary (the interpreter runs the original loop and agrees)."""
    cond, ref, split = MASKS[name]
    func = _mask_kernel(cond)
    rows, cols = torch.meshgrid(torch.arange(96), torch.arange(80), indexing="ij")
    want = torch.where(ref(rows, cols), 1.0, -2.0)
    for target in ("sim", "cpu"):
        out = _nan(96, 80)
        tileagent.compile(func, target=target)(out)
        assert torch.equal(out, want), target
    kernel = tileagent.compile(func, target="sim")
    ir = kernel.get_ir("thread")
    assert (ir.count(">= 0:") >= 1 and ir.count("< 0:") >= 1) == split, ir
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_a_mask_stored_with_a_cast_is_split_too():
    func = _mask_kernel(MASKS["causal"][0], out_dtype="float16")  # the select is float32, cast to the tile's float16
    rows, cols = torch.meshgrid(torch.arange(96), torch.arange(80), indexing="ij")
    out = _nan(96, 80, dtype=torch.float16)
    kernel = tileagent.compile(func, target="sim")
    kernel(out)
    assert torch.equal(out, torch.where(rows >= cols, 1.0, -2.0).half())
    assert ">= 0:" in kernel.get_ir("thread")


def _triangular(extent):
    """Out[b, :] = the sum of rows 0 .. extent(b) - 1 of X: a serial loop whose trip count depends on the block."""

    @T.prim_func
    def main(X: T.Tensor((8, 64), "float32"), Out: T.Tensor((8, 64), "float32")):
        with T.Kernel(8, threads=64) as bx:
            acc = T.alloc_fragment((64,), "float32")
            T.clear(acc)
            n = extent(bx)
            for r in T.serial(n):
                for j in T.Parallel(64):
                    acc[j] += X[r, j]
            T.copy(acc, Out[bx, 0])

    return main


@pytest.mark.parametrize("name,extent,reversed_", [
    ("grows", lambda bx: T.min(8, (bx + 1) * 2 // 2), True),  # through a Let, min and a floor division
    ("shrinks", lambda bx: 8 - bx, False),
    ("constant", lambda bx: 5, False),
    ("non-monotone", lambda bx: (bx * 3) % 8 + 1, False),
])
def test_blocks_whose_loop_grows_with_bx_are_issued_heaviest_first(name, extent, reversed_):
    """compiler.lower.heavy_first: causal attention's row blocks (more K/V tiles the larger bx) run the heaviest first,
    bx = 7 - blockIdx.x; results are the same (blocks are independent), other kernels keep bx = blockIdx.x."""
    func = _triangular(extent)
    kernel = tileagent.compile(func, target="sim")
    ir = kernel.get_ir("thread")
    assert ("bx = 7 - blockIdx.x" in ir and "blocks issued heaviest first" in ir) == reversed_, ir
    assert ("bx = blockIdx.x" in ir) == (not reversed_)
    x = torch.randn(8, 64)
    out, want = _nan(8, 64), _nan(8, 64)
    kernel(x, out)
    tileagent.compile(func, target="cpu")(x, want)
    torch.testing.assert_close(out, want)
    assert ("const int bx = 7 - ((int)blockIdx.x);" in kernel.get_kernel_source()) == reversed_


def test_fragment_read_transposed_gets_the_loops_layout_transposed():
    """TileLang's Mamba chunk state scales x transposed into a gemm's A operand (``xt[i, j] = x[j, i] * scale[j]``,
    x filled by a T.copy): x takes the loop's thread map with its dims swapped (was L001 against x's default
    layout)."""
    @T.prim_func
    def f(X: T.Tensor((32, 64), "float16"), S: T.Tensor((32,), "float32"), B: T.Tensor((32, 16), "float16"),
          Y: T.Tensor((64, 16), "float32")):
        with T.Kernel(1, threads=128):
            x_s = T.alloc_shared((32, 64), "float16")
            b_s = T.alloc_shared((32, 16), "float16")
            x = T.alloc_fragment((32, 64), "float16")
            scale = T.alloc_fragment((32,), "float32")
            xt = T.alloc_fragment((64, 32), "float16")
            acc = T.alloc_fragment((64, 16), "float32")
            T.copy(X, x_s)
            T.copy(B, b_s)
            T.copy(S, scale)
            T.copy(x_s, x)
            for i, j in T.Parallel(64, 32):
                xt[i, j] = x[j, i] * scale[j]
            T.clear(acc)
            T.gemm(xt, b_s, acc)
            T.copy(acc, Y)

    kernel = tileagent.compile(f, target="sim")
    layouts = {b.name: frag for b, frag in kernel.layouts().fragments.items()}
    assert layouts["x"].same_as(layouts["xt"].permute((1, 0)))
    x, s, b = torch.randn(32, 64, dtype=torch.float16), torch.rand(32), torch.randn(32, 16, dtype=torch.float16)
    y = _nan(64, 16)
    kernel(x, s, b, y)
    xt = (x.float().T * s).half()
    torch.testing.assert_close(y, xt.float() @ b.float(), rtol=1e-3, atol=1e-3)
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def _indexer_logits(N=64, Q=2, H=16, D=32, threads=128, extra=1):
    """TileLang's DSA lightning indexer (fp8_lighting_indexer.py, pool_mqa_fp8.py) at small sizes: a gemm accumulator
    reduced over heads through T.reshape, then stored transposed, ``Logits[q, n] = logits[n, q]`` in
    ``T.Parallel(Q, N)`` (``extra`` > 1: a third loop dim the read does not index)."""
    @T.prim_func
    def f(K_: T.Tensor((N, D), "float16"), Qm: T.Tensor((Q * H, D), "float16"), W: T.Tensor((Q, H), "float32"),
          Y: T.Tensor((Q, N, extra), "float32")):
        with T.Kernel(1, threads=threads):
            k_s = T.alloc_shared((N, D), "float16")
            q_s = T.alloc_shared((Q * H, D), "float16")
            s = T.alloc_fragment((N, Q * H), "float32")
            s3 = T.reshape(s, (N, Q, H))
            logits = T.alloc_fragment((N, Q), "float32")
            w = T.alloc_fragment((Q, H), "float32")
            T.copy(K_, k_s)
            T.copy(Qm, q_s)
            T.copy(W, w)
            T.gemm(k_s, q_s, s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
            for n, q, h in T.Parallel(N, Q, H):
                s3[n, q, h] = T.max(s3[n, q, h], 0) * w[q, h]
            T.reduce_sum(s3, logits, dim=-1, clear=True)
            for q, n, e in T.Parallel(Q, N, extra):
                Y[q, n, e] = logits[n, q] + e
    return f


@pytest.mark.parametrize("extra", [1, 4])
def test_reduction_output_read_transposed_runs_the_loop_on_its_layout_transposed(extra):
    """A T.Parallel loop whose only fragment read is a reduction's output indexed in the other dim order (TileLang's
    DSA indexers: was L001 against the loop's blocked default) runs on that fragment's thread map with its dims
    permuted, as TileLang composes a fragment's thread map with the index map: nothing moves at run time."""
    N, Q, H = 64, 2, 16
    kernel = tileagent.compile(_indexer_logits(extra=extra), target="sim")
    logits = next(f for b, f in kernel.layouts().fragments.items() if b.name == "logits")
    (loop,) = [f for p, f in kernel.layouts().loops.items() if len(p.vars) == 3 and p.vars[0].name == "q"]
    assert all(loop.thread((q, n, 0)) == logits.thread((n, q)) for q in range(Q) for n in range(N))
    k, qm, w = torch.randn(N, 32).half(), torch.randn(Q * H, 32).half(), torch.rand(Q, H)
    ref = ((k.float() @ qm.float().T).clamp(min=0).view(N, Q, H) * w).sum(-1).T[:, :, None] + torch.arange(extra)
    for target in ("sim", "cpu"):
        y = _nan(Q, N, extra)
        tileagent.compile(_indexer_logits(extra=extra), target=target)(k, qm, w, y)
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_a_reduction_output_of_one_column_is_written_at_a_constant_index_on_its_own_layout():
    """TileLang's HISA indexer (dsa_hisa/block_sparse_mqa_fp8.py): heads reduced into (N, 1) logits, then
    ``logits[n, 0] = -inf`` for masked rows in ``T.Parallel(N)`` (was L001 against the loop's blocked default: the
    constant index of a dim of size 1 now reads as the fragment's row layout)."""
    N, H = 64, 16

    @T.prim_func
    def f(K_: T.Tensor((N, 32), "float16"), Qm: T.Tensor((H, 32), "float16"), Y: T.Tensor((N,), "float32"),
          lo: T.int32):
        with T.Kernel(1, threads=128):
            k_s = T.alloc_shared((N, 32), "float16")
            q_s = T.alloc_shared((H, 32), "float16")
            s = T.alloc_fragment((N, H), "float32")
            s3 = T.reshape(s, (N, 1, H))
            logits = T.alloc_fragment((N, 1), "float32")
            T.copy(K_, k_s)
            T.copy(Qm, q_s)
            T.gemm(k_s, q_s, s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.reduce_sum(s3, logits, dim=-1, clear=True)
            for n in T.Parallel(N):
                if n < lo:
                    logits[n, 0] = -T.infinity("float32")
            for n in T.Parallel(N):
                Y[n] = logits[n, 0]

    k, qm = torch.randn(N, 32).half(), torch.randn(H, 32).half()
    ref = (k.float() @ qm.float().T).sum(-1)
    ref[:5] = -float("inf")
    kernel = tileagent.compile(f, target="sim")
    for target in ("sim", "cpu"):
        y = _nan(N)
        tileagent.compile(f, target=target)(k, qm, y, 5)
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_fragment_read_at_constant_rows_holds_those_rows_in_registers():
    """TileLang's DeepSeek mHC post mixes rows with a small matrix, ``x[o, h] += a[k, o] * b[k, h]`` for k in an
    unrolled T.serial inside the T.Parallel: a (filled by a T.copy) takes the loop's map of o with every k in the
    owners' registers (was L001 against a's default layout)."""
    @T.prim_func
    def f(A: T.Tensor((4, 4), "float32"), B: T.Tensor((4, 256), "float32"), Y: T.Tensor((4, 256), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((4, 4), "float32")
            b = T.alloc_fragment((4, 256), "float32")
            x = T.alloc_fragment((4, 256), "float32")
            T.copy(A, a)
            T.copy(B, b)
            for o, h in T.Parallel(4, 256):
                x[o, h] = 0.0
                for k in T.serial(4):
                    x[o, h] += a[k, o] * b[k, h]
            T.copy(x, Y)

    kernel = tileagent.compile(f, target="sim")
    layouts = {b.name: frag for b, frag in kernel.layouts().fragments.items()}
    assert [lv.is_thread for lv in layouts["a"].dims[0]] == [False]  # every k in the owners' registers
    a, b, y = torch.randn(4, 4), torch.randn(4, 256), _nan(4, 256)
    kernel(a, b, y)
    torch.testing.assert_close(y, a.T @ b)
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_a_sum_over_an_unrolled_range_inside_t_parallel_rebinds_like_python():
    """Played LLM session 43b: a causal conv's taps, ``v = v + w[i, k] * x[...]`` for k in range(W) inside the
    T.Parallel, was E102 ("cannot reassign 'v' inside a nested block") with a T.alloc_var hint; the loop is unrolled
    at compile time, so the name is rebound as Python would, and v after the loop is the sum."""
    W = 4

    @T.prim_func
    def taps(X: T.Tensor((2, 128 + W), "float32"), Y: T.Tensor((2, 128), "float32")):
        with T.Kernel(2, threads=64) as b:
            for i in T.Parallel(128):
                v = X[b, i] * 0.0
                for k in range(W):
                    v = v + X[b, i + k] * (k + 1.0)
                Y[b, i] = v

    x = torch.randn(2, 128 + W)
    want = sum(x[:, k:k + 128] * (k + 1) for k in range(W))
    for target in ("cpu", "sim"):
        y = _nan(2, 128)
        kernel = tileagent.compile(taps, target=target)
        kernel(x, y)
        torch.testing.assert_close(y, want)
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_python_int_on_the_left_of_shift_and_xor(target):
    """``1 << i`` with i a loop variable (TileLang's top-k selector: ``offset = 1 << i``), ``x >> n`` and ``c ^ x``
    with a Python int on the left (were E309: no reflected operators)."""
    @T.prim_func
    def f(X: T.Tensor((64,), "int32"), Y: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                Y[i] = (1 << (i % 8)) + (1024 >> (X[i] & 7)) + (5 ^ X[i])

    kernel = tileagent.compile(f, target=target)
    x = torch.randint(0, 100, (64,), dtype=torch.int32)
    y = torch.zeros(64, dtype=torch.int32)
    kernel(x, y)
    i = torch.arange(64, dtype=torch.int32)
    torch.testing.assert_close(y, (1 << (i % 8)) + (1024 >> (x & 7)) + (5 ^ x))


def _masked_row_sum():
    """Rows of X summed where a mask read in plain code (not T.Parallel) says so: every thread tests its own copy of
    the mask, so the copy into it must fill every thread's copy (block-sparse attention's ``if block_mask[k] != 0``),
    and the barrier of the shared-memory copy under the ``if`` is reached by every thread."""
    @T.prim_func
    def main(X: T.Tensor((4, 64), "float32"), M: T.Tensor((4,), "int32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as b:
            m = T.alloc_fragment((4,), "int32")
            acc = T.alloc_fragment((64,), "float32")
            xs = T.alloc_shared((64,), "float32")
            T.copy(M, m)
            T.clear(acc)
            for k in T.serial(4):
                if m[k] != 0:
                    T.copy(X[k, :], xs)
                    for i in T.Parallel(64):
                        acc[i] += xs[i]
            T.copy(acc, Y)
    return main


def test_a_mask_copied_into_per_thread_registers_is_every_threads():
    kernel = tileagent.compile(_masked_row_sum(), out_idx=[2], target="sim")
    x, m = torch.randn(4, 64), torch.tensor([1, 0, 1, 1], dtype=torch.int32)
    torch.testing.assert_close(kernel(x, m), x[m != 0].sum(0))


def _fragment_into_local():
    """A fragment copied into per-thread storage: each thread then holds every element (the interpreter's meaning);
    the lowering gathers through shared memory (each thread held only its part of the fragment)."""
    @T.prim_func
    def main(X: T.Tensor((4, 8), "float32"), Y: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=128) as b:
            f = T.alloc_fragment((4, 8), "float32")
            m = T.alloc_local((4, 8), "float32")
            for i, j in T.Parallel(4, 8):
                f[i, j] = X[i, j] * 2.0
            T.copy(f, m)
            Y[0] = m[0, 0] + m[1, 3] + m[3, 7]
            Y[1] = m[2, 5]
    return main


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_a_fragment_copied_into_per_thread_storage_is_whole_in_every_thread(target):
    x, y = torch.randn(4, 8), torch.full((2,), float("nan"))
    tileagent.compile(_fragment_into_local(), target=target)(x, y)
    torch.testing.assert_close(y, torch.stack([2 * (x[0, 0] + x[1, 3] + x[3, 7]), 2 * x[2, 5]]))


@tileagent.jit(out_idx=[1])
def _flat_scale(TILE, threads, dtype):
    L = T.dynamic("L")

    @T.prim_func
    def main(X: T.Tensor((L,), dtype), Y: T.Tensor((L,), dtype)):
        with T.Kernel(T.ceildiv(L, TILE), threads=threads) as b:
            S = T.alloc_shared((TILE,), dtype)
            f = T.alloc_fragment((TILE,), dtype)
            T.copy(X[b * TILE], S)
            for i in T.Parallel(TILE):
                f[i] = S[i] * 2.0
            T.copy(f, Y[b * TILE])
    return main


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_flat_copies_of_a_run_time_length_are_vectorized_with_an_elementwise_tail(dtype):
    """A 1-d tensor of run-time length (a flat view: T.Tensor((L,))) was copied one element an access (2 bytes for
    fp16; played LLM session 24's pooling). Runs wholly inside move as one 16-byte access; the run across the end
    moves element by element, reading zeros past it and writing nothing there (the emulator, at lengths that end
    inside a run, on a run's edge and inside a tile's last thread)."""
    fn = _flat_scale.fn(1024, 128, "float16" if dtype == torch.float16 else "float32")
    source = tileagent.compile(fn, target="cuda:sm_90a").get_kernel_source()
    assert "*reinterpret_cast<uint4*>(&S[" in source and ("+ 7 < L" if dtype == torch.float16 else "+ 3 < L") in source
    kernel = tileagent.compile(fn, target="sim")
    for n in (2048 + 5, 1024 + 8, 3 * 1024 - 1, 7):
        x, y = torch.randn(n, dtype=dtype), _nan(n + 3, dtype=dtype)
        kernel(x, y[:n])
        torch.testing.assert_close(y[:n], x * 2, rtol=0, atol=0)
        assert torch.isnan(y[n:]).all()  # nothing written past the end


@tileagent.jit(out_idx=[1])
def _row_prod(M, N, threads):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads) as b:
            x = T.alloc_fragment((M, N), "float32")
            p = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            T.fill(p, 2.0)
            T.reduce_prod(x, p, dim=1, clear=False)
            T.copy(p, Y)
    return main


@pytest.mark.parametrize("M,N,threads", [(4, 64, 128), (2, 512, 256), (8, 8, 32)])
def test_reduce_prod_across_threads_warps_and_registers(M, N, threads):
    """T.reduce_prod (TileAgent's; the drafter lowers torch.prod to it): in-thread products, shuffles and one round
    through shared memory, times the old value with clear=False, in the interpreter, the emulator and NVRTC."""
    x = 1.0 + 0.01 * torch.randn(M, N)
    want = 2.0 * x.double().prod(1)
    for target in ("cpu", "sim"):
        y = torch.full((M,), float("nan"))
        tileagent.compile(_row_prod.fn(M, N, threads), target=target)(x, y)
        torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=0)
    tileagent.compile(_row_prod.fn(M, N, threads), target="cuda:sm_90a")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_element_atomic_adds_as_vectors_on_the_gpu():
    """The float2 atomics of the element-wise split-K writeback (ragged rows) sum to A @ B on the GPU."""
    kernel = tileagent.compile(K.splitk_gemm(200, 128, 256, 4, elementwise=True), target="cuda")
    a, b = torch.randn(200, 256, dtype=torch.float16, device="cuda"), torch.randn(256, 128, dtype=torch.float16,
                                                                                  device="cuda")
    c = torch.zeros(200, 128, device="cuda")
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def _split_sum(n_split=4, n=128):
    @T.prim_func
    def split_sum(X: T.Tensor((n_split, n), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((n_split, n), "float32")
            acc = T.alloc_fragment((n,), "float32")
            T.copy(X, x)
            T.clear(acc)
            for k in T.serial(n_split):
                for i in T.Parallel(n):
                    acc[i] += x[k, i]
            T.copy(acc, Y)

    return split_sum


def test_a_serial_loop_indexing_registers_by_its_variable_is_unrolled():
    """x[k, i] in a serial loop over k (TileLang's split-KV combine reads its lse fragment so): the loop is unrolled,
    so the fragment stays in registers (an index known at run time put it in local memory: 128 bytes of stack in
    the MHA inference example's combine kernel)."""
    from tileagent.compiler.resources import cubin_functions

    kernel = tileagent.compile(_split_sum(), target="cuda:sm_90a")
    src = kernel.get_kernel_source()
    assert re.search(r"#pragma unroll.*\n\s*for \(int k = 0; k < 4; \+\+k\)", src)
    assert all(f.frame_bytes == 0 for f in cubin_functions(kernel.cubin()).values())
    x = torch.randn(4, 128)
    y = _nan(128)
    tileagent.compile(_split_sum(), target="sim")(x, y)
    torch.testing.assert_close(y, x.sum(0), rtol=1e-5, atol=1e-5)
