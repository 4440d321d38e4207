"""The tile-op registry (compiler.tileops) as a specification: every tile statement has exactly one op class, each
class states what it reads and writes (barrier insertion follows it), how it constrains layouts, and diagnostics
name ops the way the user wrote them."""

import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Load
from tileagent.compiler.ir.stmt import (AtomicAddTile, Buffer, Copy, Fill, Gemm, Parallel, Reduce, Region)
from tileagent.compiler.tileops import REGISTRY, TILE_OP_NODES, describe, op_for
from tileagent.compiler.tileops.base import TileOp
from tileagent.compiler.tileops.cumsum import CumSum


def _buf(name, shape, scope, dtype="float32"):
    return Buffer(name, shape, DType(dtype), scope)


G = _buf("G", (64, 64), "global")
S = _buf("S", (64, 64), "shared", "float16")
S2 = _buf("S2", (64, 64), "shared", "float16")
F = _buf("F", (64, 64), "fragment")
R = _buf("R", (64,), "fragment")


def test_every_tile_statement_has_one_op_class():
    from tileagent.compiler.tileops.warp_mma import WarpLdMatrix, WarpMma
    from tileagent.compiler.tileops.wgmma_gemm import WaitWgmma, WgmmaGemm

    assert set(TILE_OP_NODES) == {Copy, Gemm, Reduce, Fill, AtomicAddTile, CumSum, WgmmaGemm, WaitWgmma, WarpMma,
                                  WarpLdMatrix}
    for node, op in REGISTRY.items():
        assert isinstance(op, TileOp) and op.node is node
        assert op.layout_level in ("strict", "common", "free")
    assert op_for(Parallel((), (), ())) is None
    assert describe(Reduce("max", F, R, 1, True)) == "T.reduce_max"
    assert describe(Parallel((), (), ())) == "T.Parallel loop"
    assert REGISTRY[Gemm].layout_level == "strict" and REGISTRY[Copy].layout_level == "common"
    assert REGISTRY[Fill].layout_level == "free" and REGISTRY[CumSum].layout_level == "free"


def test_effects_name_what_each_op_reads_and_writes():
    w = Region.whole
    copy = Copy(Region(G, (Load(_buf("idx", (1,), "shared", "int32"), (0,), DType("int32")), 0), (64, 64)), w(S))
    e = op_for(copy).effects(copy)
    assert e.writes == {S} and {G} < e.reads and any(b.name == "idx" for b in e.reads)  # index loads are reads
    gemm = Gemm(w(S), w(S2), w(F), False, False, 0, False)
    e = op_for(gemm).effects(gemm)
    assert e.reads == {S, S2, F} and e.writes == {F}  # accumulating into C reads it
    cleared = Gemm(w(S), w(S2), w(F), False, False, 0, True)
    assert op_for(cleared).effects(cleared).reads == {S, S2}
    fill = Fill(w(F), Load(S, (0, 0), S.dtype))
    e = op_for(fill).effects(fill)
    assert e.writes == {F} and e.reads == {S}
    red = Reduce("sum", F, R, 1, False)
    assert op_for(red).effects(red).reads == {F, R}  # clear=False combines with the old value
    cs = CumSum(S, S2, 0, False)
    assert op_for(cs).effects(cs).reads == {S} and op_for(cs).effects(cs).writes == {S2}
    from tileagent.compiler.tileops.warp_mma import WarpMma

    a, b, c = _buf("a", (8,), "local", "float16"), _buf("b", (4,), "local", "float16"), _buf("c", (4,), "local")
    mma = WarpMma(c, (0, 1, 2, 3), a, tuple(range(8)), b, (0, 1, 2, 3), "float16")
    assert op_for(mma).effects(mma).reads == {a, b, c} and op_for(mma).effects(mma).writes == {c}


def test_a_fill_reading_shared_memory_waits_for_the_copy_that_wrote_it():
    """The fill's value is a shared element another thread wrote: barrier insertion sees the read (effects) and
    puts a barrier in between; the emulator's race detector would flag the kernel otherwise."""

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((64,), "float32")
            f = T.alloc_fragment((64,), "float32")
            T.copy(A, s)
            T.fill(f, s[63])
            T.copy(f, B)

    kernel = tileagent.compile(main, target="sim")
    a, b = torch.randn(64), torch.zeros(64)
    kernel(a, b)
    assert torch.equal(b, a[63].expand(64))
    ir = kernel.get_ir("thread")
    assert ir.index("T.sync_threads()") < ir.index("f[k1] = s[63]")  # the barrier precedes the fill


def test_checker_names_the_op_as_written():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 64), "float32")
            y = T.alloc_fragment((64,), "float32")
            for i in T.Parallel(64):
                T.reduce_max(x, y, dim=1)

    import pytest

    from tileagent.compiler.diagnostics import ScopeError

    with pytest.raises(ScopeError) as info:
        tileagent.compile(main, target="cpu")
    assert info.value.code == "E502" and "T.reduce_max inside T.Parallel" in str(info.value)
