"""``T.tfloat32`` (TensorFloat-32, TileLang's dtype for TF32 tensor-core operands): float32 storage whose values keep
10 mantissa bits. A value entering a tfloat32 buffer (a store, a cast, a copy from float32) and the result of tfloat32
arithmetic are rounded to nearest, ties to even, on the interpreter, the SIMT emulator and in the CUDA source
(``tl_round_tf32``); a gemm of tfloat32 operands runs on TF32 tensor cores (mma.sync m16n8k8)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import nvrtc_available, write_source
from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.intrinsics import round_tf32

PROGRAM = """\
    import tilelang
    import tilelang.language as T


    @tilelang.jit(out_idx=[1])
    def tf32(gemm=False):
        @T.prim_func
        def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((64, 64), T.tfloat32)
                f = T.alloc_fragment((64, 64), T.tfloat32)
                acc = T.alloc_fragment((64, 64), T.float32)
                T.copy(X, s)
                T.copy(s, f)
                if gemm:
                    T.gemm(f, s, acc, clear_accum=True)
                else:
                    for i, j in T.Parallel(64, 64):
                        acc[i, j] = f[i, j] * f[i, j] + T.cast(X[i, j] * 3.0, T.tfloat32)
                T.copy(acc, Y)
        return main
    """


def _tf32(x: float) -> float:
    """``x`` rounded to 11 significant bits, ties to even (Python's round), computed apart from round_tf32."""
    if x == 0 or not math.isfinite(x):
        return x
    m, e = math.frexp(x)
    return math.ldexp(round(m * 2048), e - 11)


def test_round_tf32_keeps_ten_mantissa_bits_to_nearest_even():
    x = torch.randn(4096) * 10.0 ** torch.randint(-30, 30, (4096,)).float()
    ties = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1 + 2**-11 + 2**-20, 2**-130])
    x = torch.cat([x, ties, torch.tensor([float("inf"), float("-inf")])])
    assert round_tf32(x).tolist() == [_tf32(v) for v in x.tolist()]
    assert round_tf32(ties[:3]).tolist() == [1.0, 1 + 2**-9, -1.0] and math.isnan(float(round_tf32(
        torch.tensor([float("nan")]))))


def test_tfloat32_buffers_and_casts_round_on_every_target(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "tf32.py", PROGRAM))
    x = torch.randn(64, 64)
    r = torch.tensor([_tf32(v) for v in x.flatten().tolist()]).reshape(64, 64)
    sq = torch.tensor([_tf32(v) for v in (r * r).flatten().tolist()]).reshape(64, 64)
    three = torch.tensor([_tf32(v) for v in (x * 3.0).flatten().tolist()]).reshape(64, 64)
    expect = torch.tensor([_tf32(v) for v in (sq + three).flatten().tolist()]).reshape(64, 64)
    for target in ("cpu", "sim"):
        y = tilelang.compile(ns["tf32"].get_tir(), out_idx=[1], target=target)(x)
        assert torch.equal(y, expect), target
    if nvrtc_available():
        cuda = tilelang.compile(ns["tf32"].get_tir(), out_idx=[1], target="cuda:sm_90a")
        assert "tl_round_tf32(" in cuda.get_kernel_source() and cuda.cubin()[:4] == b"\x7fELF"


def test_a_gemm_of_tfloat32_operands_runs_on_the_interpreter_and_on_tf32_mma(tilelang, tmp_path):
    """The interpreter multiplies the rounded operands and accumulates in float32, as a TF32 tensor core does; the
    GPU lowering runs it on mma.sync m16n8k8 .tf32 (A in registers, B from shared memory), and the SIMT emulator of
    that lowering gives the same product."""
    ns = load_script(write_source(tmp_path, "tf32.py", PROGRAM))
    x = torch.randn(64, 64)
    r = round_tf32(x)
    y = tilelang.compile(ns["tf32"].get_tir(True), out_idx=[1], target="cpu")(x)
    torch.testing.assert_close(y, r @ r, rtol=1e-5, atol=1e-4)
    sim = tilelang.compile(ns["tf32"].get_tir(True), out_idx=[1], target="sim")
    torch.testing.assert_close(sim(x), r @ r, rtol=1e-5, atol=1e-4)
    cuda = tilelang.compile(ns["tf32"].get_tir(True), out_idx=[1], target="cuda:sm_80")
    assert "tl_mma_m16n8k8_tf32(" in cuda.get_kernel_source()
