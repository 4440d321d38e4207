"""CUDA target: thread IR -> CUDA C++ (compiler.targets.cuda) -> cubin (compiler.runtime.nvrtc) -> launch.

CPU tests build DeviceModules by hand, check key lines of the source and compile every kernel with NVRTC for sm_80
and sm_90a. Tests marked ``gpu`` launch on a device and compare with torch.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from tileagent.compiler.dtypes import DType
from tileagent.compiler.errors import KernelArgumentError, KernelRuntimeError
from tileagent.compiler.ir.expr import BinOp, Call, Cast, Cmp, Const, Load, Select, Unary, Var
from tileagent.compiler.ir.stmt import AtomicAdd, Buffer, For, If, Let, Store
from tileagent.compiler.runtime import nvrtc as nvrtc_mod
from tileagent.compiler.runtime.launch import _pack_scalar, eval_scalar
from tileagent.compiler.runtime.nvrtc import NvrtcError, cache_path, compile_to_cubin
from tileagent.compiler.targets.cuda import CodegenError, dtype_to_ctype, generate, required_alignment, vector_bytes
from tileagent.compiler.tir import (BLOCK_IDX, LANE, THREAD, WARP, AsyncCommit, AsyncCopy, AsyncWait, Barrier, Declare,
                          DeviceKernel, DeviceModule, LdMatrix, Mma, VecAtomicAdd, VecCopy)

F16, BF16, F32, F64 = DType("float16"), DType("bfloat16"), DType("float32"), DType("float64")
I32, I64 = DType("int32"), DType("int64")
ARCHS = ("sm_80", "sm_90a")


def c(v, dt=I32):
    return Const(v, DType(dt))


def gbuf(name, dtype, size):
    return Buffer(name, (size,), DType(dtype), "global")


def ld(buf, idx):
    return Load(buf, (idx,), buf.dtype)


def st(buf, idx, value):
    return Store(buf, (idx,), value)


def add(a, b):
    return BinOp("+", a, b, a.dtype)


def mul(a, b):
    return BinOp("*", a, b, a.dtype)


def kernel(name, params, body, grid, block=(128, 1, 1), shared_bytes=0, shared_offsets=None):
    return DeviceKernel(name, tuple(params), tuple(grid), block, shared_bytes, shared_offsets or {}, tuple(body))


def flat(src: str) -> str:
    """The source with every run of whitespace made one space and none after "(" (signatures on one line)."""
    return re.sub(r"\s+", " ", src).replace("( ", "(")


def compiles(source: str, tmp_path) -> list[bytes]:
    cubins = [compile_to_cubin(source, arch, cache=False) for arch in ARCHS]
    for cubin in cubins:
        assert len(cubin) > 0 and cubin[:4] == b"\x7fELF"
    return cubins


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache"))


# ---- kernels used by the CPU and GPU tests


def elementwise_kernel(block=128):
    """B[i] = float(A[i]) * 2 + 1 for i < n, A half, B float."""
    n = Var("n")
    a, b = gbuf("A", F16, n), gbuf("B", F32, n)
    bx, i, x = Var("bx"), Var("i"), Var("x", F32)
    body = [Let(bx, BLOCK_IDX[0]), Let(i, add(mul(bx, c(block)), THREAD)),
            If(Cmp("<", i, n), (Let(x, Cast(ld(a, i), F32)), st(b, i, add(mul(x, c(2.0, F32)), c(1.0, F32)))), ())]
    grid = (BinOp("//", add(n, c(block - 1)), c(block), I32),)
    return kernel("elementwise", [a, b, n], body, grid, block=(block, 1, 1)), (a, b, n)


def shared_kernel(elems_per_block=1024):
    """B = each block's halves of A, reversed in 8-element chunks, staged through shared memory (4 blocks)."""
    a, b = gbuf("A", F16, 1 << 20), gbuf("B", F16, 1 << 20)
    s = Buffer("A_shared", (elems_per_block,), F16, "shared")
    bx, base, k = Var("bx"), Var("base"), Var("k")
    chunks = elems_per_block // 8
    chunk = add(mul(k, c(128)), THREAD)
    t8, rev8 = mul(chunk, c(8)), mul(BinOp("-", c(chunks - 1), chunk, I32), c(8))
    body = [Let(bx, BLOCK_IDX[0]), Let(base, mul(bx, c(elems_per_block))),
            For(k, 0, chunks // 128, 1, "unroll", (VecCopy(s, t8, a, add(base, t8), 8),)),
            Barrier(),
            For(k, 0, chunks // 128, 1, "serial", (VecCopy(b, add(base, t8), s, rev8, 8),))]
    return kernel("shared_reverse", [a, b], body, (c(4),), shared_bytes=elems_per_block * 2,
                  shared_offsets={s: 0}), (a, b)


def warp_sum_kernel():
    """Y[w] = sum of the 32 floats of warp w (global warp index), by a shfl_xor butterfly; Z += all of them."""
    x, y, z = gbuf("X", F32, 4096), gbuf("Y", F32, 128), gbuf("Z", F32, 1)
    acc = Buffer("acc", (1,), F32, "local")
    bx, k = Var("bx"), Var("k")
    a0 = ld(acc, c(0))
    shfl = Call("shfl_xor", (a0, BinOp(">>", c(16), k, I32), c(32)), F32)
    body = [Let(bx, BLOCK_IDX[0]), Declare(acc, c(0.0, F32)),
            st(acc, c(0), ld(x, add(mul(bx, c(128)), THREAD))),
            For(k, 0, 5, 1, "unroll", (st(acc, c(0), add(a0, shfl)),)),
            If(Cmp("==", LANE, c(0)), (st(y, add(mul(bx, c(4)), WARP), a0), AtomicAdd(z, (c(0),), a0)), ())]
    return kernel("warp_sum", [x, y, z], body, (c(32),)), (x, y, z)


def casts_kernel():
    h, bf, f, d, i = gbuf("H", F16, 128), gbuf("Bf", BF16, 128), gbuf("F", F32, 128), gbuf("D", F64, 128), \
        gbuf("I", I32, 128)
    out = gbuf("Out", F32, 128)
    t = THREAD
    hf = Cast(ld(h, t), F32)
    body = [
        st(out, t, add(hf, Cast(ld(bf, t), F32))),
        st(h, t, Cast(ld(f, t), F16)),
        st(bf, t, Cast(ld(h, t), BF16)),
        st(i, t, Cast(ld(f, t), I32)),
        st(d, t, Cast(ld(i, t), F64)),
        st(h, t, Call("exp", (ld(h, t),), F16)),
        st(bf, t, BinOp("*", ld(bf, t), Call("sigmoid", (ld(bf, t),), BF16), BF16)),
        st(f, t, Select(Cmp(">", ld(f, t), c(0.0, F32)), c(math.inf, F32), c(-math.inf, F32), F32)),
        st(f, t, Call("max", (ld(f, t), c(math.nan, F32)), F32)),
        st(h, t, Select(Cmp("<", ld(h, t), c(0.5, F16)), c(-math.inf, F16), c(65504.0, F16), F16)),
        st(i, t, BinOp("//", ld(i, t), c(-3), I32)),
        st(i, t, BinOp("%", ld(i, t), c(7), I32)),
        st(i, t, Call("min", (ld(i, t), c(5)), I32)),
        st(d, t, Call("rsqrt", (Unary("-", ld(d, t), F64),), F64)),
        st(f, t, BinOp("%", ld(f, t), c(1.5, F32), F32)),
        st(h, t, BinOp("//", ld(h, t), c(2.0, F16), F16)),
        st(h, t, Call("shfl_xor", (ld(h, t), c(1), c(32)), F16)),
        st(bf, t, Call("shfl_xor", (ld(bf, t), c(2), c(32)), BF16)),
    ]
    return kernel("casts", [h, bf, f, d, i, out], body, (c(1),)), (h, bf, f, d, i, out)


def atomic_kernel():
    f, h, q = gbuf("F", F32, 4), gbuf("H", F16, 4), gbuf("Q", I64, 4)
    bf = gbuf("Bf", BF16, 4)
    idx = BinOp("&", THREAD, c(3), I32)
    body = [AtomicAdd(f, (idx,), c(1.0, F32)), AtomicAdd(h, (idx,), c(1.0, F16)), AtomicAdd(q, (idx,), c(2, I64)),
            AtomicAdd(bf, (idx,), c(1.0, BF16))]
    return kernel("atomics", [f, h, q, bf], body, (c(1),)), (f, h, q, bf)


def mma_kernel(dtype=F16, warps=1, ksteps=1):
    """C[16 warps, 8] = A[16 warps, 16 ksteps] @ B[16 ksteps, 8] (row-major, C float): warp w owns rows 16w..16w+15
    and accumulates one Mma per 16-wide k-step on a zeroed accumulator, its fragments loaded from global memory into
    local arrays in the layout of tir.Mma (g = lane / 4, t = lane % 4)."""
    K = 16 * ksteps
    a, b, out = gbuf("A", dtype, 16 * warps * K), gbuf("B", dtype, K * 8), gbuf("C", F32, 16 * warps * 8)
    af, bf = Buffer("a_frag", (8,), DType(dtype), "local"), Buffer("b_frag", (4,), DType(dtype), "local")
    acc = Buffer("acc", (4,), F32, "local")
    g, t, m0, kk = Var("g"), Var("t"), Var("m0"), Var("kk")
    loads = [st(af, c(i), ld(a, (m0 + g + 8 * (i // 2 % 2)) * K + kk * 16 + 2 * t + (i % 2 + 8 * (i // 4))))
             for i in range(8)]
    loads += [st(bf, c(j), ld(b, (kk * 16 + 2 * t + (j % 2 + 8 * (j // 2))) * 8 + g)) for j in range(4)]
    body = [Let(g, LANE // 4), Let(t, LANE % 4), Let(m0, WARP * 16), Declare(af), Declare(bf),
            Declare(acc, c(0.0, F32)),
            For(kk, 0, ksteps, 1, "unroll", (*loads, Mma(acc, (0, 1, 2, 3), af, tuple(range(8)), bf, (0, 1, 2, 3)))),
            *[st(out, (m0 + g + 8 * (j // 2)) * 8 + 2 * t + j % 2, ld(acc, c(j))) for j in range(4)]]
    name = f"mma_{DType(dtype)}_{warps}x{ksteps}"
    return kernel(name, [a, b, out], body, (c(1),), block=(32 * warps, 1, 1)), (a, b, out)


def module(*kernels):
    return DeviceModule("test_module", tuple(kernels))


def test_binop_literals_take_the_expressions_dtype_and_mixed_dtypes_get_casts():
    """make_binop's rules (TVM's): a literal meets an expression in its dtype, an int expression meeting a float
    literal is cast to float32, bool is promoted, x + 0 and 1 * x fold (the lowering builds these by the hundred)."""
    from tileagent.compiler.ir.expr import make_binop

    i, h, f, b = Var("i", DType("int32")), Var("h", DType("float16")), Var("f", DType("float32")), Var("b", DType("bool"))
    e = make_binop("*", i, 8)
    assert isinstance(e, BinOp) and e.dtype == "int32" and e.a is i and (e.b.value, e.b.dtype) == (8, "int32")
    e = make_binop("+", 1, h)
    assert e.dtype == "float16" and e.b is h and type(e.a.value) is float and (e.a.value, e.a.dtype) == (1.0, "float16")
    e = make_binop("-", i, 2.5)
    assert e.dtype == "float32" and isinstance(e.a, Cast) and e.a.value is i and e.b.value == 2.5
    e = make_binop("+", b, 1)
    assert e.dtype == "int32" and isinstance(e.a, Cast) and e.a.value is b
    e = make_binop("+", f, i)
    assert e.dtype == "float32" and e.a is f and isinstance(e.b, Cast) and e.b.value is i
    assert make_binop("+", i, 0) is i and make_binop("*", 1, i) is i and make_binop("*", f, 1) is not f
    assert make_binop("+", 2, 3) == 5 and (make_binop("+", Const(2, DType("int32")), 3).value == 5)


# ---- code generation


def test_elementwise_kernel_source_and_cubins(tmp_path):
    k, _ = elementwise_kernel()
    src = generate(module(k))
    assert ('extern "C" __global__ void __launch_bounds__(128) elementwise(const half* __restrict__ A, '
            'float* __restrict__ B, int n) {') in flat(src)
    # float16 only converted: our prelude instead of cuda_fp16.h (tests/test_codegen_prelude.py: identical cubins)
    assert "__half2float(const __half a)" in src and "#include" not in src and "cuda_bf16.h" not in src
    assert "const int tid = threadIdx.x;" in src
    assert "const int bx = (int)blockIdx.x;" in src
    assert "if (i < n) {" in src
    assert "const float x = __half2float(A[(long long)i]);" in src  # global index widened to 64 bits
    assert "const int i = bx * 128 + tid;" in src
    assert "B[(long long)i] = x * 2.0f + 1.0f;" in src
    compiles(src, tmp_path)


def test_shared_buffer_barrier_and_vec_copy_of_eight_halves(tmp_path):
    k, _ = shared_kernel()
    src = generate(module(k))
    assert "extern __shared__ __align__(1024) unsigned char smem[];" in src
    assert "half* A_shared = reinterpret_cast<half*>(smem + 0);" in src
    assert "__syncthreads();" in src
    assert "*reinterpret_cast<uint4*>(&A_shared[" in src and "*reinterpret_cast<const uint4*>(&A[" in src
    assert "#pragma unroll" in src
    assert required_alignment(k) == {k.params[0]: 16, k.params[1]: 16}
    compiles(src, tmp_path)


def test_required_alignment_covers_async_copy_sources_and_vector_atomic_destinations():
    """cp.async reads ``width * bytes`` from global memory and a vector atomicAdd writes a float2/float4/half2: the
    launcher must reject tensors not aligned to those (required_alignment tells it)."""
    a, b, out = gbuf("A", F16, 1024), gbuf("B", F16, 1024), gbuf("Out", F32, 1024)
    tile = Buffer("tile", (2048,), F16, "shared")
    acc = Buffer("acc", (2,), F32, "local")
    body = [AsyncCopy(tile, mul(THREAD, c(8)), a, mul(THREAD, c(8)), 8),
            AsyncCopy(tile, add(c(1024), mul(THREAD, c(2))), b, mul(THREAD, c(2)), 2, Cmp("<", THREAD, c(64))),
            AsyncCommit(), AsyncWait(0), Barrier(),
            Declare(acc, c(0.0, F32)), VecAtomicAdd(out, mul(THREAD, c(2)), acc, c(0), 2)]
    k = kernel("async_and_atomic", [a, b, out], body, (c(1),), shared_bytes=4096, shared_offsets={tile: 0})
    assert required_alignment(k) == {a: 16, b: 4, out: 8}
    src = generate(module(k))
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in src and "cp.async.ca.shared.global" in src
    assert "atomicAdd(reinterpret_cast<float2*>(&Out[" in src


def test_vec_copy_with_conversion_loads_one_vector_then_converts():
    a, out = gbuf("A", F16, 1024), gbuf("Out", F16, 1024)
    frag = Buffer("frag", (8,), F32, "local")
    body = [Declare(frag), VecCopy(frag, c(0), a, mul(THREAD, c(8)), 8),
            VecCopy(out, mul(THREAD, c(8)), frag, c(0), 8),  # float -> half: one 16-byte store
            VecCopy(out, c(0), a, c(4), 3)]  # not a vector width: an element loop
    src = generate(module(kernel("convert", [a, out], body, (c(1),))))
    assert "__align__(16) float frag[8];" in src
    assert "*reinterpret_cast<uint4*>(tl_v) = *reinterpret_cast<const uint4*>(&A[tl_s]);" in src
    assert "frag[tl_d + tl_k] = __half2float(tl_v[tl_k]);" in src
    assert "tl_o[tl_k] = __float2half_rn(frag[tl_s + tl_k]);" in src
    assert "*reinterpret_cast<uint4*>(&Out[tl_d]) = *reinterpret_cast<const uint4*>(tl_o);" in src
    assert "Out[tl_d + tl_k] = A[tl_s + tl_k];" in src
    assert vector_bytes(F16, 8) == 16 and vector_bytes(F32, 8) == 0 and vector_bytes(F16, 3) == 0
    for arch in ARCHS:
        assert compile_to_cubin(src, arch, cache=False)[:4] == b"\x7fELF"


def test_warp_shuffle_reduction_uses_shfl_xor_sync(tmp_path):
    k, _ = warp_sum_kernel()
    src = generate(module(k))
    assert "acc[0] = acc[0] + __shfl_xor_sync(0xffffffffu, acc[0], 16 >> k, 32);" in src
    assert "const int lane = tid & 31;" in src and "const int warp = tid >> 5;" in src
    assert "if (lane == 0) {" in src
    assert "atomicAdd(&Z[0LL], acc[0]);" in src
    assert "__align__(16) float acc[1];" in src
    compiles(src, tmp_path)


def test_casts_and_math_on_half_bf16_float(tmp_path):
    k, _ = casts_kernel()
    src = generate(module(k))
    assert "#include <cuda_bf16.h>" in src and "#include <cuda_fp16.h>" in src
    assert "H[(long long)tid] = __float2half_rn(F[(long long)tid]);" in src
    assert "Bf[(long long)tid] = __float2bfloat16_rn(__half2float(H[(long long)tid]));" in src
    assert "I[(long long)tid] = (int)(F[(long long)tid]);" in src
    assert "__float2half_rn(expf(__half2float(H[(long long)tid])))" in src
    assert "__int_as_float(0x7f800000)" in src and "(-__int_as_float(0x7f800000))" in src
    assert "fmaxf(F[(long long)tid], __int_as_float(0x7fffffff))" in src
    assert "__half2float(H[(long long)tid]) < 0.5f ? __float2half_rn(-__int_as_float(0x7f800000)) : " in src
    assert "tl_floordiv<int>(I[(long long)tid], -3)" in src and "tl_floormod<int>(I[(long long)tid], 7)" in src
    assert "tl_min<int>(" in src
    assert "__shfl_xor_sync(0xffffffffu, H[(long long)tid], 1, 32)" in src
    compiles(src, tmp_path)


def test_atomic_add_on_float_half_bf16_int64(tmp_path):
    k, _ = atomic_kernel()
    src = generate(module(k))
    assert "atomicAdd(&F[(long long)tid & 3LL], 1.0f);" in src
    assert "atomicAdd(&H[(long long)tid & 3LL], __float2half_rn(1.0f));" in src
    assert "atomicAdd(reinterpret_cast<unsigned long long*>(&Q[(long long)tid & 3LL]), (unsigned long long)(2LL));" \
        in src
    compiles(src, tmp_path)


def test_module_with_several_kernels_and_3d_block_compiles(tmp_path):
    o = gbuf("O", I32, 512)
    k3 = kernel("block3d", [o], [st(o, THREAD, BLOCK_IDX[1])], (c(1), c(2)), block=(8, 4, 2))
    src = generate(module(elementwise_kernel()[0], shared_kernel()[0], k3))
    assert src.count('extern "C" __global__') == 3
    assert "const int tid = (int)(threadIdx.x + threadIdx.y * 8u + threadIdx.z * 32u);" in src
    assert "__launch_bounds__(64) block3d(" in src
    assert "O[(long long)tid] = (int)blockIdx.y;" in src
    compiles(src, tmp_path)


def test_for_loop_with_step_and_fp8_and_narrow_ints(tmp_path):
    e4 = DType("float8_e4m3fn")
    a, q, b8 = gbuf("A", F32, 64), gbuf("Q", e4, 64), gbuf("B8", DType("int8"), 64)
    i = Var("i")
    body = [For(i, c(2), c(5), c(3), "serial", (st(q, i, Cast(ld(a, i), e4)),
                                                 st(a, i, add(Cast(ld(q, i), F32), c(1.0, F32))),
                                                 st(b8, i, BinOp("+", ld(b8, i), c(100, "int8"), DType("int8")))))]
    src = generate(module(kernel("fp8_step", [a, q, b8], body, (c(1),))))
    assert "#include <cuda_fp8.h>" in src
    assert "for (int tl_k1 = 0; tl_k1 < 5; ++tl_k1) {" in src and "const int i = 2 + tl_k1 * 3;" in src
    assert "__nv_fp8_e4m3(A[(long long)i])" in src
    assert "B8[(long long)i] = (signed char)(B8[(long long)i] + ((signed char)100));" in src
    compiles(src, tmp_path)


def test_names_are_sanitized_and_rebinding_a_let_gets_a_fresh_name(tmp_path):
    x = Var("x.0", F32)
    out = gbuf("out-buf", F32, 128)
    body = [Let(x, c(1.0, F32)), Let(x, add(x, c(1.0, F32))), Let(Var("int"), c(3)), st(out, THREAD, x)]
    src = generate(module(kernel("my kernel", [out], body, (c(1),))))
    assert "my_kernel(float* __restrict__ out_buf)" in src
    assert "const float x_0 = 1.0f;" in src and "const float x_0_1 = x_0 + 1.0f;" in src
    assert "const int int_1 = 3;" in src and "out_buf[(long long)tid] = x_0_1;" in src
    compiles(src, tmp_path)


def test_mma_m16n8k16_f16_is_inline_ptx_on_register_elements(tmp_path):
    k, _ = mma_kernel(F16)
    src = generate(module(k))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 " in src
    assert "__device__ __forceinline__ void tl_mma_m16n8k16_f16(float& d0, float& d1, float& d2, float& d3," in src
    assert "const __half2 v = __halves2half2(lo, hi);" in src  # lower-index element in the low 16 bits
    assert '"+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)' in src
    assert ("tl_mma_m16n8k16_f16(acc[0], acc[1], acc[2], acc[3], tl_pack_f16x2(a_frag[0], a_frag[1]), "
            "tl_pack_f16x2(a_frag[2], a_frag[3]), tl_pack_f16x2(a_frag[4], a_frag[5]), tl_pack_f16x2(a_frag[6], "
            "a_frag[7]), tl_pack_f16x2(b_frag[0], b_frag[1]), tl_pack_f16x2(b_frag[2], b_frag[3]));") in flat(src)
    assert "__align__(16) half a_frag[8];" in src and "__align__(16) float acc[4];" in src
    assert "bf16" not in src and "cuda_bf16.h" not in src
    assert "mma" not in generate(module(elementwise_kernel()[0]))  # the helper only when used
    compiles(src, tmp_path)


def test_mma_bf16_two_warps_two_k_steps_compiles(tmp_path):
    k, _ = mma_kernel(BF16, warps=2, ksteps=2)
    src = generate(module(k, mma_kernel(F16)[0]))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 " in src
    assert "const __nv_bfloat162 v = __halves2bfloat162(lo, hi);" in src
    assert src.count("__device__ __forceinline__ void tl_mma_m16n8k16_bf16(") == 1
    assert src.count("__device__ __forceinline__ void tl_mma_m16n8k16_f16(") == 1
    assert "#include <cuda_bf16.h>" in src and "__launch_bounds__(64) mma_bfloat16_2x2(" in src
    compiles(src, tmp_path)


def test_mma_operand_errors_raise_codegen_error():
    acc, a32 = Buffer("acc", (4,), F32, "local"), Buffer("a32", (8,), F32, "local")
    a, b = Buffer("a", (8,), F16, "local"), Buffer("b", (4,), F16, "local")
    decl = [Declare(acc), Declare(a32), Declare(a), Declare(b)]
    bad = {"want float16 or bfloat16 A and B": Mma(acc, (0, 1, 2, 3), a32, tuple(range(8)), b, (0, 1, 2, 3)),
           "must be distinct": Mma(acc, (0, 1, 1, 3), a, tuple(range(8)), b, (0, 1, 2, 3)),
           r"register b\[4\] is outside the array of 4": Mma(acc, (0, 1, 2, 3), a, tuple(range(8)), b, (0, 1, 2, 4)),
           "with 4 register indices": Mma(acc, (0, 1, 2, 3), a, tuple(range(8)), b, (0, 1))}
    for msg, mma in bad.items():
        with pytest.raises(CodegenError, match=msg):
            generate(module(kernel("k", [], [*decl, mma], (c(1),), block=(32, 1, 1))))
    with pytest.raises(CodegenError, match="the block has 48 threads"):
        generate(module(kernel("k", [], [*decl, bad["must be distinct"]], (c(1),), block=(48, 1, 1))))


def test_unbound_variable_and_unlowered_statement_raise_codegen_error():
    out = gbuf("O", F32, 4)
    with pytest.raises(CodegenError, match="variable ghost is used but not bound"):
        generate(module(kernel("k", [out], [st(out, Var("ghost"), c(1.0, F32))], (c(1),))))
    with pytest.raises(CodegenError, match="not a thread-IR statement"):
        generate(module(kernel("k", [out], [object()], (c(1),))))
    s = Buffer("S", (4,), F32, "shared")
    with pytest.raises(CodegenError, match="has no offset in shared_offsets"):
        generate(module(kernel("k", [out], [st(s, c(0), c(1.0, F32))], (c(1),))))


def test_dtype_to_ctype():
    assert [dtype_to_ctype(d) for d in ("float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8",
                                        "bool", "float8_e5m2")] == [
        "half", "__nv_bfloat16", "float", "double", "int", "long long", "unsigned char", "bool", "__nv_fp8_e5m2"]
    with pytest.raises(CodegenError):
        dtype_to_ctype("complex64")


# ---- NVRTC and its cache


def test_bad_source_raises_nvrtc_error_with_log_and_line():
    src = 'extern "C" __global__ void broken(float* x) {\n  x[0] = undefined_name;\n}\n'
    with pytest.raises(NvrtcError) as info:
        compile_to_cubin(src, "sm_90a")
    msg = str(info.value)
    assert "undefined_name" in msg and "line 2: x[0] = undefined_name;" in msg
    assert isinstance(info.value, KernelRuntimeError) and "error" in info.value.log


def test_cache_returns_same_bytes_without_recompiling(tmp_path, monkeypatch):
    src = generate(module(elementwise_kernel()[0]))
    first = compile_to_cubin(src, "sm_90a")
    path = cache_path(src, "sm_90a")
    assert path.is_file() and str(path).startswith(str(tmp_path / "cache"))

    def no_compile(*args):
        raise AssertionError("NVRTC was called despite a cache entry")

    monkeypatch.setattr(nvrtc_mod, "_compile", no_compile)
    assert compile_to_cubin(src, "sm_90a") == first
    with pytest.raises(AssertionError):  # another arch is another key
        compile_to_cubin(src, "sm_80")


def test_corrupt_cache_entry_is_ignored_and_rewritten():
    src = generate(module(warp_sum_kernel()[0]))
    good = compile_to_cubin(src, "sm_80")
    path = cache_path(src, "sm_80")
    path.write_bytes(path.read_bytes()[:100])
    calls = []
    real = nvrtc_mod._compile

    def counting(*args):
        calls.append(args)
        return real(*args)

    nvrtc_mod._compile = counting
    try:
        again = compile_to_cubin(src, "sm_80")
    finally:
        nvrtc_mod._compile = real
    assert len(calls) == 1 and again[:4] == b"\x7fELF" and len(again) == len(good)
    assert nvrtc_mod._read_cache(path) == again


def test_cache_key_depends_on_options():
    src = "// nothing\n"
    assert cache_path(src, "sm_90a") != cache_path(src, "sm_90a", ("-lineinfo",))
    assert cache_path(src, "sm_90a") != cache_path(src, "sm_80")


# ---- host-side launch helpers (no GPU needed)


def test_eval_scalar_uses_ir_integer_semantics():
    n = Var("n")
    assert eval_scalar(BinOp("//", add(n, c(127)), c(128), I32), {n: 1000}) == 8
    assert eval_scalar(BinOp("/", c(-7), n, I32), {"n": 2}) == -3
    assert eval_scalar(BinOp("//", c(-7), n, I32), {n: 2}) == -4
    assert eval_scalar(BinOp("%", c(-7), n, I32), {n: 2}) == 1
    assert eval_scalar(Call("max", (n, c(1)), I32), {n: 0}) == 1
    assert eval_scalar(Cast(BinOp("*", Cast(n, F32), c(0.5, F32), F32), I32), {n: 7}) == 3
    with pytest.raises(KernelArgumentError, match="no value for scalar parameter n"):
        eval_scalar(n, {})


def test_scalar_packing_by_dtype():
    assert _pack_scalar(Var("n"), 7).value == 7
    assert _pack_scalar(Var("n", I64), 2**40).value == 2**40
    assert _pack_scalar(Var("s", F32), 0.5).value == 0.5
    assert _pack_scalar(Var("h", F16), 1.0).value == 0x3C00
    assert _pack_scalar(Var("b", BF16), 1.0).value == 0x3F80
    with pytest.raises(KernelArgumentError, match="does not fit in int32"):
        _pack_scalar(Var("n"), 2**31)


def test_loaded_module_rejects_what_is_not_a_cubin():
    from tileagent.compiler.runtime import LoadedModule

    with pytest.raises(KernelRuntimeError):  # TargetUnavailable without a GPU, a load error with one
        LoadedModule(b"\x7fELF not really a cubin")
    with pytest.raises(KernelRuntimeError, match="not a cubin"):
        LoadedModule(b"garbage")


# ---- on a GPU

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _load(k):
    from tileagent.compiler.runtime import LoadedModule, device_arch

    return LoadedModule(compile_to_cubin(generate(module(k)), device_arch()))


@pytest.mark.gpu
@gpu
def test_gpu_elementwise_matches_torch():
    k, (a, b, n) = elementwise_kernel()
    mod = _load(k)
    for size in (1, 1000, 4096):
        x = torch.randn(size, device="cuda", dtype=torch.float16)
        y = torch.full((size,), -1.0, device="cuda")
        mod.launch(k, {a: x, b: y, n: size})
        torch.testing.assert_close(y, x.float() * 2 + 1)
    mod.launch(k, {a: x[:0], b: y[:0], n: 0})  # zero-size grid: nothing launched, no error


@pytest.mark.gpu
@gpu
def test_gpu_kernel_with_more_than_48_kib_shared_memory():
    k, (a, b) = shared_kernel(elems_per_block=32768)  # 64 KiB of halves per block
    assert k.shared_bytes > 48 * 1024
    mod = _load(k)
    x = torch.randn(1 << 20, device="cuda", dtype=torch.float16)
    y = torch.zeros_like(x)
    mod.launch(k, {a: x, b: y})
    mod.launch(k, {a: x, b: y})  # the attribute is set once; a second launch works too
    torch.cuda.synchronize()
    blocks = x[: 4 * 32768].view(4, 4096, 8).flip(1).reshape(-1)
    torch.testing.assert_close(y[: 4 * 32768], blocks)


@pytest.mark.gpu
@gpu
def test_gpu_launch_runs_on_the_current_stream():
    k, (a, b, n) = elementwise_kernel()
    mod = _load(k)
    size = 1 << 20
    x = torch.ones(size, device="cuda", dtype=torch.float16)
    y = torch.zeros(size, device="cuda")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        if hasattr(torch.cuda, "_sleep"):  # keeps s busy: a launch on another stream would read x before the fill
            torch.cuda._sleep(200_000_000)
        else:
            busy = torch.randn(4096, 4096, device="cuda")
            for _ in range(50):
                busy = busy @ busy
        x.fill_(3.0)
        mod.launch(k, {a: x, b: y, n: size})
    s.synchronize()
    assert torch.all(y == 7.0)


@pytest.mark.gpu
@gpu
def test_gpu_warp_sum_casts_and_atomics_match_torch():
    k, (x, y, z) = warp_sum_kernel()
    mod = _load(k)
    xs = torch.randn(4096, device="cuda")
    ys, zs = torch.zeros(128, device="cuda"), torch.zeros(1, device="cuda")
    mod.launch(k, {x: xs, y: ys, z: zs})
    torch.testing.assert_close(ys, xs.view(128, 32).sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(zs, xs.sum().view(1), rtol=1e-4, atol=1e-3)
    k2, (f, h, q, bf) = atomic_kernel()
    mod2 = _load(k2)
    fs, hs = torch.zeros(4, device="cuda"), torch.zeros(4, device="cuda", dtype=torch.float16)
    qs, bfs = torch.zeros(4, device="cuda", dtype=torch.int64), torch.zeros(4, device="cuda", dtype=torch.bfloat16)
    mod2.launch(k2, {f: fs, h: hs, q: qs, bf: bfs})
    torch.cuda.synchronize()
    assert fs.tolist() == [32.0] * 4 and hs.tolist() == [32.0] * 4 and qs.tolist() == [64] * 4
    assert bfs.tolist() == [32.0] * 4


@pytest.mark.gpu
@gpu
def test_gpu_wrong_arguments_raise_before_launch():
    k, (a, b, n) = elementwise_kernel()
    mod = _load(k)
    x = torch.randn(16, device="cuda", dtype=torch.float16)
    with pytest.raises(KernelArgumentError, match="parameter B: dtype"):
        mod.launch(k, {a: x, b: torch.zeros(16, device="cuda", dtype=torch.float16), n: 16})
    with pytest.raises(KernelArgumentError, match="tensor has 16 elements, the kernel addresses 32"):
        mod.launch(k, {a: x, b: torch.zeros(16, device="cuda"), n: 32})
    with pytest.raises(KernelArgumentError, match="no value for parameter n"):
        mod.launch(k, {a: x, b: torch.zeros(16, device="cuda")})
    k2, (a2, b2) = shared_kernel()
    x2 = torch.zeros(1 << 20, device="cuda", dtype=torch.float16)
    with pytest.raises(KernelArgumentError, match="parameter A: data pointer .* is not 16-byte aligned"):
        _load(k2).launch(k2, {a2: x2[1:], b2: x2})
    with pytest.raises(KernelArgumentError, match="expected a torch.Tensor"):
        mod.launch(k, {"A": x, "B": [0.0] * 16, "n": 16})  # params may also be given by name


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype,warps,ksteps", [(F16, 1, 1), (BF16, 1, 1), (F16, 2, 2), (BF16, 4, 3)])
def test_gpu_mma_matches_torch(dtype, warps, ksteps):
    k, (a, b, out) = mma_kernel(dtype, warps, ksteps)
    mod = _load(k)
    x = torch.randn(16 * warps, 16 * ksteps, device="cuda").to(dtype.torch)
    y = torch.randn(16 * ksteps, 8, device="cuda").to(dtype.torch)
    z = torch.full((16 * warps, 8), float("nan"), device="cuda")
    mod.launch(k, {a: x, b: y, out: z})
    torch.cuda.synchronize()
    torch.testing.assert_close(z, x.double().matmul(y.double()).float(), rtol=1e-4, atol=1e-4)
    xi = torch.randint(-4, 5, (16 * warps, 16 * ksteps), device="cuda").to(dtype.torch)  # small integers: exact
    mod.launch(k, {a: xi, b: y.round(), out: z})
    torch.cuda.synchronize()
    torch.testing.assert_close(z, xi.float() @ y.round().float(), rtol=0, atol=0)


def test_every_dtype_operator_and_intrinsic_compiles(tmp_path):
    """A kernel touching each dtype with each operator, intrinsic, cast and shuffle must be valid CUDA."""
    dts = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
           "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
    bufs = {d: gbuf(f"g_{d}", d, 256) for d in dts}
    idx_buf = gbuf("idx", I32, 256)
    step, j = Var("step", I64), Var("j")
    t = THREAD
    body = []
    for d in dts:
        dt = DType(d)
        b = bufs[d]
        x = ld(b, t)
        one = c(1 if not dt.is_float else 1.0, dt) if not dt.is_bool else c(True, dt)
        body.append(st(b, t, Select(Cmp("!=", x, one), x, one, dt)))
        body.append(st(b, t, Call("shfl_xor", (x, c(1), c(32)), dt)))
        for other in dts:  # every cast
            body.append(st(b, t, Cast(ld(bufs[other], t), dt)))
        if dt.is_bool:
            body.append(st(b, t, BinOp("and", x, Unary("not", x, dt), dt)))
            continue
        ops = ["+", "-", "*", "/", "//", "%"] + (["&", "|", "^", "<<", ">>"] if dt.is_int else [])
        for op in ops:
            body.append(st(b, t, BinOp(op, x, one, dt)))
        body.append(st(b, t, Unary("-", x, dt)))
        if dt.is_int:
            body.append(st(b, t, Unary("~", x, dt)))
        names = ["min", "max", "abs", "floor", "ceil"] + (["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh",
                                                           "sigmoid", "erf", "pow", "sin", "cos", "atan2",
                                                           "fmod"] if dt.is_float else [])
        for name in names:
            args = (x, one) if name in ("min", "max", "pow", "atan2", "fmod") else (x,)
            body.append(st(b, t, Call(name, args, dt)))
    local = Buffer("frag", (4,), BF16, "local")
    body += [Declare(local, c(0.5, BF16)),
             VecCopy(bufs["float32"], mul(t, c(4)), local, c(0), 4),  # bf16 x4 (8 bytes) -> float
             VecCopy(bufs["int8"], mul(t, c(4)), bufs["uint8"], mul(t, c(4)), 4),  # 4 bytes: uint1
             VecCopy(bufs["float8_e4m3fn"], mul(t, c(8)), bufs["float16"], mul(t, c(8)), 8),  # fp8 <- half
             For(j, t, c(4), step, "serial", (st(bufs["int64"], ld(idx_buf, j), c(7, I64)),))]  # gather index
    k = kernel("everything", [*bufs.values(), idx_buf, step], body, (c(1),))
    src = generate(module(k))
    assert "long long step" in src and "uint1" in src and "uint2" in src
    compiles(src, tmp_path)


def test_ldmatrix_writes_packed_registers_that_mma_reads_as_they_are(tmp_path):
    acc, a, b = Buffer("acc", (4,), F32, "local"), Buffer("a", (4,), "uint32", "local"), \
        Buffer("b", (2,), "uint32", "local")
    tile = Buffer("tile", (256,), F16, "shared")
    lane = THREAD % 32
    body = [Declare(acc), Declare(a), Declare(b),
            LdMatrix(a, c(0), tile, (lane % 16) * 16 + (lane // 16) * 8, 4, False),
            LdMatrix(b, c(0), tile, lane * 8, 2, True),
            Mma(acc, (0, 1, 2, 3), a, (0, 1, 2, 3), b, (0, 1), None, "float16")]
    k = DeviceKernel("ldm", (), (c(1),), (32, 1, 1), 512, {tile: 0}, tuple(body))
    src = flat(generate(module(k)))
    assert ('asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(a[0]), '
            '"=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"((unsigned)__cvta_generic_to_shared(&tile[') in src
    assert '"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(b[0]), "=r"(b[1])' in src
    assert "tl_mma_m16n8k16_f16(acc[0], acc[1], acc[2], acc[3], a[0], a[1], a[2], a[3], b[0], b[1]);" in src
    assert "__align__(16) unsigned int a[4];" in src
    compiles(generate(module(k)), tmp_path)
