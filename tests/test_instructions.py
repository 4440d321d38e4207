"""The instruction registry (compiler.instructions): which instruction carries out a T.gemm or one run of a T.copy,
how the choice shows in ``kernel.get_ir("thread")`` and in diagnostics, and that a new entry is picked up from its
registry line alone."""

import types

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler import instructions
from tileagent.compiler.diagnostics import CompileError, LayoutError
from tileagent.compiler.instructions import (COPY, GEMM, CpAsync, LoadStore, MmaSyncM16N8K16, cuda_emitters,
                                             emulators, gemm_unavailable, select_copy, select_gemm)
from tileagent.compiler.instructions.bulk_store import BulkStoreCopy
from tileagent.compiler.instructions.tma import TmaTileCopy
from tileagent.compiler.ir.stmt import Buffer, Gemm, Region
from tileagent.compiler.dtypes import DType
from tileagent.compiler.target import for_arch
from tileagent.compiler.tir import AsyncCopy, LdMatrix, Mma, PackPairs


def _buf(name, shape, dtype, scope):
    return Buffer(name, shape, DType(dtype), scope)


def _gemm(m=64, n=64, k=32, dtype="float16", acc="float32", policy=0, a_scope="shared"):
    a = _buf("A_s", (m, k), dtype, a_scope)
    b = _buf("B_s", (k, n), dtype, "shared")
    c = _buf("C_l", (m, n), acc, "fragment")
    return Gemm(Region.whole(a), Region.whole(b), Region.whole(c), False, False, policy, False)


def _target(*features, arch="sm_90a"):
    return types.SimpleNamespace(name=f"cuda:{arch}", arch=arch, features=frozenset(features))


def test_mma_sync_is_the_first_gemm_entry_and_describes_its_choice():
    # sm_80 has no wgmma: mma.sync, the first entry (and the fallback), takes every fp16 gemm
    assert isinstance(GEMM[0], MmaSyncM16N8K16)
    sm80 = for_arch("sm_80")
    choice = select_gemm(_gemm(m=128, n=64, policy=1), threads=128, target=sm80)
    assert choice.instruction is GEMM[0]
    assert choice.partition == (4, 1)
    assert choice.describe() == "mma.sync m16n8k16, FullRow, 4 warps (4 x 1)"
    assert select_gemm(_gemm(m=128, n=128), threads=256, target=sm80).describe() == \
        "mma.sync m16n8k16, Square, 8 warps (4 x 2)"


def test_wgmma_is_chosen_on_sm_90a_by_its_cost_and_mma_sync_where_it_does_not_apply():
    g = _gemm(m=128, n=64, policy=1)
    choice = select_gemm(g, threads=128, target=for_arch("sm_90a"))
    assert choice.instruction is GEMM[1] and GEMM[1].cost(g, 128, None) < GEMM[0].cost(g, 128, None)
    assert choice.describe(g) == "wgmma.mma_async m64nNk16 SS: m64n64k16.f32.f16.f16, A K-major 64B swizzle, B " \
                                 "N-major 128B swizzle, FullRow, 4 warps (4 x 1)"
    assert select_gemm(g, threads=128).instruction is GEMM[1]  # no target: every feature (no GPU visible here)
    # switched off for the kernel (pass config tl.disable_wgmma), or a gemm wgmma cannot take: mma.sync
    assert select_gemm(g, threads=128, target=for_arch("sm_90a").without({"wgmma"})).instruction is GEMM[0]
    assert select_gemm(_gemm(m=32, n=64), threads=128, target=for_arch("sm_90a")).instruction is GEMM[0]
    assert select_gemm(_gemm(k=24), threads=128, target=for_arch("sm_90a")).instruction is GEMM[0]


def test_gemm_entry_reasons_name_what_does_not_fit():
    mma = GEMM[0]
    assert mma.reason(_gemm(), 128, None) is None
    assert "float16/bfloat16 A and B and a float32 accumulator; got float32, float32 -> float32" in \
        mma.reason(_gemm(dtype="float32"), 128, None)
    assert mma.reason(_gemm(), 128, _target(arch="sm_75")) == "needs sm_80 or newer; the target is cuda:sm_75"
    assert mma.reason(_gemm(), 128, _target(arch="sm_80")) is None
    assert gemm_unavailable(_gemm(dtype="float32"), 128) is None  # TF32: mma.sync m16n8k8
    error = gemm_unavailable(_gemm(dtype="float32", acc="float16"), 128)
    assert error.code == "E602" and error.notes[0].startswith("mma.sync m16n8k16: takes float16/bfloat16")
    assert "mma.sync m16n8k8: takes float32/tfloat32 A and B (TF32) and a float32 accumulator; got float32, " \
           "float32 -> float16" in error.notes


def test_an_accumulator_its_operands_do_not_take_is_named_first():
    """Played LLM session 44b: int8 A and B into a float16 accumulator read "E602: reads A from registers (RS)" (the
    RS entry's description, with A in shared memory); the E302 for a bfloat16 one named no accumulator for int8."""
    error = gemm_unavailable(_gemm(dtype="int8", acc="float16"), 128, for_arch("sm_90a"))
    assert error.message == "T.gemm on tensor cores: int8 A and B accumulate in int32; the accumulator here is float16"
    assert error.hint == "allocate the accumulator fragment as int32 (an int8 product summed in int32 is exact); " \
                         "convert and scale it after the loop"
    assert "wgmma.mma_async m64nNk16 RS: needs A in registers (a fragment), B in shared memory and a fragment " \
           "accumulator; here A is shared, B shared, the accumulator fragment" in error.notes
    k_major = gemm_unavailable(_gemm(dtype="int8", acc="int32", k=64), 128, for_arch("sm_90a"))  # B is (K, N)
    assert k_major.message == "T.gemm on tensor cores: needs K-major 8-bit operands: A as (M, K) without " \
                              "transpose_A and B as (N, K) with transpose_B=True"


def test_a_tile_no_entry_can_split_is_a_layout_error():
    with pytest.raises(LayoutError) as info:
        select_gemm(_gemm(m=48, n=24, policy=1), threads=128)
    assert info.value.code == "L005" and "cannot split a 48 x 24 tile over 4 warps" in str(info.value)


def test_copy_entries_by_cost():
    g = Region.whole(_buf("A", (64, 64), "float16", "global"))
    s = Region.whole(_buf("A_s", (64, 64), "float16", "shared"))
    f = Region.whole(_buf("A_f", (64, 64), "float32", "fragment"))
    # TMA loads and bulk stores (sm_90a) come first but move whole tiles (select_tile_copy), never one run
    assert [type(e) for e in COPY] == [TmaTileCopy, BulkStoreCopy, CpAsync, LoadStore, LoadStore]
    assert isinstance(select_copy(g, s, 8, True), CpAsync)
    assert select_copy(g, s, 8, True).describe(g, 8) == "cp.async 16B"
    assert select_copy(g, s, 8, False).name == "vectorized ld/st"  # not a pipeline producer
    assert select_copy(g, s, 8, True, _target("ldmatrix")).name == "vectorized ld/st"  # no cp.async on the target
    assert select_copy(g, f, 8, True).name == "vectorized ld/st"  # cp.async moves into shared memory only
    assert select_copy(g, s, 1, False).name == "scalar ld/st"


def test_tile_atomic_add_entries():
    from tileagent.compiler.instructions import ATOMIC

    f = Region.whole(_buf("C_l", (32, 32), "float32", "fragment"))
    g32 = Region.whole(_buf("C", (32, 32), "float32", "global"))
    g16 = Region.whole(_buf("C", (32, 32), "float16", "global"))
    assert select_copy(f, g32, 4, False, None, ATOMIC).describe(f, 4) == "vector atomicAdd x4"
    assert select_copy(f, g16, 2, False, None, ATOMIC).name == "vector atomicAdd"
    assert select_copy(f, g16, 1, False, None, ATOMIC).name == "atomicAdd"
    assert ATOMIC[0].reason(f, g16, 4, False, None) == "adds 2 or 4 float32, or 2 float16/bfloat16, into global memory"


def test_emitted_statements_come_with_their_cuda_emitter_and_emulator():
    for node in (Mma, LdMatrix, PackPairs, AsyncCopy):
        assert node in cuda_emitters() and node in emulators()


def _pipelined_gemm(M, N, K, dtype="float16", acc="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), acc)):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), dtype)
            B_s = T.alloc_shared((32, 64), dtype)
            C_l = T.alloc_fragment((64, 64), acc)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_l, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C_l, C[by * 64, bx * 64])

    return main


def _line_of(func, text):
    import inspect

    lines, first = inspect.getsourcelines(func)
    return first + next(n for n, line in enumerate(lines) if text in line)


def test_thread_ir_names_the_chosen_instructions(monkeypatch):
    monkeypatch.delenv("TILEAGENT_ENABLE_TMA", raising=False)  # sm_90a's default: the pipeline's copies on TMA
    gemm_line = _line_of(_pipelined_gemm, "T.gemm(A_s")
    copy_line = _line_of(_pipelined_gemm, "T.copy(A[by")
    store_line = _line_of(_pipelined_gemm, "T.copy(C_l")
    for target, gemm, copy in (
            ("sim:sm_80", "mma.sync m16n8k16, FullRow, 4 warps (4 x 1)\n", "cp.async 16B"),
            ("sim", "wgmma.mma_async m64nNk16 SS: m64n64k16.f32.f16.f16, A K-major 64B swizzle, B N-major 128B "
                    "swizzle, FullRow, 4 warps (4 x 1)\n",
             "TMA 2d box 32x64 x1, 64B swizzle, 4096 B on an mbarrier, 2 stages")):
        ir = tileagent.compile(_pipelined_gemm(128, 128, 64), target=target).get_ir("thread")
        assert f"# T.gemm at line {gemm_line}: {gemm}" in ir, target
        assert f"# T.copy at line {copy_line}: {copy}" in ir
        assert f"# T.copy at line {store_line}: vectorized ld/st x2" in ir


def test_float32_gemm_is_tf32_on_the_interpreter_and_in_the_cuda_lowering():
    """The GPU lowering picks mma.sync m16n8k8 .tf32, whose tensor core reads each operand's upper 19 bits; the
    interpreter multiplies the same truncated values (a float32 product would pass the CPU check and fail the GPU's),
    so the interpreter and the emulator agree to float32 summation order. A float16 accumulator fits no entry: E602
    at the gemm with every entry's reason."""
    from tileagent.compiler.intrinsics import truncate_tf32

    func = _pipelined_gemm(64, 64, 32, dtype="float32")
    a, b, c = torch.randn(64, 32), torch.randn(32, 64), torch.zeros(64, 64)
    tileagent.compile(func, target="cpu")(a, b, c)
    truncated = truncate_tf32(a) @ truncate_tf32(b)
    torch.testing.assert_close(c, truncated, rtol=1e-5, atol=1e-5)
    assert (c - a @ b).abs().max() > 1e-3  # not the float32 product
    sim = tileagent.compile(func, target="sim")
    assert "mma.sync m16n8k8" in sim.get_ir("thread")
    c_sim = torch.zeros(64, 64)
    sim(a, b, c_sim)
    torch.testing.assert_close(c_sim, c, rtol=1e-5, atol=1e-5)
    with pytest.raises(CompileError) as info:
        tileagent.compile(_pipelined_gemm(64, 64, 32, dtype="float32", acc="float16"), target="sim")
    e = info.value
    assert e.code == "E602" and e.span.line == _line_of(_pipelined_gemm, "T.gemm(A_s")
    assert any(n.startswith("mma.sync m16n8k16: takes float16/bfloat16") for n in e.notes)


def test_a_new_gemm_entry_is_used_from_its_registry_line_alone(monkeypatch):
    """A cheaper entry registered in front wins: its layouts, its lowering and its name in the thread IR."""
    calls = []

    class Cheaper(MmaSyncM16N8K16):
        name = "test.mma"

        def cost(self, g, threads, target):
            return 0.5

        def lower(self, g, ctx):
            calls.append(g)
            return super().lower(g, ctx)

    monkeypatch.setattr(instructions, "GEMM", (MmaSyncM16N8K16(), Cheaper()))
    kernel = tileagent.compile(_pipelined_gemm(64, 64, 32), target="sim")
    assert "test.mma, FullRow, 4 warps (4 x 1)" in kernel.get_ir("thread") and calls
    a, b = torch.randn(64, 32, dtype=torch.float16), torch.randn(32, 64, dtype=torch.float16)
    c = torch.zeros(64, 64)
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
