"""The float16 and bfloat16 preludes of the CUDA target (compiler.targets.cuda_prelude): compile time without a
change of machine code.

A module that uses float16 / bfloat16 only as a storage type with its two float32 conversions gets a few lines of our
own instead of ``cuda_fp16.h`` / ``cuda_bf16.h`` (NVRTC parses less); the cubin must be the one the header gives,
byte for byte, on sm_80 and sm_90a. Anything more of the header (vector types, packing, atomics, shuffles, integer
conversions) includes the header. On a GPU, the conversions round as torch does on boundary values.
"""

import pytest
import torch

import tileagent
import tileagent.language as T
from tests.conftest import REPO, load_module
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Call, Cast, Const, Load
from tileagent.compiler.ir.stmt import AtomicAdd, Buffer, Store
from tileagent.compiler.runtime.nvrtc import compile_to_cubin
from tileagent.compiler.targets.cuda import generate
from tileagent.compiler.targets.cuda_prelude import BF16_PRELUDE, FP16_PRELUDE as _FP16_PRELUDE, preamble
from tileagent.compiler.tir import THREAD


HEADERS = {"float16": ("cuda_fp16.h", _FP16_PRELUDE), "bfloat16": ("cuda_bf16.h", BF16_PRELUDE)}


def source(example, factory, *args, pass_configs=None, **kwargs):
    impl = getattr(load_module(REPO / "prompts" / "examples" / f"{example}.py"), factory)
    return tileagent.compile(impl.fn(*args, **kwargs), out_idx=impl.out_idx, target="cpu:sm_90a",
                             pass_configs=pass_configs).get_kernel_source()


def with_headers(src, dtypes):
    """``src`` with CUDA's headers in place of our definitions (what the code generator emitted before)."""
    for dt in dtypes:
        header, prelude = HEADERS[dt]
        assert f"#include <{header}>" not in src and prelude in src
        src = src.replace(prelude, f"#include <{header}>")
    return src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_conversion_only_module_uses_the_prelude_and_compiles_to_the_same_cubin(arch, dtype):
    src = source("rmsnorm_silu", "rmsnorm_silu", None, 352, dtype=dtype)
    assert "#include" not in src
    for options in ((), ("--use_fast_math",)):
        assert compile_to_cubin(src, arch, options, cache=False) == \
            compile_to_cubin(with_headers(src, [dtype]), arch, options, cache=False)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_module_converting_float16_to_bfloat16_gets_both_preludes_and_the_same_cubin(arch):
    h, b = Buffer("H", (32,), DType("float16"), "global"), Buffer("B", (32,), DType("bfloat16"), "global")
    src = generate(_kernel([Store(b, (THREAD,), Cast(Load(h, (THREAD,), DType("float16")), DType("bfloat16")))],
                           [h, b]))
    assert "#include" not in src and "__float2bfloat16_rn(__half2float(H[" in src
    assert compile_to_cubin(src, arch, cache=False) == \
        compile_to_cubin(with_headers(src, ["float16", "bfloat16"]), arch, cache=False)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_module_using_more_of_the_type_includes_the_header(dtype):
    # on mma.sync (sm_90a with tl.disable_wgmma) the operands are packed as __half2 / __nv_bfloat162
    src = source("gemm_relu", "gemm_relu", None, 256, 128, dtype=dtype, pass_configs={"tl.disable_wgmma": True})
    header, prelude = HEADERS[dtype]
    assert f"#include <{header}>" in src and prelude not in src


def test_the_wgmma_gemm_uses_the_float16_prelude_and_compiles_to_the_same_cubin():
    """On wgmma (sm_90a's default) the float16 gemm's operands stay in shared memory (descriptors) and its epilogue
    only converts: the prelude serves it, and the cubin is the header's, byte for byte."""
    src = source("gemm_relu", "gemm_relu", None, 256, 128, dtype="float16")
    assert "wgmma.mma_async" in src and "#include" not in src
    assert compile_to_cubin(src, "sm_90a", cache=False) == \
        compile_to_cubin(with_headers(src, ["float16"]), "sm_90a", cache=False)


def test_headers_that_include_another_bring_its_type():
    texts = ["__nv_bfloat162 v = __floats2bfloat162_rn(a, b);"]  # bfloat16 beyond the prelude
    assert preamble(["cuda_bf16.h", "cuda_fp16.h"], set(), texts) == ["#include <cuda_bf16.h>",
                                                                      "#include <cuda_fp16.h>"]
    assert preamble(["cuda_bf16.h", "cuda_fp16.h"], {"float16"}, []) == ["#include <cuda_fp16.h>", BF16_PRELUDE]
    assert preamble(["cuda_bf16.h", "cuda_fp16.h", "cuda_fp8.h"], set(), []) == [
        "#include <cuda_bf16.h>", "#include <cuda_fp16.h>", "#include <cuda_fp8.h>"]
    assert preamble(["cuda_fp16.h"], set(), ["y = __hadd(a, b);"]) == ["#include <cuda_fp16.h>"]


def _kernel(body, params):
    from tileagent.compiler.tir import DeviceKernel, DeviceModule

    k = DeviceKernel("k", tuple(params), (Const(1, DType("int32")),), (32, 1, 1), 0, {}, tuple(body))
    return DeviceModule("m", (k,))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("what", ["shuffle", "int_to_half", "atomic", "atomic_max"])
def test_beyond_conversions_keeps_the_header_and_compiles(what, dtype):
    """A warp shuffle of a half/bfloat16 value, an int -> half cast and half atomics need the header's overloads."""
    dt = DType(dtype)
    h, i = Buffer("H", (32,), dt, "global"), Buffer("I", (32,), DType("int32"), "global")
    x = Load(h, (THREAD,), dt)
    value = {"shuffle": Call("shfl_xor", (x, Const(1, DType("int32")), Const(32, DType("int32"))), dt),
             "int_to_half": Cast(Load(i, (THREAD,), DType("int32")), dt), "atomic": x, "atomic_max": x}[what]
    stmt = AtomicAdd(h, (THREAD,), value, op="max" if what == "atomic_max" else "add") if what.startswith("atomic") \
        else Store(h, (THREAD,), value)
    src = generate(_kernel([stmt], [h, i]))
    header, prelude = HEADERS[dtype]
    assert f"#include <{header}>" in src and prelude not in src
    for arch in ("sm_80", "sm_90a"):
        assert compile_to_cubin(src, arch, cache=False)[:4] == b"\x7fELF"


# float32 values at the rounding boundaries of float16 and bfloat16: ties to even either way, the largest finite
# values and just past them (overflow to inf), subnormals and the smallest ones, signed zeros, inf and nan
_F32_BOUNDARY = [0.0, -0.0, 1.0, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8,
                 -(1.0 + 2.0 ** -8), 1.0 + 2.0 ** -8 + 2.0 ** -20, 65504.0, 65519.99, 65520.0, 2.0 ** -24, 2.0 ** -25,
                 1.5 * 2.0 ** -25, 2.0 ** -14 - 2.0 ** -25, 3.3895314e38, 3.3961776e38, 3.4028235e38, 1e-40, -1e-45,
                 2.0 ** -126, 2.0 ** -133 * 3, float("inf"), float("-inf"), float("nan"), 0.1, -2.7182817, 1e5]


@tileagent.jit(out_idx=[1, 2])
def _round_trip(N, dtype):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((N,), "float32")
            y = T.alloc_fragment((N,), dtype)
            z = T.alloc_fragment((N,), "float32")
            T.copy(X, x)
            for i in T.Parallel(N):
                y[i] = x[i]
            T.copy(y, Y)
            for i in T.Parallel(N):
                z[i] = y[i]
            T.copy(z, Z)

    return main


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_prelude_conversions_round_as_torch_does_on_boundary_values(dtype):
    x = torch.tensor(_F32_BOUNDARY, dtype=torch.float32, device="cuda")
    n = x.numel()
    kernel = _round_trip(n, dtype)
    assert HEADERS[dtype][1] in kernel.get_kernel_source() and "#include" not in kernel.get_kernel_source()
    y, z = kernel(x)
    want = x.to(getattr(torch, dtype))
    nan = torch.isnan(x)
    assert torch.equal(y.view(torch.int16)[~nan], want.view(torch.int16)[~nan])  # bit for bit: -0, inf, subnormals
    assert torch.isnan(y[nan]).all() and torch.isnan(z[nan]).all()  # a nan stays a nan (payloads may differ)
    assert torch.equal(z[~nan], want.float()[~nan])
