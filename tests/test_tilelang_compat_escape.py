"""TileLang's low-level statements under ``tileagent.compat``: hints without effect (``T.set_max_nreg``), block
barriers TileAgent places itself (``T.sync_threads``), and injected CUDA (``T.import_source`` / ``T.call_extern``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tileagent.compat.run import load_script
from tests.conftest import write_source
from tileagent.compiler.diagnostics import CompileError


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_sync_threads_and_set_max_nreg_are_statements_the_compiler_needs_no_help_with(tilelang, tmp_path, target):
    """TileLang's DSA top-k reduce-sum puts T.sync_threads() between T.Parallel phases over shared memory; TileAgent
    places those barriers itself (the SIMT emulator raises on a shared-memory race without one)."""
    ns = load_script(write_source(tmp_path, "sync.py", """\
        import tilelang
        import tilelang.language as T


        def reverse_scale(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=64) as bx:
                    T.set_max_nreg(240, 1)
                    s = T.alloc_shared((N,), "float32")
                    for i in T.Parallel(N):
                        s[i] = A[i] * 2.0
                    T.sync_threads()
                    for k in T.serial(2):
                        for i in T.Parallel(N):
                            if i < N - 1 - i:
                                t = s[i]
                                s[i] = s[N - 1 - i] + k
                                s[N - 1 - i] = t + k
                        T.sync_threads()
                    T.copy(s, B)
            return main
        """))
    kernel = tilelang.compile(ns["reverse_scale"](256), out_idx=[1], target=target)
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a * 2 + 1)


EXTERN_PROGRAM = """\
    import tilelang
    import tilelang.language as T

    SRC = '''
    template <typename T1, typename T2>
    __device__ void scale2(T1 *src, T2 *dst, int n) {
      for (int i = 0; i < n; ++i) dst[i] = (T2)((float)src[i] * 2.0f);
    }
    '''


    def scale(N, threads=64):
        @T.macro
        def twice(a, b):
            T.import_source(SRC)
            T.call_extern("scale2", T.access_ptr(a, "r"), T.access_ptr(b, "w"), 4, dtype="float16")

        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float16")):
            with T.Kernel(N // (threads * 4), threads=threads) as bx:
                tx = T.get_thread_binding()
                a = T.alloc_local((4,), "float32")
                b = T.alloc_local((4,), "float16")
                for v in T.vectorized(4):
                    a[v] = A[(bx * threads + tx) * 4 + v]
                twice(a, b)
                T.import_source(SRC)
                T.import_source(None)  # nothing (TileLang's GEMV passes None without its fast decoding)
                for v in T.vectorized(4):
                    B[(bx * threads + tx) * 4 + v] = b[v] + T.call_extern("float16", "__float2half_rn", 0.5)
        return main
    """


def test_import_source_once_and_call_extern_on_local_arrays_compile_for_sm90a(tilelang, tmp_path):
    """TileLang's fp4 dequantization GEMMs call a CUDA template from T.import_source on per-thread arrays."""
    ns = load_script(write_source(tmp_path, "extern.py", EXTERN_PROGRAM))
    kernel = tilelang.compile(ns["scale"](1024), out_idx=[1], target="cuda:sm_90a")
    source = kernel.get_kernel_source()
    assert source.count("void scale2(T1 *src, T2 *dst, int n)") == 1  # imported twice, emitted once
    assert source.index("typedef unsigned int uint;") < source.index("void scale2") < source.index("__global__")
    assert "scale2((&a[0]), (&b[0]), 4);" in source and "__float2half_rn(0.5f)" in source
    assert len(kernel.cubin("sm_90a")) > 0  # NVRTC compiles it


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_call_extern_builds_on_the_cpu_and_is_E602_at_its_line_when_run_there(tilelang, tmp_path, target):
    ns = load_script(write_source(tmp_path, "extern.py", EXTERN_PROGRAM))
    kernel = tilelang.compile(ns["scale"](1024), out_idx=[1], target=target)
    with pytest.raises(CompileError) as info:
        kernel(torch.randn(1024))
    err = info.value
    assert err.code == "E602" and err.message == ("T.call_extern('scale2', ...) calls CUDA code (T.import_source), "
                                                  "which the CPU targets cannot run")
    assert err.span.line == 16  # the T.call_extern line, in the macro


def test_access_ptr_of_a_fragment_is_E701(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "frag.py", """\
        import tilelang
        import tilelang.language as T


        def f(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    acc = T.alloc_fragment((N,), "float32")
                    T.call_extern("g", T.access_ptr(acc, "rw"), dtype="int32")
            return main
        """))
    with pytest.raises(CompileError) as info:
        tilelang.compile(ns["f"](32), target="cpu")
    assert info.value.code == "E701" and info.value.span.line == 10
    assert info.value.message.startswith("T.access_ptr of fragment 'acc' is not supported")


def test_macro_assignment_to_a_name_the_kernel_binds_is_the_macros_own(tilelang, tmp_path):
    """TileLang's MXFP4 dequantization macro writes ``bx = T.get_block_binding(0)`` in a kernel that binds bx."""
    ns = load_script(write_source(tmp_path, "shadow.py", """\
        import tilelang
        import tilelang.language as T


        def f(N):
            @T.macro
            def row_of_block(B):
                bx = T.get_block_binding(0)
                for i in T.Parallel(32):
                    B[bx * 32 + i] = bx * 1.0

            @T.prim_func
            def main(B: T.Tensor((N,), "float32")):
                with T.Kernel(N // 32, threads=32) as bx:
                    row_of_block(B)
            return main
        """))
    kernel = tilelang.compile(ns["f"](128), out_idx=[0], target="cpu")
    torch.testing.assert_close(kernel(), torch.arange(4.0).repeat_interleave(32))


@pytest.mark.parametrize("name", ["alloc_tmem", "tcgen05_gemm", "tcgen05_anything_newer"])
def test_blackwell_only_names_say_the_program_is_for_sm100(tilelang, tmp_path, name):
    """TileLang's sm100 examples (flash_attention_sm100, gemm_tcgen05, blockscaled_gemm_sm100): an E701 at the line
    that says why an H100/H200 cannot run them."""
    ns = load_script(write_source(tmp_path, "sm100.py", f"""\
        import tilelang
        import tilelang.language as T


        def f(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    t = T.{name}([128, 128], "float32")
            return main
        """))
    with pytest.raises(CompileError) as info:
        tilelang.compile(ns["f"](32), target="cpu")
    assert info.value.code == "E701" and info.value.span.line == 9
    assert info.value.message == (
        f"T.{name} is not supported by TileAgent: Blackwell's (sm_100) tensor memory and tcgen05 MMAs do not exist "
        f"on Hopper (sm_90, the H100/H200) or earlier GPUs, and TileAgent targets sm_80 to sm_90a: this program is for "
        f"sm_100 (TileLang's sm_90 examples of the same kernels, in flash_attention/ and gemm/, run)")


ALLREDUCE_GEMV = """\
    import tilelang
    import tilelang.language as T


    def gemv(N, K, BLOCK_N=4, reduce_threads=8, TILE_K=4, dtype="float16", accum_dtype="float32"):
        BLOCK_K = reduce_threads * TILE_K

        @T.prim_func
        def main(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, reduce_threads)) as bn:
                tn = T.get_thread_binding(0)
                tk = T.get_thread_binding(1)
                A_local = T.alloc_local((TILE_K,), dtype)
                B_local = T.alloc_local((TILE_K,), dtype)
                C_accum = T.alloc_local((1,), accum_dtype)
                T.clear(C_accum)
                for bk in T.serial(T.ceildiv(K, BLOCK_K)):
                    for k in T.vectorized(TILE_K):
                        A_local[k] = A[bk * BLOCK_K + tk * TILE_K + k]
                        B_local[k] = B[bn * BLOCK_N + tn, bk * BLOCK_K + tk * TILE_K + k]
                    for k in T.serial(TILE_K):
                        C_accum[0] += A_local[k].astype(accum_dtype) * B_local[k].astype(accum_dtype)
                C_reduced = T.alloc_local((1,), accum_dtype)
                with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, accum_dtype)]), "reduce_scope",
                            T.reinterpret(T.uint64(0), dtype="handle")):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), C_accum[0], True, C_reduced[0], tk,
                                                      dtype="handle"))
                C[bn * BLOCK_N + tn] = C_reduced[0]
        return main


    def dot4(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "int8"), B: T.Tensor((N,), "int8"), C: T.Tensor((N // 4,), "int32")):
            with T.Kernel(1, threads=N // 4) as bx:
                tx = T.get_thread_binding()
                a = T.alloc_local((4,), "int8")
                b = T.alloc_local((4,), "int8")
                acc = T.alloc_local((1,), "int32")
                for v in T.vectorized(4):
                    a[v] = A[tx * 4 + v]
                    b[v] = B[tx * 4 + v]
                acc[0] = 7
                T.dp4a(a[0], b[0], acc[0])
                C[tx] = acc[0]
        return main
    """


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_tvm_thread_allreduce_in_a_reduce_scope_sums_over_the_named_thread_axis(tilelang, tmp_path, target):
    """TileLang's GEMV and fp16 x int4 GEMV examples reduce per-thread partial sums with TVM's thread all-reduce."""
    ns = load_script(write_source(tmp_path, "gemv.py", ALLREDUCE_GEMV))
    kernel = tilelang.compile(ns["gemv"](16, 64), out_idx=[2], target=target)
    a, b = torch.randn(64).half(), torch.randn(16, 64).half()
    torch.testing.assert_close(kernel(a, b).float(), b.float() @ a.float(), rtol=1e-2, atol=1e-2)
    if target == "sim":
        assert len(tilelang.compile(ns["gemv"](16, 64), out_idx=[2], target="cuda:sm_90a").cubin("sm_90a")) > 0


def test_dp4a_adds_the_dot_product_of_four_int8_elements(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "dot4.py", ALLREDUCE_GEMV))
    a, b = (torch.randint(-128, 128, (64,), dtype=torch.int8) for _ in range(2))
    expected = ((a.int() * b.int()).reshape(16, 4).sum(1) + 7).int()
    for target in ("cpu", "sim"):
        torch.testing.assert_close(tilelang.compile(ns["dot4"](64), out_idx=[2], target=target)(a, b), expected)


def test_thread_allreduce_outside_a_reduce_scope_is_an_error_at_its_line(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "bare.py", """\
        import tilelang
        import tilelang.language as T


        def f(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    tx = T.get_thread_binding()
                    acc = T.alloc_local((1,), "float32")
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), A[tx], True, acc[0], tx, dtype="handle"))
            return main
        """))
    with pytest.raises(CompileError) as info:
        tilelang.compile(ns["f"](32), target="cpu")
    assert info.value.code == "E701" and info.value.span.line == 11
    assert info.value.message == ("T.tvm_thread_allreduce outside `with T.attr(T.comm_reducer(...), \"reduce_scope\", "
                                  "...)`: no reducer says how to combine the values")


def test_tools_analyzer_counts_gemm_flops_and_global_bytes_as_tilelang(tilelang, tmp_path, monkeypatch):
    """TileLang's analyze/example_gemm_analyze.py: FLOPs and bytes of a tiled GEMM, with the CUDA device model."""
    import types

    from tilelang.carver.arch import CUDA, driver
    from tilelang.tools import Analyzer

    ns = load_script(write_source(tmp_path, "gemm_analyze.py", """\
        import tilelang
        import tilelang.language as T

        M = N = K = 1024


        @tilelang.jit
        def kernel(A, B, block_M=None, block_N=None, block_K=None, num_stages=None, thread_num=None):
            A: T.Tensor((M, K), T.float16)
            B: T.Tensor((N, K), T.float16)
            C = T.empty((M, N), T.float16)
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=thread_num) as (bx, by):
                A_shared = T.alloc_shared((block_M, block_K), T.float16)
                B_shared = T.alloc_shared((block_N, block_K), T.float16)
                C_local = T.alloc_fragment((block_M, block_N), T.float32)
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[by * block_M, k * block_K], A_shared)
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                    T.gemm(A_shared, B_shared, C_local, transpose_B=True)
                T.copy(C_local, C[by * block_M, bx * block_N])
            return C
        """))
    func = ns["kernel"].get_tir(block_M=128, block_N=128, block_K=32, num_stages=3, thread_num=128)
    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: types.SimpleNamespace(
        name="H200", major=9, minor=0, multi_processor_count=132, shared_memory_per_block=48 * 1024,
        L2_cache_size=60 * 2**20))
    device = CUDA("cuda")
    assert (device.sm_version, device.compute_capability, device.compute_max_core) == (90, "90", 132)
    result = Analyzer.analysis(func, device)
    assert result.total_flops == 2 * 1024**3
    # A and B: a 128 x 32 fp16 tile each per k step (32 steps) and block (64); C: one 128 x 128 fp16 tile per block
    assert result.total_global_bytes == 2 * (128 * 32 * 2 * 32 * 64) + 128 * 128 * 2 * 64
    assert result.expected_tflops is None and result.expected_bandwidth_GBps == 12.08  # TileLang's table: sm_80..89
    assert result.estimated_time == result.total_global_bytes / 12.08e9
    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: None)
    with pytest.raises(RuntimeError, match="Cannot find cuda device 0."):
        CUDA("cuda")


def test_layout_objects_of_tilelangs_plot_layout_examples_are_E701(tilelang):
    from tilelang.layout import make_quarter_bank_swizzled_layout

    with pytest.raises(CompileError) as info:
        make_quarter_bank_swizzled_layout(8, 16, 16)
    assert info.value.code == "E701" and info.value.message == (
        "make_quarter_bank_swizzled_layout(rows, cols, element_size): standalone layout objects are not supported; "
        "make_quarter_bank_swizzled_layout(shared_buffer) in T.annotate_layout is")
    with pytest.raises(ImportError) as info:
        from tvm.tirx import IndexMap  # noqa: F401
    assert info.value.code == "E701" and info.value.message.startswith("tvm.tirx.IndexMap is not provided by TileAgent")


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_alloc_reducer_sums_what_parallel_iterations_add_into_one_element(tilelang, tmp_path, target):
    """TileLang's GEMV with T.alloc_reducer (gemv/example_gemv.py): o[i] += a[i, j] * x[j] over T.Parallel(i, j)."""
    ns = load_script(write_source(tmp_path, "reducer.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def gemv(a, x, block_M=32, block_N=32, num_stages=2, threads=128, dtype=T.float16, accum_dtype=T.float):
            M, N = T.const("M, N")
            a: T.Tensor((M, N), dtype)
            x: T.Tensor((N,), dtype)
            o = T.empty((M,), dtype)
            with T.Kernel(T.ceildiv(M, block_M), threads=threads) as i0_m:
                o_reducer = T.alloc_reducer(block_M, accum_dtype, replication="all")
                T.clear(o_reducer)
                for i0_n in T.Pipelined(T.ceildiv(N, block_N), num_stages=num_stages):
                    a_smem = T.alloc_shared((block_M, block_N), dtype)
                    T.copy(a[i0_m * block_M, i0_n * block_N], a_smem)
                    a_frag = T.alloc_fragment((block_M, block_N), dtype)
                    T.copy(a_smem, a_frag)
                    x_frag = T.alloc_fragment(block_N, dtype)
                    T.copy(x[i0_n * block_N], x_frag)
                    for i1_m, i1_n in T.Parallel(block_M, block_N):
                        o_reducer[i1_m] += a_frag[i1_m, i1_n] * x_frag[i1_n]
                T.finalize_reducer(o_reducer)
                T.copy(o_reducer, o[i0_m * block_M])
            return o
        """))
    kernel = tilelang.compile(ns["gemv"].get_tir(M=64, N=96), out_idx=[2], target=target)
    a, x = torch.randn(64, 96).half(), torch.randn(96).half()
    torch.testing.assert_close(kernel(a, x).float(), a.float() @ x.float(), rtol=1e-2, atol=2e-2)
    if target == "sim":
        assert len(tilelang.compile(ns["gemv"].get_tir(M=64, N=96), out_idx=[2], target="cuda:sm_90a")
                   .cubin("sm_90a")) > 0


def test_alloc_reducer_other_than_sum_is_E701(tilelang):
    import tilelang.language as T

    with pytest.raises(CompileError) as info:
        T.alloc_reducer(32, "float32", op="max")
    assert info.value.code == "E701"
    assert info.value.message == "T.alloc_reducer(op='max') is not supported (op='sum' is)"


def test_gpu_bench_programs_have_their_helper_modules_next_to_them():
    """Every module a PROGRAMS file imports (at any depth) is installed here, is one the program lists as needed, or is
    a helper copied next to it (dequant_gemm_bf16_fp4 once failed on the H200 for its dequantize_utils)."""
    import ast
    import importlib.util
    import sys

    from tileagent.compiler.python_ast import parse

    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "bench"))
    try:
        import tilelang_examples as bench
    finally:
        sys.path.remove(str(repo / "bench"))
    for name, (rel, _, _, needs) in bench.PROGRAMS.items():
        path = bench.EXAMPLES / rel
        tree = parse(path.read_text())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for mod in (m.split(".")[0] for m in mods):
                if mod in ("tilelang", "tvm") or mod in needs or importlib.util.find_spec(mod) is not None:
                    continue
                assert (path.parent / f"{mod}.py").is_file() or (path.parent / mod / "__init__.py").is_file(), \
                    (name, mod)


def test_cp_async_by_hand_with_a_noinc_barrier_runs_as_producer_and_consumer(tilelang, tmp_path):
    """TileLang's DSA sparse-MLA and MLA-decode programs: a producer warp group copies tiles with T.ptx_cp_async and
    arrives on a barrier per stage (T.cp_async_barrier_noinc); a consumer warp group waits, computes with tile ops
    and frees the stage. The CPU interpreter runs the two branches concurrently, handing over at the waits."""
    ns = load_script(write_source(tmp_path, "ws_cp_async.py", """\
        import tilelang
        import tilelang.language as T


        def f(N, stages=2):
            @T.prim_func
            def main(A: T.Tensor((N, 64), "float16"), B: T.Tensor((N, 64), "float32")):
                with T.Kernel(1, threads=256) as bx:
                    s = T.alloc_shared((stages, 16, 64), "float16")
                    acc = T.alloc_fragment((16, 64), "float32")
                    full = T.alloc_barrier(arrive_count=[128] * stages)
                    empty = T.alloc_barrier(arrive_count=[128] * stages)
                    tx = T.get_thread_binding()
                    if tx < 128:
                        for k in T.serial(N // 16):
                            T.barrier_wait(full[k % stages], (k // stages) & 1)
                            T.copy(s[k % stages, :, :], acc)
                            for i, j in T.Parallel(16, 64):
                                acc[i, j] = acc[i, j] * 2.0
                            T.copy(acc, B[k * 16, 0])
                            T.barrier_arrive(empty[k % stages])
                    else:
                        for k in T.serial(N // 16):
                            T.barrier_wait(empty[k % stages], ((k // stages) & 1) ^ 1)
                            row = (tx - 128) // 8
                            col = (tx - 128) % 8 * 8
                            T.ptx_cp_async(T.access_ptr(s[k % stages, row, col], "w", 8),
                                           T.access_ptr(A[k * 16 + row, col], "r", 8), 8)
                            T.cp_async_barrier_noinc(full[k % stages])
            return main
        """))
    a = torch.randn(96, 64, dtype=torch.float16)
    for target in ("cpu", "sim:sm_90a"):  # the interpreter, and the GPU lowering in the SIMT emulator
        b = torch.full((96, 64), float("nan"))
        tilelang.compile(ns["f"](96), target=target)(a, b)
        assert torch.equal(b, a.float() * 2), target


def test_cp_async_by_hand_counts_whole_copies_and_a_deadlock_names_each_wait(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "ws_bad.py", """\
        import tilelang
        import tilelang.language as T


        def f(which):
            @T.prim_func
            def main(A: T.Tensor((64,), "float16")):
                with T.Kernel(1, threads=256) as bx:
                    s = T.alloc_shared((64,), "float16")
                    bar = T.alloc_barrier(arrive_count=[128, 128])
                    tx = T.get_thread_binding()
                    if which == 0:
                        T.ptx_cp_async(T.access_ptr(s[0], "w", 3), T.access_ptr(A[0], "r", 3), 3)
                    elif tx < 128:
                        T.barrier_wait(bar[0], 0)
                        T.barrier_arrive(bar[1])
                    else:
                        T.barrier_wait(bar[1], 0)
                        T.barrier_arrive(bar[0])
            return main
        """))
    with pytest.raises(CompileError) as info:
        ns["f"](0)
    assert info.value.code == "E301" and info.value.span.line == 13
    assert info.value.message == ("T.ptx_cp_async copies 4, 8 or 16 bytes: 3 elements of float16 ('s') and float16 "
                                  "('A') is not")
    from tileagent.compiler.errors import KernelFault

    with pytest.raises(KernelFault) as hang:  # the GPU lowering in the SIMT emulator (EmulationError)
        tilelang.compile(ns["f"](1), target="sim:sm_90a")(torch.zeros(64, dtype=torch.float16))
    assert "the block's warp-specialized branches wait for each other forever (a deadlock on the GPU): threads " \
           "0-127 waits for bar[0] phase parity 0 (line 15); threads 128-255 waits for bar[1] phase parity 0 " \
           "(line 18)" in str(hang.value), str(hang.value)
    with pytest.raises(KernelFault) as fault:
        tilelang.compile(ns["f"](1), target="cpu")(torch.zeros(64, dtype=torch.float16))
    assert str(fault.value).endswith(":18:17: the block's warp-specialized branches wait for each other forever (a "
                                     "deadlock on the GPU): threads 0-127 waits for bar[0] phase parity 0 (line 15); "
                                     "threads 128-255 waits for bar[1] phase parity 0 (line 18)"), str(fault.value)


def test_a_fragment_of_per_thread_element_stores_is_each_threads_own(tilelang, tmp_path):
    """TileLang's DSA sparse-MLA (seesaw) producer keeps its prefetched indices in a fragment written and read by
    per-thread code with serial indices: every thread's own copy (an E504 before)."""
    ns = load_script(write_source(tmp_path, "per_thread_fragment.py", """\
        import tilelang
        import tilelang.language as T


        def f():
            @T.prim_func
            def main(I: T.Tensor((256,), "int32"), O: T.Tensor((256,), "int32")):
                with T.Kernel(1, threads=256) as bx:
                    tx = T.get_thread_binding()
                    if tx >= 128:
                        p = T.alloc_fragment([2, 4], "int32")
                        for r in T.serial(4):
                            for st in T.unroll(2):
                                p[st, r] = I[(tx + st * 4 + r) % 256]
                        O[tx] = 0
                        for r in T.serial(4):
                            O[tx] = O[tx] + p[1, r] * 10 + p[0, r]
            return main
        """))
    i = torch.randint(0, 100, (256,), dtype=torch.int32)
    o = torch.full((256,), -1, dtype=torch.int32)
    tilelang.compile(ns["f"](), target="cpu")(i, o)
    t = torch.arange(128, 256)
    want = sum(i[(t + 4 + r) % 256] * 10 + i[(t + r) % 256] for r in range(4))
    assert torch.equal(o[128:], want.to(torch.int32)) and bool((o[:128] == -1).all())
