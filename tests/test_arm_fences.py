"""The fences of a warp group's arm (compiler/lower/arm_fences.py) on hand-made thread IR: which wgmma fences keep
the group's barrier, which become a reader-side proxy fence, and which proxy fences before an arrive go."""

from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Const, Var
from tileagent.compiler.ir.stmt import Buffer, For, Store
from tileagent.compiler.lower.arm_fences import trim
from tileagent.compiler.tir import (AsyncProxyFence, Barrier, MbarrierArrive, MbarrierWait, TmaLoad, VecCopy,
                                    WgmmaFence)

BARS = Buffer("bars", (4,), DType("uint64"), "shared")
S = Buffer("S", (64,), DType("float16"), "shared")
R = Buffer("r", (8,), DType("float16"), "local")
ZERO = Const(0, DType("int32"))


def _kinds(stmts) -> list:
    """Each statement as a short name: wgmma fences by level, the rest by type."""
    out = []
    for s in stmts:
        if isinstance(s, WgmmaFence):
            out.append("sync" if s.sync else "bare")
        elif isinstance(s, For):
            out.append(["for", _kinds(s.body)])
        else:
            out.append(type(s).__name__)
    return out


def _write():
    return Store(S, (ZERO,), Const(1.0, DType("float16")))


def _arrive():
    return [AsyncProxyFence(), MbarrierArrive(BARS, ZERO, per_thread=True)]


def test_a_wgmma_keeps_the_barrier_only_after_the_groups_own_shared_writes():
    wait = MbarrierWait(BARS, ZERO, ZERO)
    stmts = [WgmmaFence(), wait, WgmmaFence(), WgmmaFence(), _write(), WgmmaFence(), *_arrive(), wait, *_arrive(),
             WgmmaFence()]
    assert _kinds(trim(stmts)) == [
        "sync",  # the arm's entry: whatever came before is unknown
        "MbarrierWait", "AsyncProxyFence", "bare",  # data another group delivered: a fence of each reader
        "bare",  # a second gemm in a row
        "Store", "sync",  # the group's own write: proxy fence and the group's barrier
        "MbarrierArrive",  # nothing written since that fence: no fence before the arrive
        "MbarrierWait", "MbarrierArrive", "AsyncProxyFence", "bare"]


def test_the_proxy_fence_before_an_arrive_stays_after_a_write_and_a_loop_carries_the_writes_around():
    """A write at the end of a loop body reaches the next iteration's first wgmma (the fixed point over the loop)
    and an arrive right after it keeps its fence; a vector copy into registers is no shared write."""
    body = (WgmmaFence(), VecCopy(R, ZERO, S, ZERO, 8), *_arrive(), _write(), *_arrive())
    out = trim([WgmmaFence(), For(Var("k", DType("int32")), 0, 4, 1, "serial", body)])
    assert _kinds(out) == ["sync", ["for", ["sync", "VecCopy", "MbarrierArrive", "Store", "AsyncProxyFence",
                                            "MbarrierArrive"]]]


def test_a_barrier_after_fenced_writes_synchronizes_the_group_and_unknown_statements_count_as_writes():
    tma = TmaLoad.__new__(TmaLoad)  # TMA writes through the async proxy: no generic write to fence
    stmts = [WgmmaFence(), _write(), AsyncProxyFence(), Barrier(), WgmmaFence(), tma, WgmmaFence()]
    assert _kinds(trim(stmts)) == ["sync", "Store", "AsyncProxyFence", "Barrier", "bare", "TmaLoad", "bare"]
    assert _kinds(trim([WgmmaFence(sync=False), object(), WgmmaFence()]))[-1] == "sync"


def test_only_a_wait_on_a_barrier_cp_async_arrives_on_needs_a_reader_fence():
    """A barrier that TMA completes (or that threads arrive on after fencing their writes) delivers data the async
    proxy sees: the wgmma after its wait needs no fence of its own; one that cp.async copies arrive on does (their
    writes are generic and no writer can fence them). A wait the program did not write counts as such a barrier."""
    tma_set, cp_set = object(), object()
    tma_wait = MbarrierWait(BARS, ZERO, ZERO, label=(tma_set, ZERO))
    cp_wait = MbarrierWait(BARS, Const(1, DType("int32")), ZERO, label=(cp_set, ZERO))
    stmts = [WgmmaFence(), tma_wait, WgmmaFence(), cp_wait, WgmmaFence(), MbarrierWait(BARS, ZERO, ZERO), WgmmaFence()]
    assert _kinds(trim(stmts, frozenset({id(cp_set)}))) == [
        "sync", "MbarrierWait", "bare", "MbarrierWait", "AsyncProxyFence", "bare", "MbarrierWait", "AsyncProxyFence",
        "bare"]
    assert _kinds(trim(stmts)) == [  # no sets known: every wait as before
        "sync", "MbarrierWait", "AsyncProxyFence", "bare", "MbarrierWait", "AsyncProxyFence", "bare",
        "MbarrierWait", "AsyncProxyFence", "bare"]


def test_the_programs_own_proxy_fence_makes_the_arrives_fence_redundant():
    """TileLang's FlashMLA writes its P tile, calls T.fence_proxy_async() and arrives: one fence, not two."""
    from tileagent.compiler.language.cp_async import fence_proxy_async

    out = trim([WgmmaFence(), _write(), fence_proxy_async(), *_arrive()])
    assert _kinds(out) == ["sync", "Store", "Evaluate", "MbarrierArrive"]


def test_a_wgmma_keeps_the_barrier_only_for_writes_to_what_it_reads():
    """TileLang's FlashMLA: the group writes its row maximum (a shared buffer its own wgmmas never read), then runs
    P @ V from its registers and the TMA-fed V: no barrier there; the write still synchronizes the group before a
    wgmma that reads it, and a fence whose wgmmas the module cannot see keeps its barrier."""
    from tileagent.compiler.tir import Wgmma, WgmmaCommit

    A = Buffer("A", (64, 64), DType("float16"), "shared")
    B = Buffer("B", (64, 64), DType("float16"), "shared")
    acc = Buffer("acc", (32,), DType("float32"), "local")

    def gemm(a):
        return [WgmmaFence(), Wgmma(acc, (), a, ZERO, 0, 0, 128, B, ZERO, 0, 0, 128, "k", 64, True, "float16"),
                WgmmaCommit()]

    stmts = [WgmmaFence(), _write(), *gemm(A), *gemm(S), WgmmaFence()]  # _write stores into S
    assert _kinds(trim(stmts)) == ["sync", "Store", "bare", "Wgmma", "WgmmaCommit", "sync", "Wgmma", "WgmmaCommit",
                                   "bare"]
    stmts = [WgmmaFence(), _write(), WgmmaFence()]  # no wgmma after it in view: every buffer may be read
    assert _kinds(trim(stmts)) == ["sync", "Store", "sync"]
