"""Thread-block clusters (compiler.lower.cluster): `T.Kernel(..., cluster_dims=)` / `T.ClusterKernel` checked at the
line, written as `__cluster_dims__` for sm_90a and dropped for targets without clusters; warp-specialized kernels with
an even static grid run in pairs by default; NVRTC/ptxas compile them; on an H200 they compute what torch does and a
grid that is not a multiple of the cluster is refused at launch."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import DSLTypeError


def _scale(grid, **kernel_kw):
    @T.prim_func
    def scale(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(grid, threads=128, **kernel_kw) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0
    return scale


def _dynamic_scale():
    """B = 2 A over n values, blocks of 128 in pairs: n = 384 makes 3 blocks, not a multiple of the cluster."""
    n = T.dynamic("n")

    @T.prim_func
    def scale(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128, cluster_dims=2) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    B[bx * 128 + i] = A[bx * 128 + i] * 2.0
    return scale


def _signature(kernel) -> str:
    return next(line for line in kernel.get_kernel_source().splitlines() if "__global__" in line)


@pytest.mark.parametrize("grid, dims, message", [
    (7, 2, "T.Kernel grid dim 0 has 7 blocks, not a multiple of cluster_dims (2,)"),
    (8, (1, 2), "T.Kernel cluster_dims=(1, 2) clusters a grid dim the kernel does not have (1 grid dims)"),
    (8, 16, "T.Kernel cluster_dims=16 asks for 16 blocks per cluster; the limit is 8"),
    (8, 0, "T.Kernel cluster_dims must be a positive int or a tuple of 1 to 3 positive ints, got 0"),
])
def test_bad_cluster_dims_are_named_at_the_line(grid, dims, message):
    with pytest.raises(DSLTypeError) as e:
        _scale(grid, cluster_dims=dims)
    assert e.value.code == "E311" and e.value.message == message
    assert e.value.span is not None and e.value.span.line > 0


def test_cluster_dims_on_sm_90a_and_without_clusters():
    func = _scale(8, cluster_dims=2)
    assert "__cluster_dims__(2, 1, 1) __launch_bounds__(128)" in _signature(tileagent.compile(func, target="cpu:sm_90a"))
    assert "__cluster_dims__" not in _signature(tileagent.compile(func, target="cpu:sm_80"))
    assert "cluster_dims=(2, 1, 1)" in tileagent.compile(func, target="cpu:sm_90a").get_ir("tile")
    # a plain kernel gets none (not warp-specialized)
    assert "__cluster_dims__" not in _signature(tileagent.compile(_scale(8), target="cpu:sm_90a"))


def test_cluster_kernel_is_tilelangs_name_for_it():
    @T.prim_func
    def scale(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.ClusterKernel(8, cluster_dims=(4, 1, 1), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0
    kernel = tileagent.compile(scale, target="cpu:sm_90a")
    assert "__cluster_dims__(4, 1, 1)" in _signature(kernel)
    a = torch.randn(1024)
    torch.testing.assert_close(_run(kernel, a), 2 * a)


def _run(kernel, a):
    b = torch.full_like(a, float("nan"))
    kernel(a, b)
    return b


def test_a_runtime_grid_that_breaks_the_cluster_is_refused_on_the_cpu_too():
    from tileagent.compiler.errors import KernelArgumentError

    for target in ("cpu", "sim"):
        kernel = tileagent.compile(_dynamic_scale(), target=target)
        x = torch.randn(512)
        torch.testing.assert_close(_run(kernel, x), 2 * x)
        with pytest.raises(KernelArgumentError, match=r"grid \(3, 1, 1\) is not a multiple of its cluster_dims "
                                                      r"\(2, 1, 1\)"):
            _run(kernel, torch.randn(384))


def test_warp_specialized_gemms_run_in_pairs(shared_example, monkeypatch):
    monkeypatch.delenv("TILEAGENT_ENABLE_CLUSTERS", raising=False)
    gemm = shared_example("gemm_relu").matmul
    kernel = tileagent.compile(gemm.fn(1024, 1024, 1024, 128, 128, 64), target="cpu:sm_90a")
    assert "__cluster_dims__(2, 1, 1) __launch_bounds__(256, 2)" in _signature(kernel)
    assert "clusters of 2 blocks (2, 1, 1)" in kernel.get_ir("thread")
    # an odd grid along x (9 column blocks) keeps single blocks; so does TILEAGENT_ENABLE_CLUSTERS=0
    assert "__cluster_dims__" not in _signature(tileagent.compile(gemm.fn(1024, 1152, 1024, 128, 128, 64),
                                                                  target="cpu:sm_90a"))
    monkeypatch.setenv("TILEAGENT_ENABLE_CLUSTERS", "0")
    kernel = tileagent.compile(gemm.fn(1024, 1024, 1024, 128, 128, 64), target="cpu:sm_90a")
    assert "__cluster_dims__" not in _signature(kernel) and "warp-specialized" in kernel.get_ir("thread")


def test_a_persistent_gemm_keeps_single_blocks():
    from pathlib import Path

    from bench.memory_bound import load

    persistent = load("persistent_gemm", Path(__file__).resolve().parents[1] / "bench")
    def ir(persistent_):
        fn = persistent.gemm_relu.fn(4096, 4096, 4096, 128, 256, 64, 4, 256, 132, persistent_)
        return tileagent.compile(fn, target="cpu:sm_90a").get_ir("thread")

    assert "warp-specialized" in ir(True) and "clusters of" not in ir(True)
    assert "clusters of 2 blocks (2, 1, 1)" in ir(False)


def test_the_paired_gemm_is_correct_in_the_emulator(shared_example):
    mod = shared_example("gemm_relu")
    M, N, K = 128, 256, 128  # two column blocks: one cluster
    kernel = tileagent.compile(mod.matmul.fn(M, N, K, 128, 128, 64), target="sim")
    assert "clusters of 2 blocks" in kernel.get_ir("thread")
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c.float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=2e-2)


def test_nvrtc_compiles_the_paired_gemm(shared_example):
    from tileagent.compiler.runtime.nvrtc import compile_log, ptxas_remarks

    gemm = shared_example("gemm_relu").matmul
    source = tileagent.compile(gemm.fn(4096, 4096, 4096, 128, 128, 64), target="cpu:sm_90a").get_kernel_source()
    assert "__cluster_dims__(2, 1, 1)" in source
    log = compile_log(source, "sm_90a", ("--ptxas-options=-v",))
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log and ptxas_remarks(log) == []


@pytest.mark.gpu
def test_gpu_clusters(shared_example):
    """On an sm_90 GPU: the paired example GEMM against torch; a runtime grid that breaks the cluster is refused."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    from tileagent.compiler.errors import KernelArgumentError

    mod = shared_example("gemm_relu")
    M, N, K = 1000, 1024, 520
    k = tileagent.compile(mod.matmul.fn(M, N, K, 128, 128, 64), target="cuda")
    assert "clusters of 2 blocks" in k.get_ir("thread")
    a = torch.randn(M, K, dtype=torch.float16, device="cuda")
    b = torch.randn(K, N, dtype=torch.float16, device="cuda")
    c = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    k(a, b, c)
    torch.testing.assert_close(c.float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=5e-2)

    kernel = tileagent.compile(_dynamic_scale(), target="cuda")
    x = torch.randn(512, device="cuda")
    torch.testing.assert_close(_run(kernel, x), 2 * x)
    with pytest.raises(KernelArgumentError, match=r"grid \(3, 1, 1\) is not a multiple of its cluster_dims "
                                                  r"\(2, 1, 1\)"):
        _run(kernel, torch.randn(384, device="cuda"))
