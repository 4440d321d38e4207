"""Targets (compiler.target): one immutable Target per compilation, resolved once, read by every stage.

Without a GPU, naming the arch lowers and compiles with NVRTC: CI builds every kernel for sm_80 and sm_90a.
"""

import dataclasses

import pytest
import torch

import tileagent
import tileagent.language as T
from tests.conftest import REPO, load_module
from tileagent.compiler import KernelArgumentError
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.target import Target, for_arch, resolve

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache"))


def test_a_named_arch_resolves_without_a_gpu_with_its_limits_and_features():
    t = resolve("cuda:sm_80")
    assert (t.kind, t.arch, t.name) == ("cuda", "sm_80", "cuda:sm_80")
    assert t.shared_bytes == 163 * 1024 and t.registers_per_thread == 255 and t.warp_size == 32
    assert t.has("cp_async") and t.has("ldmatrix") and not t.has("wgmma") and not t.has("tma")
    hopper = resolve("cuda:sm_90a")
    assert hopper.shared_bytes == 227 * 1024
    assert all(hopper.has(f) for f in ("wgmma", "tma", "stmatrix", "mbarrier", "clusters", "fp8"))
    assert resolve("cuda:sm_89").has("fp8") and resolve("cuda:sm_86").shared_bytes == 99 * 1024


@pytest.mark.parametrize("spec, name", [("cpu", "cpu:sm_90a"), ("sim", "sim:sm_90a"), ("sim:sm_80", "sim:sm_80"),
                                        ("cuda -arch=sm_90", "cuda:sm_90a"), ({"kind": "cpu"}, "cpu:sm_90a")])
def test_every_spelling_resolves_to_one_target(spec, name):
    assert resolve(spec).name == name
    assert resolve(resolve(spec)) == resolve(spec)


def test_a_target_is_immutable_and_hashable():
    t = for_arch("sm_80")
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.shared_bytes = 1 << 30
    assert {t: 1}[for_arch("sm_80")] == 1 and t != for_arch("sm_90a")
    with pytest.raises(ValueError, match="unknown target feature 'tensor_cores'"):
        t.has("tensor_cores")


@pytest.mark.parametrize("spec, message", [
    ("cuda:sm_75", "unknown GPU arch 'sm_75'; this compiler lowers for sm_80, sm_86, sm_89, sm_90a"),
    ("tpu", "unknown target 'tpu'; known: auto, cuda, sim, cpu (optionally with an arch: 'cuda:sm_80')"),
])
def test_unknown_targets_are_E601(spec, message):
    with pytest.raises(CompileError) as info:
        resolve(spec)
    assert info.value.code == "E601" and info.value.message == message


@no_gpu
def test_cuda_without_a_device_and_without_an_arch_is_E601():
    with pytest.raises(CompileError) as info:
        resolve("cuda")
    assert info.value.code == "E601" and "name the arch to compile without one (target='cuda:sm_90a')" in str(info.value)


def _gemm():
    return load_module(REPO / "prompts" / "examples" / "gemm_relu.py").gemm_relu


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_targets_lower_and_compile_with_nvrtc_on_a_cpu_machine(arch):
    """The gemm (mma.sync, ldmatrix, cp.async pipeline) builds for both archs: a cubin for that arch, no GPU."""
    impl = _gemm()
    kernel = tileagent.compile(impl.fn(None, 256, 128), out_idx=impl.out_idx, target=f"cuda:{arch}",
                               pass_configs=impl.pass_configs)
    assert kernel.target == for_arch(arch) and kernel.backend.cubin[:4] == b"\x7fELF"
    assert "nvrtc" in kernel.pass_timings()
    if not torch.cuda.is_available():
        with pytest.raises(KernelArgumentError, match="the kernel runs on CUDA"):
            kernel(torch.zeros(256, 128, dtype=torch.float16), torch.zeros(128, 256, dtype=torch.float16))


def test_the_target_decides_the_pipeline_stages_that_fit_its_shared_memory(shared_example):
    """MLA decode with 2 stages needs 230928 bytes on sm_90a's wgmma (229376 of tiles, 512 of reduction scratch, up
    to 1008 for rounding the arena to the swizzle atom, 32 for the TMA pipeline's full and empty mbarriers; on
    mma.sync, whose reduction scratch is 2048, TMA's tiles on 1024-byte swizzle atoms and the mbarriers take it to
    232448, all of sm_90a's 227 KiB): it fits sm_90a and runs as a plain loop on sm_80."""
    impl = shared_example("mla_decode").mla_decode
    func = impl.fn(4, 128, 1000)
    hopper = tileagent.compile(func, out_idx=impl.out_idx, target="sim:sm_90a").module.kernels[0]
    mma = tileagent.compile(func, out_idx=impl.out_idx, target="sim:sm_90a",
                            pass_configs={"tl.disable_wgmma": True}).module.kernels[0]
    ampere = tileagent.compile(func, out_idx=impl.out_idx, target="sim:sm_80").module.kernels[0]
    assert hopper.shared_bytes == 230928 <= for_arch("sm_90a").shared_bytes
    assert mma.shared_bytes == 232448 <= for_arch("sm_90a").shared_bytes
    assert ampere.shared_bytes == 157696 <= for_arch("sm_80").shared_bytes


def test_the_module_cache_keys_on_the_target():
    @T.prim_func
    def copy(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(256):
                B[i] = A[i] * 2.0

    first = tileagent.compile(copy, target="cuda:sm_80")
    other = tileagent.compile(copy, target="cuda:sm_90a")
    again = tileagent.compile(copy, target="cuda:sm_80")
    assert "module_cache" in again.pass_timings() and "lower_tile_ops" not in again.pass_timings()
    assert "lower_tile_ops" in other.pass_timings()  # another arch is not a hit
    assert again.backend.cubin == first.backend.cubin != other.backend.cubin


def test_jit_passes_the_target_through():
    @tileagent.jit(target="sim:sm_80")
    def scale(n):
        @T.prim_func
        def main(A: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=32) as _:
                for i in T.Parallel(n):
                    A[i] = A[i] * 3.0

        return main

    kernel = scale(64)
    assert isinstance(kernel.target, Target) and kernel.target.name == "sim:sm_80"
    a = torch.arange(64, dtype=torch.float32)
    kernel(a)
    assert torch.equal(a, torch.arange(64, dtype=torch.float32) * 3)
