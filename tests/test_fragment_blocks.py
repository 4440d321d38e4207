"""A fragment read in blocks inside T.Parallel: ``x[i, jj * 4 + j]`` with ``jj`` an enclosing serial variable and j
a loop variable over 4 values, as TileLang's mHC pre-block kernel sums the squares of its TF32 GEMM operand
(deepseek_mhc/example_mhc_pre.py; L004 before). The loop runs on the first block of x's layout, which must repeat
itself in other registers from block to block (compiler/layout/infer.py, ``shifted_loop_var``)."""

import inspect

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CompileError
from tests.test_gemm_sim import MMA


def _gemm_sqrsum(tokens: int, hidden: int, tb: int = 32, hb: int = 64, n3: int = 24):
    @T.prim_func
    def main(x: T.Tensor((tokens, hidden), "bfloat16"), fn: T.Tensor((n3, hidden), "float32"),
             out: T.Tensor((tokens, n3), "float32"), sq: T.Tensor((tokens,), "float32")):
        with T.Kernel(T.ceildiv(tokens, tb)) as px:
            acc = T.alloc_fragment((tb, 32), "float32")
            part = T.alloc_fragment((tb, 4), "float32")
            T.clear(acc)
            T.clear(part)
            for pz in T.Pipelined(hidden // hb, num_stages=2):
                xs = T.alloc_shared((tb, hb), "bfloat16")
                fs = T.alloc_shared((32, hb), "float32")
                T.copy(x[px * tb, pz * hb], xs)
                T.copy(fn[0, pz * hb], fs)
                x16 = T.alloc_fragment((tb, hb), "bfloat16")
                T.copy(xs, x16)
                xf = T.alloc_fragment((tb, hb), "float32")
                T.copy(x16, xf)
                for jj in T.serial(hb // 4):
                    for i, j in T.Parallel(tb, 4):
                        part[i, j] += xf[i, jj * 4 + j] * xf[i, jj * 4 + j]
                T.gemm(xf, fs, acc, transpose_B=True)
            s = T.alloc_fragment(tb, "float32")
            T.reduce_sum(part, s)
            for i in T.Parallel(tb):
                sq[px * tb + i] = s[i]
            for i, j in T.Parallel(tb, 32):
                if j < n3:
                    out[px * tb + i, j] = acc[i, j]

    return main


def test_a_gemm_operand_read_in_blocks_of_four_sums_its_squares():
    """x_frag takes the TF32 A-operand layout of its gemm (4 threads along K, the rest registers); the squares loop
    runs on that layout's first 4 columns and reads block jj from registers jj // 2 and jj % 2. Exact sums of
    squares and a TF32 product, on the emulator (the lowered code) and on the CPU interpreter."""
    func = _gemm_sqrsum(64, 192)
    kernel = tileagent.compile(func, target="sim", pass_configs=MMA)
    loops = [f for loop, f in kernel.layouts().loops.items() if loop.extents and len(loop.extents) == 2
             and [int(e) for e in loop.extents] == [32, 4]]
    assert loops and [lv.is_thread for lv in loops[0].dims[1]] == [True]
    torch.manual_seed(0)
    x, fn = torch.randn(64, 192).bfloat16(), torch.randn(24, 192)
    ref_sq, ref_out = (x.float() ** 2).sum(1), x.float() @ fn.T
    for k in (kernel, tileagent.compile(func, target="cpu")):
        out, sq = torch.full((64, 24), float("nan")), torch.full((64,), float("nan"))
        k(x, fn, out, sq)
        torch.testing.assert_close(sq, ref_sq, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(out, ref_out, rtol=2e-2, atol=5e-2)  # TF32 inputs
    source = tileagent.compile(func, target="cuda:sm_90a", pass_configs=MMA).get_kernel_source()
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in source
    assert tileagent.compile(func, target="cuda:sm_90a", pass_configs=MMA).cubin()[:4] == b"\x7fELF"


def test_blocks_of_a_fragment_spread_over_threads_are_L004():
    """A copied tile's default layout gives each block of 4 columns to other threads: no thread holds x[i, jj*4 + j]
    for every jj, and the error says so at the read, with the layout and a hint."""
    @T.prim_func
    def f(A: T.Tensor((32, 64), "float32"), Y: T.Tensor((32, 4), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((32, 64), "float32")
            s = T.alloc_fragment((32, 4), "float32")
            T.copy(A, x)
            T.clear(s)
            for jj in T.serial(16):
                for i, j in T.Parallel(32, 4):
                    s[i, j] += x[i, jj * 4 + j]  # <- read
            T.copy(s, Y)

    src, start = inspect.getsourcelines(test_blocks_of_a_fragment_spread_over_threads_are_L004)
    line = start + next(k for k, text in enumerate(src) if "# <- read" in text)
    with pytest.raises(CompileError) as info:
        tileagent.compile(f, target="sim")
    err = info.value
    assert err.code == "L004" and err.span.line == line
    assert err.message.startswith("fragment 'x' is read in blocks of 4 along dim 1 (a loop variable plus a multiple "
                                  "of 4), but its layout (line ")
    assert "does not hold every block in the same threads" in err.message and "T.alloc_shared" in err.hint
    a = torch.randn(32, 64)  # the CPU interpreter has no layouts: it runs the program as written
    torch.testing.assert_close(tileagent.compile(f, out_idx=[1], target="cpu")(a), a.view(32, 16, 4).sum(1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gemm_operand_read_in_blocks_of_four_on_the_gpu():
    func = _gemm_sqrsum(256, 1024, hb=256)
    x, fn = torch.randn(256, 1024, device="cuda").bfloat16(), torch.randn(24, 1024, device="cuda")
    out, sq = torch.full((256, 24), float("nan"), device="cuda"), torch.full((256,), float("nan"), device="cuda")
    tileagent.compile(func)(x, fn, out, sq)
    torch.testing.assert_close(sq, (x.float() ** 2).sum(1), rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(out, x.float() @ fn.T, rtol=2e-2, atol=0.2)  # TF32 inputs, 1024-long sums
