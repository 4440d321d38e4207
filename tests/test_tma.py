"""The TMA entry of the copy registry (compiler.instructions.tma; by default for T.Pipelined loops with a T.gemm, every
copy with TILEAGENT_ENABLE_TMA=1): global -> shared T.copy as cp.async.bulk.tensor on an mbarrier, single copies and
T.Pipelined stages, run in the SIMT emulator against the data (TMA's placement modelled independently of the
layouts: hand-checked offsets below), compiled by NVRTC for sm_90a, the tensor-map rules checked at launch with
crafted strides and addresses (the driver's encode mocked), and the fallback to the variant without TMA decided at
launch."""

import ctypes
import logging

import numpy as np
import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.instructions import COPY
from tileagent.compiler.instructions.tma import TmaTileCopy, tma_model, tma_offsets
from tileagent.compiler.layout.layout import Layout, swizzled, wgmma_operand
from tileagent.compiler.runtime import tma as rt
from tileagent.compiler.tir import MbarrierWait


@pytest.fixture
def tma_on(monkeypatch):
    """TMA on, pipelines in the kernel's own threads (tests/test_warp_specialize.py covers the producer warpgroup)."""
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "1")
    monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "0")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


ELEM = {"float16": 2, "bfloat16": 2, "float32": 4}


def _copy_kernel(M, N, bm, bn, dtype="float16", layout=None, threads=128):
    """B = A through one shared tile per block: A -> S (the copy under test) -> B."""

    @T.prim_func
    def k(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            S = T.alloc_shared((bm, bn), dtype)
            if layout is not None:
                T.annotate_layout({S: layout((bm, bn), ELEM[dtype])})
            T.copy(A[by * bm, bx * bn], S)
            T.copy(S, B[by * bm, bx * bn])
    return k


# -- hand-checked placement tables ---------------------------------------------------------------------------------

def test_tma_offsets_hand_checked():
    # 128B swizzle, fp16, 8 rows of 64: row r's 16-byte chunk c lands at chunk c ^ (r % 8) of row r
    off = tma_offsets(8, 64, 2, 128)
    assert off[0, 0] == 0 and off[0, 8] == 16 and off[1, 0] == 128 + 16 and off[1, 8] == 128
    assert off[7, 0] == 7 * 128 + 7 * 16 and off[3, 63] == 3 * 128 + ((7 ^ 3) * 16) + 14
    # 64B swizzle, fp16 rows of 32 (64 bytes): chunk c at c ^ ((r >> 1) & 3)
    off = tma_offsets(8, 32, 2, 64)
    assert off[1, 0] == 64 and off[2, 0] == 128 + 16 and off[6, 8] == 6 * 64 + ((1 ^ 3) * 16)
    # 32B swizzle, fp16 rows of 16: chunk c at c ^ ((r >> 2) & 1)
    off = tma_offsets(8, 16, 2, 32)
    assert off[3, 0] == 96 and off[4, 0] == 128 + 16 and off[4, 8] == 128
    # column blocks: a 128-wide fp16 row is two 64-element boxes, the second after all rows of the first
    off = tma_offsets(16, 128, 2, 128)
    assert off[0, 64] == 16 * 128 and off[1, 64] == 16 * 128 + 128 + 16
    # no swizzle: row-major
    assert (tma_offsets(4, 24, 4, 0) == np.arange(96).reshape(4, 24) * 4).all()


@pytest.mark.parametrize("shape,elem,want", [
    ((64, 64), 2, 128), ((64, 32), 2, 64), ((64, 16), 2, 32), ((64, 128), 2, 128), ((32, 32), 4, 128),
    ((8, 256), 2, 128),
])
def test_wgmma_layouts_are_what_tma_writes(shape, elem, want):
    assert tma_model(wgmma_operand(shape, elem), shape, elem) == want


def test_which_default_layouts_tma_writes():
    assert tma_model(Layout.row_major((32, 64)), (32, 64), 2) == 0
    assert tma_model(swizzled((128, 64), 2), (128, 64), 2) == 128  # the sm_80 swizzle of 128-byte rows is TMA's
    assert tma_model(swizzled((64, 32), 2), (64, 32), 2) is None  # of 64-byte rows it is not (c ^ (r & 3))
    assert tma_model(swizzled((64, 128), 2), (64, 128), 2) is None  # 256-byte rows XOR 16 chunks
    assert tma_model(Layout.row_major((8, 4)), (8, 4), 2) is None  # 8-byte rows: the inner box is not 16 bytes
    assert tma_model(Layout.row_major((300, 64)), (300, 64), 2) is None  # 300 rows: over the 256 box limit


def test_registry_line_and_run_selection():
    entry = COPY[0]
    assert isinstance(entry, TmaTileCopy) and entry.name == "cp.async.bulk.tensor (TMA)"
    assert "whole tiles" in entry.reason(None, None, 8, True, None)


# -- lowering in the emulator -----------------------------------------------------------------------------------

def test_by_default_a_copy_outside_a_pipeline_has_no_tma(monkeypatch):
    monkeypatch.delenv("TILEAGENT_ENABLE_TMA", raising=False)
    k = tileagent.compile(_copy_kernel(64, 64, 32, 64), target="sim")
    assert "tma" not in k.get_ir("thread").lower() and "mbarrier" not in k.get_kernel_source()


def _pipelined_sum(M, K, bm=32, bk=64):
    """Row sums through a T.Pipelined loop without a T.gemm (a memory-bound pass, as the fusion drafter writes)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            S = T.alloc_shared((bm, bk), "float16")
            t = T.alloc_fragment((bm, bk), "float32")
            acc = T.alloc_fragment((bm,), "float32")
            part = T.alloc_fragment((bm,), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[bx * bm, k * bk], S)
                T.copy(S, t)
                T.reduce_sum(t, part, dim=1)
                for i in T.Parallel(bm):
                    acc[i] += part[i]
            T.copy(acc, B[bx * bm])

    return main


def test_default_mode_uses_tma_only_for_pipelines_that_feed_a_gemm(shared_example, monkeypatch):
    # unset: the example GEMM's pipeline loads by TMA (warp-specialized), a pipeline without a T.gemm keeps cp.async
    # and its code is what TILEAGENT_ENABLE_TMA=0 gives; =1 also moves the reduction's tiles by TMA
    monkeypatch.delenv("TILEAGENT_ENABLE_TMA", raising=False)
    gemm = shared_example("gemm_relu").matmul.fn(128, 64, 256, 128, 64, 64)
    assert "warp-specialized" in tileagent.compile(gemm, target="sim").get_ir("thread")
    default = tileagent.compile(_pipelined_sum(64, 256), target="sim")
    assert "TMA" not in default.get_ir("thread") and "cp.async" in default.get_kernel_source()
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")
    assert tileagent.compile(_pipelined_sum(64, 256), target="sim").get_kernel_source() == \
        default.get_kernel_source()
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "1")
    every = tileagent.compile(_pipelined_sum(64, 256), target="sim")
    assert "TMA 2d box 64x32" in every.get_ir("thread")
    a, b = torch.randn(64, 256, dtype=torch.float16), torch.full((64,), float("nan"))
    every(a, b)
    torch.testing.assert_close(b, a.float().sum(1), rtol=1e-3, atol=1e-3)


def test_an_unknown_mode_is_named(monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "yes")
    with pytest.raises(ValueError, match=r"TILEAGENT_ENABLE_TMA='yes': expected 0 \(off\), 1 \(every global -> shared "
                                         r"copy\) or unset"):
        tileagent.compile(_copy_kernel(64, 64, 32, 64), target="sim")


@pytest.mark.parametrize("dtype,layout,bn,swz", [
    ("float16", None, 64, "no swizzle"),
    ("float16", wgmma_operand, 64, "128B swizzle"),
    ("bfloat16", wgmma_operand, 32, "64B swizzle"),
    ("float16", wgmma_operand, 16, "32B swizzle"),
    ("float16", wgmma_operand, 128, "128B swizzle"),
    ("float32", wgmma_operand, 32, "128B swizzle"),
    ("float32", None, 8, "no swizzle"),
])
def test_single_copy_places_every_element(tma_on, dtype, layout, bn, swz):
    # ragged M and N: boxes past the tensor's end read zeros, which the store back leaves out
    M, N, bm = 72, 3 * bn - (bn // 2 if bn > 8 else 0), 32
    k = tileagent.compile(_copy_kernel(M, N, bm, bn, dtype, layout), target="sim")
    ir = k.get_ir("thread")
    assert f"TMA 2d box {min(bn, 128 // {'float32': 4}.get(dtype, 2)) if layout else bn}x{bm}" in ir
    assert swz in ir
    a = torch.randn(M, N).to(getattr(torch, dtype))
    b = torch.zeros_like(a)
    k(a, b)
    assert torch.equal(a, b)


def test_default_swizzle_tma_cannot_write_becomes_the_wgmma_layout(tma_on):
    # the sm_80 swizzle of 64-byte rows (chunk c ^ (r % 4)) is not TMA's (c ^ ((r >> 1) % 4)): the tile takes the
    # wgmma canonical 64B layout, which TMA writes
    k = tileagent.compile(_copy_kernel(64, 64, 64, 32, layout=swizzled), target="sim")
    assert "TMA 2d box 32x64 x1, 64B swizzle, 4096 B" in k.get_ir("thread")
    a = torch.randn(64, 64, dtype=torch.float16)
    b = torch.zeros_like(a)
    k(a, b)
    assert torch.equal(a, b)


def test_layout_tma_cannot_write_falls_back_with_a_note(tma_on):
    padded = lambda shape, e: Layout.row_major(shape, pad=8)  # noqa: E731 - 16 bytes of padding per row
    k = tileagent.compile(_copy_kernel(64, 64, 64, 32, layout=padded), target="sim")
    ir = k.get_ir("thread")
    assert "no TMA: cp.async.bulk.tensor (TMA): the shared layout of 'S' is not one TMA writes" in ir
    a = torch.randn(64, 64, dtype=torch.float16)
    b = torch.zeros_like(a)
    k(a, b)
    assert torch.equal(a, b)


def test_static_strides_that_break_the_rules_keep_the_old_path(tma_on):
    # rows of 36 halves are 72 bytes: not a multiple of 16, so no tensor map can describe A
    k = tileagent.compile(_copy_kernel(32, 36, 32, 32), target="sim")
    assert "no TMA: cp.async.bulk.tensor (TMA): the global strides of 'A' (32, 36) are not multiples of 16 bytes" \
        in k.get_ir("thread")


def test_a_tensor_the_kernel_writes_is_not_read_by_tma(tma_on):
    @T.prim_func
    def f(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            first = T.alloc_shared((64, 32), "float32")
            second = T.alloc_shared((64, 32), "float32")
            T.copy(X[0, 0], first)
            T.copy(first, Y[0, 0])
            T.copy(Y[0, 0], second)
            T.copy(second, Y[0, 32])

    kernel = tileagent.compile(f, target="sim")
    ir = kernel.get_ir("thread")
    # X is only read: TMA; Y is written by the kernel before it is read back: plain loads
    assert ir.count("TMA 2d box 32x64 x1, no swizzle, 8192 B on an mbarrier") == 1
    assert "no TMA: the kernel also writes 'Y' (generic stores that TMA's async-proxy reads are not ordered after)" \
        in ir
    x, y = torch.randn(64, 64), torch.full((64, 64), float("nan"))
    kernel(x, y)
    torch.testing.assert_close(y, torch.cat([x[:, :32], x[:, :32]], 1))


def test_sm80_target_has_no_tma(tma_on):
    k = tileagent.compile(_copy_kernel(64, 64, 32, 64), target="sim:sm_80")
    assert "TMA" not in k.get_ir("thread")


@pytest.mark.parametrize("wgmma", [False, True])
def test_gemm_relu_pipeline_on_mbarriers(shared_example, tma_on, monkeypatch, wgmma):
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "1" if wgmma else "0")  # wgmma is sm_90a's default; 0: mma.sync
    mod = shared_example("gemm_relu")
    M, N, K = 128, 56, 256  # 4 K tiles through 3 stages: barrier 0 goes through parities 0 and 1
    kernel = tileagent.compile(mod.matmul.fn(M, N, K, 128, 64, 64), target="sim")
    ir = kernel.get_ir("thread")
    assert "T.copy at line 34: TMA 2d box 64x128 x1, 128B swizzle, 16384 B on an mbarrier, 3 stages" in ir
    assert "T.copy at line 35: TMA 2d box 64x64 x1, 128B swizzle, 8192 B on an mbarrier, 3 stages" in ir
    # the loop runs once per block: stage and parity straight from the loop variable (no phase slot)
    assert "mbarrier.arrive.expect_tx tl_mbar[0], 24576 B" in ir and "mbarrier.arrive.expect_tx tl_mbar[1], 24576 B" \
        in ir
    assert "mbarrier.wait tl_mbar[ko % 3], parity ko // 3 % 2" in ir and "tl_tma_phase" not in ir
    src = kernel.get_kernel_source()
    assert "cp.async.commit_group" not in src and "cp.async.cg" not in src
    from tileagent.compiler.ir.stmt import For
    from tileagent.compiler.tir import AsyncProxyFence, Barrier

    body = kernel.unit.module.kernels[0].body
    at = next(n for n, x in enumerate(body) if isinstance(x, For) and isinstance(x.body[0], MbarrierWait))
    barriers = sum(isinstance(x, Barrier) for x in body[at].body)
    # overlapped wgmma, consumers writing no shared memory: one barrier per iteration (before the refill), the proxy
    # fence and barrier once before the loop; mma.sync: the barrier after the wait, before the refill
    assert barriers == 1
    assert (isinstance(body[at - 1], Barrier) and isinstance(body[at - 2], AsyncProxyFence)) == wgmma
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c.float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=2e-2)


def test_stage_parities_hand_checked(shared_example, tma_on):
    # 3 stages, 5 iterations, top-level loop (done = 0): iteration i waits on barrier i % 3 with parity (i // 3) % 2
    mod = shared_example("gemm_relu")
    kernel = tileagent.compile(mod.matmul.fn(128, 64, 320, 128, 64, 64), target="sim")
    from tileagent.compiler import emulate_tma

    seen = []
    real = emulate_tma.mbarrier_wait

    def spy(block, s):
        seen.append((int(block.uniform(block.ev(s.index), "i")), int(block.uniform(block.ev(s.parity), "p"))))
        real(block, s)

    from tileagent.compiler.emulate import _Block

    old = _Block._HANDLERS[MbarrierWait]
    _Block._HANDLERS[MbarrierWait] = spy
    try:
        a, b = torch.randn(128, 320, dtype=torch.float16), torch.randn(320, 64, dtype=torch.float16)
        c = torch.empty(128, 64, dtype=torch.float16)
        kernel(a, b, c)
    finally:
        _Block._HANDLERS[MbarrierWait] = old
    assert seen == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1)]


def test_pipeline_inside_a_loop_keeps_its_phases(tma_on):
    # the pipelined loop runs twice per block (3 iterations over 2 stages each time): the second run's parities
    # continue from the first's (the phase slot), else its waits would return early or hang
    M, N, K, bm, bn, bk = 64, 64, 192, 64, 64, 64

    @T.prim_func
    def k(A: T.Tensor((2, M, K), "float16"), B: T.Tensor((2, K, N), "float16"), C: T.Tensor((2, M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            As = T.alloc_shared((bm, bk), "float16")
            Bs = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(2):
                T.clear(acc)
                for ko in T.Pipelined(K // bk, num_stages=2):
                    T.copy(A[r, 0, ko * bk], As)
                    T.copy(B[r, ko * bk, 0], Bs)
                    T.gemm(As, Bs, acc)
                T.copy(acc, C[r, 0, 0])

    kernel = tileagent.compile(k, target="sim")
    ir = kernel.get_ir("thread")
    assert "3d box" in ir and "ko_done2 = tl_tma_phase[0]" in ir and "tl_tma_phase[0] = ko_done2 + 3" in ir
    a, b = torch.randn(2, M, K, dtype=torch.float16), torch.randn(2, K, N, dtype=torch.float16)
    c = torch.zeros(2, M, N)
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_no_room_for_the_mbarriers_keeps_cp_async(shared_example, tma_on, monkeypatch):
    # mla_decode on mma.sync: its 2-stage pipeline is planned to within 16 bytes of sm_90a's shared memory, and the
    # 4 mbarriers (2 single copies + 2 stages) need 32: the kernel is lowered again without TMA (not an E801)
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "0")
    mla = shared_example("mla_decode")
    kernel = tileagent.compile(mla.mla_decode.fn(1, 64, 100, variant="shared"), target="sim")
    ir = kernel.get_ir("thread")
    assert "no TMA: its mbarriers do not fit in shared memory next to the planned tiles (cp.async instead)" in ir
    assert "TMA 3d box" not in ir and "cp.async 16B" in ir
    assert kernel.unit.module.kernels[0].shared_bytes <= 227 * 1024


def test_emulator_rejects_a_wrong_byte_count(tma_on, monkeypatch):
    from tileagent.compiler.lower import tma as lower_tma

    real = lower_tma.issue

    def short(ctx, copies, barrier_index, fence=True):
        out = real(ctx, copies, barrier_index, fence)
        body = out[0].then_body
        bad = tuple(type(x)(x.barriers, x.index, x.bytes - 16, x.span) if type(x).__name__ ==
                    "MbarrierArriveExpectTx" else x for x in body)
        return [type(out[0])(out[0].cond, bad, (), out[0].span)]

    monkeypatch.setattr(lower_tma, "issue", short)
    k = tileagent.compile(_copy_kernel(64, 64, 32, 64), target="sim")
    a = torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(EmulationError, match="the loads deliver 4096 bytes, expect_tx announced 4080"):
        k(a, torch.zeros_like(a))


def test_emulator_rejects_reading_before_the_wait(tma_on, monkeypatch):
    from tileagent.compiler.lower import tma as lower_tma

    monkeypatch.setattr(lower_tma, "wait", lambda ctx, i, p, span=None: [])
    k = tileagent.compile(_copy_kernel(64, 64, 32, 64), target="sim")
    a = torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(EmulationError, match="never waited for"):
        k(a, torch.zeros_like(a))


# -- NVRTC (sm_90a) -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wgmma", [False, True])
def test_nvrtc_compiles_gemm_relu_with_tma(shared_example, tma_on, monkeypatch, wgmma):
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "1" if wgmma else "0")  # wgmma is sm_90a's default; 0: mma.sync
    kernel = tileagent.compile(shared_example("gemm_relu").matmul.fn(1024, 1024, 1024, 128, 128, 64),
                               target="cuda:sm_90a")
    src = kernel.get_kernel_source()
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    assert "const __grid_constant__ tl_tensor_map tmap_A_0" in src
    assert ("wgmma.mma_async" in src) == wgmma
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"
    maps = [tm for k in kernel.unit.module.kernels for tm in k.tensor_maps]
    # A 128 x 64: one 64 x 128 box; B 64 x 128 (256-byte rows): two 64 x 64 column blocks, 128B swizzle, both paths
    assert [(tm.box, tm.swizzle) for tm in maps] == [((64, 128), 128), ((64, 64), 128)]


def test_ptxas_reports_no_spills_or_serialization_with_tma(shared_example, tma_on):
    from tileagent.compiler.runtime.nvrtc import compile_log, ptxas_remarks

    kernel = tileagent.compile(shared_example("gemm_relu").matmul.fn(4096, 4096, 4096, 128, 128, 64),
                               target="cuda:sm_90a")
    log = compile_log(kernel.get_kernel_source(), "sm_90a", ("--ptxas-options=-v",))
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log and ptxas_remarks(log) == []


def test_spin_limit_turns_a_hang_into_a_trap(tma_on, monkeypatch):
    monkeypatch.setenv("TILEAGENT_MBAR_SPIN_LIMIT", "2e9")
    kernel = tileagent.compile(_copy_kernel(64, 64, 32, 64), target="cuda:sm_90a")
    src = kernel.get_kernel_source()
    assert "2000000000LL);" in src and "__trap();" in src
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_pass_config_disable_tma_lower(tma_on):
    k = tileagent.compile(_copy_kernel(64, 64, 32, 64), target="sim", pass_configs={"tl.disable_tma_lower": True})
    assert "TMA" not in k.get_ir("thread") and not any(x.tensor_maps for x in k.unit.module.kernels)


def test_nvrtc_compiles_flash_attention_with_tma(shared_example, tma_on, monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "1")
    fn = shared_example("flash_attn_fwd").flash_attn_fwd.fn(8, 32, 4096, 128)
    kernel = tileagent.compile(fn, target="cuda:sm_90a")
    ir = kernel.get_ir("thread")
    # Q (BSHD: box head dim x 1 head x 128 rows x 1 batch) once; K and V through the 2-stage pipeline; head dim 128
    # = two 128-byte column blocks each
    assert "T.copy at line 39: TMA 4d box 64x1x128x1 x2, 128B swizzle, 32768 B on an mbarrier" in ir
    assert "T.copy at line 48: TMA 4d box 64x1x64x1 x2, 128B swizzle, 16384 B on an mbarrier, 2 stages" in ir
    assert "T.copy at line 70: TMA 4d box 64x1x64x1 x2, 128B swizzle, 16384 B on an mbarrier, 2 stages" in ir
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_a_pipeline_inside_a_while_loop_counts_its_earlier_iterations(tma_on):
    """TileLang's stream-K GEMM runs its pipeline inside ``while``: 1, 2, then 3 iterations here. Its stage barriers'
    phases carry over from one execution to the next (6 uses of 2 barriers, odd per execution), so the pipeline counts
    the earlier executions' iterations in a phase slot; counted from 0 each time, the second execution waited on a
    parity its barrier had already passed (the program failed its own check on the H200; the emulator here: an arrive
    with none pending)."""

    @T.prim_func
    def main(A: T.Tensor((64, 192), "float16"), B: T.Tensor((192, 64), "float16"), C: T.Tensor((3, 64, 64), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            it = T.alloc_local((1,), "int32")
            it[0] = 0
            while it[0] < 3:
                T.clear(acc)
                for k in T.Pipelined(it[0] + 1, num_stages=2):
                    T.copy(A[0, k * 64], A_s)
                    T.copy(B[k * 64, 0], B_s)
                    T.gemm(A_s, B_s, acc)
                T.copy(acc, C[it[0], 0, 0])
                it[0] = it[0] + 1

    kernel = tileagent.compile(main, target="sim")
    assert "TMA 2d box" in kernel.get_ir("thread")
    a, b = torch.randn(64, 192, dtype=torch.float16), torch.randn(192, 64, dtype=torch.float16)
    c = torch.full((3, 64, 64), float("nan"))
    kernel(a, b, c)
    for n in range(3):
        torch.testing.assert_close(c[n], a[:, :64 * (n + 1)].float() @ b[:64 * (n + 1)].float(), rtol=1e-3, atol=1e-3)


def test_flash_attention_with_tma_in_the_emulator(shared_example, tma_on, monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "1")
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(fa.flash_attn_fwd.fn(1, 1, 72, 128, False, 64, 32, 2, 128), target="sim")
    assert kernel.get_ir("thread").count("TMA 4d box") == 3
    q, k, v = (torch.randn(1, 72, 1, 128, dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.testing.assert_close(o, fa.reference(q, k, v), rtol=1e-2, atol=1e-2)


# -- launch-time rules and the fallback ----------------------------------------------------------------------------

@pytest.mark.parametrize("ptr,dims,strides,box,swizzle,why", [
    (0x1000, (64, 64), (128,), (64, 32), 128, None),
    (0x1008, (64, 64), (128,), (64, 32), 128, "the global address 0x1008 is not 16-byte aligned"),
    (0x1000, (36, 64), (72,), (32, 32), 0, "the stride of dim 1 (innermost first) is 72 bytes, not a multiple of 16"),
    (0x1000, (64, 64), (128,), (64, 300), 128, "box dim 1 is 300, outside [1, 256]"),
    (0x1000, (64, 64), (128,), (4, 32), 0, "the inner box is 8 bytes, not a multiple of 16"),
    (0x1000, (128, 64), (256,), (128, 32), 128, "the inner box is 256 bytes, more than the 128-byte swizzle span"),
    (0x1000, (0, 64), (128,), (64, 32), 0, "dim 0 (innermost first) is 0, outside [1, 2**32]"),
    (0x1000, (64, 64), (1 << 40,), (64, 32), 0, "is 1099511627776 bytes, not a multiple of 16 below 2**40"),
])
def test_launch_rules(ptr, dims, strides, box, swizzle, why):
    from tileagent.compiler.dtypes import DType

    got = rt.problem(ptr, DType("float16"), dims, strides, box, swizzle)
    assert got == why if why is None else why in got


def _fake_backend(kernel, monkeypatch, launches):
    from tileagent.compiler.backends import CudaBackend

    class Loaded:
        def launch(self, k, values, stream=None, checked=True, tensor_maps=None):
            launches.append(("tma", k.name, tensor_maps))

    class Plain:
        def run(self, bound, env):
            launches.append(("fallback",))

    built = []
    backend = CudaBackend(kernel.unit.module, kernel.func, "", "sm_90a", cubin=b"\x7fELF",
                          fallback=lambda: built.append(1) or Plain())
    monkeypatch.setattr(backend, "load", lambda: Loaded())
    return backend, built


def test_fallback_decided_at_launch(tma_on, monkeypatch, caplog):
    encoded = []
    monkeypatch.setattr(rt, "encode", lambda *a: encoded.append(a) or bytes(range(128)))
    rt.clear_cache()
    K = T.dynamic("K")

    @T.prim_func
    def f(A: T.Tensor((64, K), "float16"), B: T.Tensor((64, K), "float16")):
        with T.Kernel(T.ceildiv(K, 64), threads=128) as bx:
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A[0, bx * 64], S)
            T.copy(S, B[0, bx * 64])

    kernel = tileagent.compile(f, target="cuda:sm_90a")
    assert [tm.box for k in kernel.unit.module.kernels for tm in k.tensor_maps] == [(64, 64)]
    launches = []
    backend, built = _fake_backend(kernel, monkeypatch, launches)
    good = torch.zeros(64, 128, dtype=torch.float16)
    backend.run({kernel.func.params[0]: good, kernel.func.params[1]: good}, {f.dynamic_vars[0]: 128})
    arg = launches[-1][2][0]
    assert launches[-1][0] == "tma" and bytes(arg) == bytes(range(128)) and isinstance(arg, ctypes.Array)
    assert encoded[-1][2:] == ((128, 64), (256,), (64, 64), 0) and encoded[-1][1] == good.data_ptr()
    backend.run({kernel.func.params[0]: good, kernel.func.params[1]: good}, {f.dynamic_vars[0]: 128})
    assert len(encoded) == 1 and rt.cache_info()["hits"] == 1  # cached per (pointer, dtype, dims, strides, box)
    odd = torch.zeros(64, 100, dtype=torch.float16)  # rows of 200 bytes: no tensor map
    with caplog.at_level(logging.WARNING, logger="tileagent.compiler"):
        backend.run({kernel.func.params[0]: odd, kernel.func.params[1]: odd}, {f.dynamic_vars[0]: 100})
        backend.run({kernel.func.params[0]: odd, kernel.func.params[1]: odd}, {f.dynamic_vars[0]: 100})
    assert launches[-2:] == [("fallback",), ("fallback",)] and built == [1]
    msgs = [r.getMessage() for r in caplog.records if "TMA not used" in r.getMessage()]
    assert len(msgs) == 1 and "the stride of dim 1 (innermost first) is 200 bytes" in msgs[0]
    view = torch.zeros(64 * 128 + 1, dtype=torch.float16)[1:].view(64, 128)  # address 2 bytes past 16
    backend.run({kernel.func.params[0]: view, kernel.func.params[1]: good}, {f.dynamic_vars[0]: 128})
    assert launches[-1] == ("fallback",)


def test_fallback_variant_has_no_tma(tma_on):
    from dataclasses import replace

    from tileagent.compiler.jit import _build
    from tileagent.compiler.passes import Options
    from tileagent.compiler.target import for_arch

    target = for_arch("sm_90a")
    unit, backend = _build(_copy_kernel(64, 64, 32, 64), replace(target, features=target.features - {"tma"}),
                           Options())
    assert "cp.async.bulk" not in unit.source and not any(k.tensor_maps for k in unit.module.kernels)


@pytest.mark.gpu
def test_gpu_tma_copies_gemm_and_fallback(tma_on, shared_example, caplog):
    """On an sm_90 GPU: TMA copies for each swizzle read back exactly, gemm_relu's pipeline on mbarriers matches torch,
    and a call whose row stride is not a multiple of 16 bytes runs the variant without TMA (logged), correctly."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    for layout, bn in ((None, 64), (wgmma_operand, 64), (wgmma_operand, 32), (wgmma_operand, 16),
                       (wgmma_operand, 128)):
        k = tileagent.compile(_copy_kernel(200, 3 * bn - bn // 2, 64, bn, layout=layout), target="cuda")
        assert "TMA 2d box" in k.get_ir("thread")
        a = torch.randn(200, 3 * bn - bn // 2, dtype=torch.float16, device="cuda")
        b = torch.zeros_like(a)
        k(a, b)
        torch.cuda.synchronize()
        assert torch.equal(a, b), (layout, bn)
    mod = shared_example("gemm_relu")
    k = tileagent.compile(mod.matmul.fn(1000, 776, 520, 128, 128, 64), target="cuda")
    assert "16384 B on an mbarrier, 3 stages" in k.get_ir("thread")
    a = torch.randn(1000, 520, dtype=torch.float16, device="cuda")
    b = torch.randn(520, 776, dtype=torch.float16, device="cuda")
    c = torch.empty(1000, 776, dtype=torch.float16, device="cuda")
    k(a, b, c)
    torch.testing.assert_close(c.float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=5e-2)
    N = T.dynamic("N")

    @T.prim_func
    def f(A: T.Tensor((64, N), "float16"), B: T.Tensor((64, N), "float16")):
        with T.Kernel(T.ceildiv(N, 64), threads=128) as bx:
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A[0, bx * 64], S)
            T.copy(S, B[0, bx * 64])

    k = tileagent.compile(f, target="cuda")
    for n in (100, 128):  # 200-byte rows: the variant without TMA; 256-byte rows: TMA
        a = torch.randn(64, n, dtype=torch.float16, device="cuda")
        b = torch.zeros_like(a)
        with caplog.at_level(logging.WARNING, logger="tileagent.compiler"):
            k(a, b)
        torch.cuda.synchronize()
        assert torch.equal(a, b), n
    assert any("TMA not used for this call" in r.getMessage() for r in caplog.records)
