"""T.atomic_max / T.atomic_min (TileLang's names and semantics) into global and shared memory, scalar and tile forms:
the CPU interpreter and the lowered program in the SIMT emulator against torch, the CUDA they become compiled by
NVRTC for sm_90a, the NaN rule, and the diagnostics for what stays unsupported."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.atomic_ops import combine
from tileagent.compiler.diagnostics import CompileError


def _global(M, N, dtype, op, tile):
    fn = T.atomic_max if op == "max" else T.atomic_min

    @T.prim_func
    def f(X: T.Tensor((M, N), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(M // 4, threads=64) as bx:
            if tile:
                x = T.alloc_fragment((N,), dtype)
                for r in T.serial(4):
                    T.copy(X[bx * 4 + r, 0], x)
                    fn(Y, x)
            else:
                for i, j in T.Parallel(4, N):
                    fn(Y[j], X[bx * 4 + i, j])

    return f


def _shared(M, N, dtype, op):
    """Every block reduces its rows into a shared row with atomics, then writes it out."""
    fn = T.atomic_max if op == "max" else T.atomic_min
    start = -1e4 if op == "max" else 1e4

    @T.prim_func
    def f(X: T.Tensor((M, N), dtype), Y: T.Tensor((M // 8, N), dtype)):
        with T.Kernel(M // 8, threads=128) as bx:
            s = T.alloc_shared((N,), dtype)
            T.fill(s, start)
            for i, j in T.Parallel(8, N):
                fn(s[j], X[bx * 8 + i, j])
            T.copy(s, Y[bx, 0])

    return f


def _inputs(M, N, dtype, op):
    x = (torch.randn(M, N) * 100).to(getattr(torch, dtype))
    start = torch.full((N,), -1e4 if op == "max" else 1e4).to(x.dtype)
    return x, start


@pytest.mark.parametrize("target", ["cpu", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int64"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("tile", [False, True], ids=["scalar", "tile"])
def test_global_atomics_match_torch(target, dtype, op, tile):
    kernel = tileagent.compile(_global(16, 40, dtype, op, tile), target=target)
    x, y = _inputs(16, 40, dtype, op)
    kernel(x, y)
    assert torch.equal(y, x.max(0).values if op == "max" else x.min(0).values)


@pytest.mark.parametrize("target", ["cpu", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_shared_atomics_match_torch(target, dtype, op):
    kernel = tileagent.compile(_shared(32, 96, dtype, op), target=target)
    x = (torch.randn(32, 96) * 100).to(getattr(torch, dtype))
    y = torch.zeros(4, 96, dtype=x.dtype)
    kernel(x, y)
    rows = x.reshape(4, 8, 96)
    assert torch.equal(y, rows.amax(1) if op == "max" else rows.amin(1))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "uint32", "int64"])
def test_cuda_source_compiles_for_sm90a(dtype):
    for op in ("max", "min"):
        kernel = tileagent.compile(_global(16, 40, dtype, op, False), target="sim")
        src = kernel.get_kernel_source()
        if dtype.startswith(("int", "uint")):
            assert ("atomicMax(&Y[" if op == "max" else "atomicMin(&Y[") in src
        else:
            assert f"tl_atomic_{op}(&Y[" in src and "atomicCAS(p, assumed, want)" in src
        assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_nan_never_replaces_and_a_nan_element_stays():
    """TileLang's AtomicMax stores a value only while it compares greater: NaN values are skipped."""
    nan = float("nan")
    cur = torch.tensor([1.0, nan, -5.0, 0.0])
    out = combine(cur, torch.tensor([0, 0, 1, 2, 2, 3]), torch.tensor([nan, 3.0, 7.0, nan, -9.0, nan]), "max")
    assert out[0] == 3.0 and out[1].isnan() and out[2] == -5.0 and out[3] == 0.0
    kernel = tileagent.compile(_global(4, 8, "float32", "min", False), target="sim")
    x = torch.randn(4, 8)
    x[:, 0] = nan
    x[1, 1] = nan
    y = torch.full((8,), 1e4)
    kernel(x, y)
    assert y[0] == 1e4 and y[1] == x[[0, 2, 3], 1].min() and torch.equal(y[2:], x[:, 2:].min(0).values)


def _bad(kind):
    @T.prim_func
    def f(X: T.Tensor((64,), "int8"), Y: T.Tensor((1,), "int8")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                if kind == "int8":
                    T.atomic_max(Y[0], X[i])
                elif kind == "prev":
                    T.atomic_max(Y[0], X[i], return_prev=True)
                else:
                    T.atomic_min(Y[0], X[i], memory_order="acquire")

    return f


def test_unsupported_forms_are_diagnosed_at_their_line():
    with pytest.raises(CompileError) as info:
        tileagent.compile(_bad("int8"), target="sim")
    assert info.value.code == "E602" and "T.atomic_max into int8 buffer 'Y'" in info.value.message
    assert info.value.span.line == _bad.__code__.co_firstlineno + 6
    with pytest.raises(CompileError) as info:
        _bad("prev")
    assert info.value.code == "E701" and "return_prev=True" in info.value.message
    assert info.value.span.line == _bad.__code__.co_firstlineno + 8
    with pytest.raises(CompileError) as info:
        _bad("order")
    assert info.value.code == "E701" and "memory_order='acquire'" in info.value.message
    tileagent.compile(_bad("int8"), target="cpu")  # the interpreter has int8 atomics; only CUDA lacks them


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int64"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_atomics_on_the_gpu(dtype, op):
    """The CAS loops and atomicMax/Min launched on a GPU, many blocks racing on the same elements (global), and a
    block's threads racing in shared memory."""
    kernel = tileagent.compile(_global(4096, 40, dtype, op, False), target="cuda")
    x, y = (t.cuda() for t in _inputs(4096, 40, dtype, op))
    kernel(x, y)
    assert torch.equal(y, x.max(0).values if op == "max" else x.min(0).values)
    if dtype in ("float32", "int32"):
        kernel = tileagent.compile(_shared(256, 96, dtype, op), target="cuda")
        x = (torch.randn(256, 96, device="cuda") * 100).to(getattr(torch, dtype))
        y = torch.zeros(32, 96, dtype=x.dtype, device="cuda")
        kernel(x, y)
        rows = x.reshape(32, 8, 96)
        assert torch.equal(y, rows.amax(1) if op == "max" else rows.amin(1))
