"""The split ldmatrix addresses of swizzled shared tiles (compiler.targets.swizzle_address) equal the addresses the
lowering wrote, for every thread, every value of the unrolled loops around them and several pipeline stages. The
kernels run on mma.sync (sm_90a with tl.disable_wgmma): wgmma reads its operands through descriptors, no ldmatrix."""

import itertools

import numpy as np
import pytest

import tileagent
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import BinOp, Cast, Const, Var, make_binop
from tileagent.compiler.ir.stmt import For
from tileagent.compiler.targets.swizzle_address import SMEM_ALIGN, split_swizzled_index
from tileagent.compiler.tir import LANE, THREAD, WARP, LdMatrix
from tests.test_gemm_sim import MMA, _gemm  # MMA: tl.disable_wgmma (ldmatrix reads belong to mma.sync)
import tileagent.language as T

_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod, "^": np.bitwise_xor}


def _eval(e, env):
    if isinstance(e, (int, np.ndarray)):
        return np.int64(e) if isinstance(e, int) else e
    if isinstance(e, Const):
        return np.int64(int(e.value))
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Cast):
        return _eval(e.value, env)
    assert isinstance(e, BinOp) and e.op in _OPS, e
    return _OPS[e.op](_eval(e.a, env), _eval(e.b, env))


def _ldmatrix_with_loops(stmts, loops=()):
    for s in stmts:
        if isinstance(s, LdMatrix):
            yield s, loops
        body = getattr(s, "body", None) or ()
        inner = loops + ((s,) if isinstance(s, For) else ())
        yield from _ldmatrix_with_loops(body, inner)
        for name in ("then_body", "else_body"):
            yield from _ldmatrix_with_loops(getattr(s, name, None) or (), loops)


def _check_kernel(kernel) -> int:
    """Asserts every split address equals the original; returns how many ldmatrix addresses were split."""
    split_count = 0
    for k in kernel.module.kernels:
        n = k.num_threads
        for ld, loops in _ldmatrix_with_loops(k.body):
            unrolled = {f.var: (f.start, f.start + f.extent - 1) for f in loops if f.kind == "unroll"
                        and isinstance(f.start, int) and isinstance(f.extent, int) and f.step == 1}
            ranges = {THREAD: (0, n - 1), LANE: (0, 31), WARP: (0, (n - 1) // 32), **unrolled}
            off, eb = k.shared_offsets[ld.src], ld.src.dtype.bytes
            split = split_swizzled_index(ld.src_index, ranges, set(unrolled), eb, off)
            if split is None:
                continue
            split_count += 1
            others = [f.var for f in loops if f.var not in unrolled]
            axes = [np.arange(n)] + [np.arange(lo, hi + 1) for lo, hi in unrolled.values()]
            axes += [np.arange(5)] * len(others)  # loop variables that stay variables: the pipeline stage and such
            grids = np.meshgrid(*axes, indexing="ij")
            env = {THREAD: grids[0], LANE: grids[0] % 32, WARP: grids[0] // 32}
            env.update(zip(list(unrolled) + others, grids[1:]))
            arena = 3 * SMEM_ALIGN
            want = (arena + off + eb * _eval(ld.src_index, env)) % 2 ** 32
            got = arena + off + eb * _eval(split.thread, env)
            got = ((got + eb * _eval(split.runtime, env)) ^ (eb * _eval(split.xor_const, env))) + \
                eb * _eval(split.const, env)
            np.testing.assert_array_equal(got % 2 ** 32, want, err_msg=f"{k.name}: ldmatrix into {ld.dst.name}")
    return split_count


@pytest.mark.parametrize("schedule", [(128, 32, 2, 128), (128, 64, 2, 256), (64, 64, 3, 128)])
def test_flash_attention_addresses_split_and_equal(shared_example, schedule):
    bm, bn, stages, threads = schedule
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(fa.flash_attn_fwd.fn(1, 2, 256, 128, False, block_M=bm, block_N=bn,
                                                    num_stages=stages, threads=threads), out_idx=[3], target="sim",
                               pass_configs=MMA)
    assert _check_kernel(kernel) >= 3  # Q (or hoisted Q), K and V tiles


@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product((False, True), repeat=2)))
def test_gemm_addresses_split_and_equal(trans_a, trans_b):
    kernel = tileagent.compile(_gemm(128, 128, 128, 64, 64, 64, trans_a, trans_b, "float16",
                                     T.GemmWarpPolicy.Square, 3), target="sim", pass_configs=MMA)
    assert _check_kernel(kernel) >= 2


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "int8"])
def test_8bit_gemm_addresses_split_and_equal(dtype):
    """mma.sync m16n8k32 (8-bit operands, K-major): ldmatrix reads rows of 16 one-byte elements of swizzled tiles;
    the split (element size 1) still equals the lowered address for every thread and stage."""
    acc = "int32" if dtype == "int8" else "float32"

    @T.prim_func
    def main(A: T.Tensor((128, 256), dtype), B: T.Tensor((128, 256), dtype), C: T.Tensor((128, 128), acc)):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 64), dtype)
            B_s = T.alloc_shared((128, 64), dtype)
            C_l = T.alloc_fragment((128, 128), acc)
            T.clear(C_l)
            for k in T.Pipelined(4, num_stages=3):
                T.copy(A[0, k * 64], A_s)
                T.copy(B[0, k * 64], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C)

    kernel = tileagent.compile(main, out_idx=[2], target="sim")
    assert _check_kernel(kernel) >= 2


def test_mla_decode_addresses_equal(shared_example):
    mod = shared_example("mla_decode")
    for variant in ("shared", "fragment"):
        _check_kernel(tileagent.compile(mod.mla_decode.fn(2, 128, 256, variant=variant), out_idx=[4], target="sim",
                                        pass_configs=MMA))


def test_no_split_when_a_term_outside_the_swizzle_would_carry_into_the_xor_bits():
    from tileagent.compiler.layout.layout import Swizzle

    kb, row = Var("kb", DType("int32")), Var("row", DType("int32"))
    sw = Swizzle(3, 3, 4)
    ranges = {THREAD: (0, 127), kb: (0, 7), row: (0, 7)}
    ok = sw.apply(make_binop("+", make_binop("*", row, 128), make_binop("*", kb, 16)))
    assert split_swizzled_index(ok, ranges, {kb}, 2, 0) is not None
    odd = make_binop("+", ok, make_binop("*", THREAD, 8))  # 8 < 2**7: the add would carry into the XORed bits
    assert split_swizzled_index(odd, ranges, {kb}, 2, 0) is None
    assert split_swizzled_index(ok, ranges, {kb}, 2, 64) is None  # tile not aligned to the XORed bits
