"""``T.atomic_add/max/min(dst[i], value, return_prev=True)``: the call is also the element's value before this thread's
update (CUDA's ``atomicAdd`` result), in per-thread code (TileLang's top-k selector claims output slots with
``pos = T.atomic_add(s_histogram[bin + 1], 1, return_prev=True)``). The CPU interpreter and the SIMT emulator apply
one statement's updates in thread order; the CUDA stores what the atomic returns."""

import inspect

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CompileError
from tests.conftest import nvrtc_available

N, BINS, THREADS = 300, 8, 64


def _scatter(offset=0):
    """Each element claims the next slot of its bin: a stable-free counting-sort scatter."""
    @T.prim_func
    def scatter(X: T.Tensor((N,), "int32"), Pos: T.Tensor((N,), "int32"), Cnt: T.Tensor((BINS,), "int32")):
        with T.Kernel(1, threads=THREADS) as bx:
            tx = T.get_thread_binding()
            hist = T.alloc_shared((BINS,), "int32")
            pos = T.alloc_var("int32")
            T.fill(hist, 0)
            T.sync_threads()
            for s in T.serial(T.ceildiv(N, THREADS)):
                i = s * THREADS + tx
                if i < N:
                    pos = T.atomic_add(hist[X[i]], 1, return_prev=True) + offset
                    Pos[i] = pos
            T.sync_threads()
            if tx < BINS:
                Cnt[tx] = hist[tx]
    return scatter


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_fetch_and_add_hands_each_thread_its_own_slot(target):
    torch.manual_seed(0)
    x = torch.randint(0, BINS, (N,), dtype=torch.int32)
    pos, cnt = torch.full((N,), -1, dtype=torch.int32), torch.zeros(BINS, dtype=torch.int32)
    tileagent.compile(_scatter(offset=100), target=target)(x, pos, cnt)
    assert cnt.tolist() == torch.bincount(x, minlength=BINS).tolist()
    for b in range(BINS):  # the slots of a bin are 0..count-1, each taken once
        assert sorted(pos[x == b].tolist()) == list(range(100, 100 + int((x == b).sum())))


def test_fetch_and_add_becomes_the_value_cuda_atomicadd_returns():
    kernel = tileagent.compile(_scatter(), target="cuda:sm_90a")
    assert "hist_prev[0] = atomicAdd(&hist[" in kernel.get_kernel_source()
    assert "hist_prev[0] = T.atomic_add(hist[X[i]], 1, return_prev=True)" in kernel.get_ir("tile")
    if nvrtc_available():
        assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def _running(op, dtype):
    fn = T.atomic_max if op == "max" else T.atomic_min

    @T.prim_func
    def running(X: T.Tensor((THREADS,), dtype), M: T.Tensor((1,), dtype), Old: T.Tensor((THREADS,), dtype)):
        with T.Kernel(1, threads=THREADS) as bx:
            tx = T.get_thread_binding()
            Old[tx] = fn(M[0], X[tx], return_prev=True)
    return running


@pytest.mark.parametrize("target", ["cpu", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_fetch_max_min_return_the_element_before_each_update_in_thread_order(target, dtype, op):
    torch.manual_seed(1)
    x = (torch.randn(THREADS) * 100).to(getattr(torch, dtype))
    start = torch.zeros(1, dtype=x.dtype)
    m, old = start.clone(), torch.zeros(THREADS, dtype=x.dtype)
    tileagent.compile(_running(op, dtype), target=target)(x, m, old)
    seen = torch.cat([start, x])
    run = (seen.cummax(0) if op == "max" else seen.cummin(0)).values
    assert old.tolist() == run[:-1].tolist() and m.tolist() == run[-1:].tolist()


def test_fetch_max_of_floats_uses_a_compare_and_swap_loop_that_returns_the_old_value():
    source = tileagent.compile(_running("max", "float32"), target="cuda:sm_90a").get_kernel_source()
    assert "__device__ __forceinline__ float tl_atomic_fetch_max(float* addr, float val) {" in source
    assert "return __uint_as_float(old);" in source and "= tl_atomic_fetch_max(&M[0LL]" in source
    int_source = tileagent.compile(_running("min", "int32"), target="cuda:sm_90a").get_kernel_source()
    assert "= atomicMin(&M[0LL]" in int_source


def _marked_line(fn, mark: str) -> int:
    src, start = inspect.getsourcelines(fn)
    return next(start + k for k, text in enumerate(src) if mark in text)


def test_return_prev_where_no_single_thread_owns_the_update_is_a_coded_error():
    def in_parallel():
        @T.prim_func
        def f(X: T.Tensor((64,), "int32"), H: T.Tensor((8,), "int32"), P: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(64):
                    P[i] = T.atomic_add(H[X[i]], 1, return_prev=True)  # <- parallel
        return f

    def block_level():
        @T.prim_func
        def f(H: T.Tensor((8,), "int32"), P: T.Tensor((1,), "int32")):
            with T.Kernel(1, threads=64) as bx:
                P[0] = T.atomic_add(H[0], 1, return_prev=True)  # <- block
        return f

    def in_while():
        @T.prim_func
        def f(H: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=64) as bx:
                tx = T.get_thread_binding()
                while T.atomic_add(H[0], 1, return_prev=True) < 4:  # <- while
                    H[1] = tx
        return f

    for program, code, words, mark in ((in_parallel, "E701", "inside T.Parallel", "# <- parallel"),
                                       (block_level, "E701", "outside per-thread code", "# <- block"),
                                       (in_while, "E301", "in a while condition", "# <- while")):
        with pytest.raises(CompileError) as info:
            tileagent.compile(program(), target="cpu")
        assert info.value.code == code and words in info.value.message, info.value
        assert info.value.span.line == _marked_line(program, mark) and info.value.hint


def test_return_prev_of_a_tile_is_E701():
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def f(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                x = T.alloc_fragment((64,), "float32")
                T.copy(X, x)
                T.atomic_add(Y, x, return_prev=True)
    assert info.value.code == "E701" and "of a tile" in info.value.message and info.value.span is not None
