"""The float16 prelude of the CUDA target (compiler.targets.cuda): compile time without a change of machine code.

A module that uses float16 only as a storage type with its two conversions gets a few lines of our own instead of
``cuda_fp16.h`` (NVRTC parses less); the cubin must be the one the header gives, byte for byte. Anything more of the
header (vector types, packing, atomics) includes the header.
"""

import pytest

import tileagent
from tests.conftest import REPO, load_module
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Call, Cast, Const, Load
from tileagent.compiler.ir.stmt import AtomicAdd, Buffer, Store
from tileagent.compiler.runtime.nvrtc import compile_to_cubin
from tileagent.compiler.targets.cuda import _FP16_PRELUDE, generate
from tileagent.compiler.tir import THREAD


def source(example, factory, *args):
    impl = getattr(load_module(REPO / "prompts" / "examples" / f"{example}.py"), factory)
    return tileagent.compile(impl.fn(*args), out_idx=impl.out_idx, target="cpu:sm_90a").get_kernel_source()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_conversion_only_module_uses_the_prelude_and_compiles_to_the_same_cubin(arch):
    src = source("rmsnorm_silu", "rmsnorm_silu", None, 352)
    assert "#include <cuda_fp16.h>" not in src and _FP16_PRELUDE in src
    with_header = src.replace(_FP16_PRELUDE, "#include <cuda_fp16.h>")
    for options in ((), ("--use_fast_math",)):
        assert compile_to_cubin(src, arch, options, cache=False) == \
            compile_to_cubin(with_header, arch, options, cache=False)


def test_a_module_using_more_of_float16_includes_the_header():
    src = source("gemm_relu", "gemm_relu", None, 256, 128)  # mma operands packed as __half2
    assert "#include <cuda_fp16.h>" in src and _FP16_PRELUDE not in src


def _kernel(body, params):
    from tileagent.compiler.tir import DeviceKernel, DeviceModule

    k = DeviceKernel("k", tuple(params), (Const(1, DType("int32")),), (32, 1, 1), 0, {}, tuple(body))
    return DeviceModule("m", (k,))


@pytest.mark.parametrize("what", ["shuffle", "int_to_half", "atomic"])
def test_float16_beyond_conversions_keeps_the_header_and_compiles(what):
    """A warp shuffle of a half value, an int -> half cast and a half atomicAdd need cuda_fp16.h's overloads."""
    h, i = Buffer("H", (32,), DType("float16"), "global"), Buffer("I", (32,), DType("int32"), "global")
    x = Load(h, (THREAD,), DType("float16"))
    value = {"shuffle": Call("shfl_xor", (x, Const(1, DType("int32")), Const(32, DType("int32"))), DType("float16")),
             "int_to_half": Cast(Load(i, (THREAD,), DType("int32")), DType("float16")), "atomic": x}[what]
    stmt = AtomicAdd(h, (THREAD,), value) if what == "atomic" else Store(h, (THREAD,), value)
    src = generate(_kernel([stmt], [h, i]))
    assert "#include <cuda_fp16.h>" in src and _FP16_PRELUDE not in src
    assert compile_to_cubin(src, "sm_80", cache=False)[:4] == b"\x7fELF"
