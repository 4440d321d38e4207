"""Bulk stores (compiler.instructions.bulk_store, compiler.lower.bulk_store): a shared -> global T.copy of a whole
unswizzled tile on sm_90a as cp.async.bulk from single threads, one copy when the rows are contiguous on both sides
(TileLang's layer norm stores Y so), else one per row from thread row % n. Run in the SIMT emulator against the
data (rows past the tensor's end left alone), the declines with their notes, the PTX and CUDA emitted, and on an
sm_90 GPU."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.instructions import COPY
from tileagent.compiler.instructions.bulk_store import BulkStoreCopy
from tileagent.compiler.layout.layout import Layout


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _rows(M, N, bm, dtype="float16", layout=None, threads=128):
    """B = 2 * A, each block's bm x N rows computed into a shared tile, then T.copy(S, B[...]) (the copy under test)."""

    @T.prim_func
    def k(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            S = T.alloc_shared((bm, N), dtype)
            if layout is not None:
                T.annotate_layout({S: layout})
            for i, j in T.Parallel(bm, N):
                S[i, j] = A[bx * bm + i, j] * 2
            T.copy(S, B[bx * bm, 0])
    return k


def _heads(B, S, H, D, bm):
    """O[b, rows, h, :] = 3 * Q[...] through a shared tile: the rows of a head are H * D apart in O (attention's
    epilogue), so one bulk store per row; S not a multiple of bm leaves the last block's rows past the end."""

    @T.prim_func
    def k(Q: T.Tensor((B, S, H, D), "float16"), O: T.Tensor((B, S, H, D), "float16")):
        with T.Kernel(T.ceildiv(S, bm), H, B, threads=128) as (bx, by, bz):
            O_s = T.alloc_shared((bm, D), "float16")
            for i, j in T.Parallel(bm, D):
                O_s[i, j] = Q[bz, bx * bm + i, by, j] * 3
            T.copy(O_s, O[bz, bx * bm:(bx + 1) * bm, by, :])
    return k


def test_registry_line():
    entry = next(e for e in COPY if isinstance(e, BulkStoreCopy))
    assert entry.name == "cp.async.bulk (bulk store)" and entry.moves == ("shared", "global")
    assert "whole tiles" in entry.reason(None, None, 8, False, None)


def test_contiguous_rows_are_one_bulk_store():
    k = tileagent.compile(_rows(256, 96, 32), target="sim")
    ir = k.get_ir("thread")
    assert "bulk store of 6144 B" in ir  # 32 rows x 96 halves, B's rows whole
    src = k.get_kernel_source()
    assert src.count("cp.async.bulk.global.shared::cta.bulk_group") == 1 and "wait_group.read 0" in src
    # one barrier before the copy: the barrier pass's one gave way to the fence's
    assert 'fence.proxy.async.shared::cta;" ::: "memory");\n  __syncthreads();\n  if (tid == 0) {' in src
    a = torch.randn(256, 96, dtype=torch.float16)
    b = torch.full_like(a, float("nan"))
    k(a, b)
    assert torch.equal(b, a * 2)


def test_rows_past_the_end_are_guarded_one_store_per_row():
    k = tileagent.compile(_rows(200, 64, 48, "float32", threads=32), target="sim")
    ir = k.get_ir("thread")
    assert "bulk stores of 48 rows x 256 B" in ir  # 48 rows from 32 threads: two trips
    a = torch.randn(200, 64)
    b = torch.full_like(a, float("nan"))
    k(a, b)
    assert torch.equal(b, a * 2)


def test_strided_rows_of_a_head_leave_the_others_alone():
    B, S, H, D = 2, 100, 3, 64
    k = tileagent.compile(_heads(B, S, H, D, 64), target="sim")
    assert "bulk stores of 64 rows x 128 B" in k.get_ir("thread")
    q = torch.randn(B, S, H, D, dtype=torch.float16)
    o = torch.full_like(q, float("nan"))
    k(q, o)
    assert torch.equal(o, q * 3)


@pytest.mark.parametrize("case,note", [
    ("sm_80", None),
    ("off", None),
    ("read", "no bulk store: the kernel reads 'B' (bulk stores complete after the kernel)"),
    ("written", "no bulk store: the kernel also writes 'B' other than from shared tiles"),
    ("padded", None),
    ("narrow", "no bulk store: cp.async.bulk (bulk store): a row of 8 bytes is not a multiple of 16"),
])
def test_declines(case, note, monkeypatch):
    target = "sim:sm_80" if case == "sm_80" else "sim"
    if case == "off":
        monkeypatch.setenv("TILEAGENT_BULK_STORE", "0")
    if case == "read":
        @T.prim_func
        def f(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
            with T.Kernel(2, threads=128) as bx:
                S = T.alloc_shared((32, 64), "float16")
                for i, j in T.Parallel(32, 64):
                    S[i, j] = A[bx * 32 + i, j] + B[bx * 32 + i, j]
                T.copy(S, B[bx * 32, 0])
    elif case == "written":  # B zeroed by generic stores first: the async proxy's writes would not be ordered after
        @T.prim_func
        def f(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
            with T.Kernel(2, threads=128) as bx:
                S = T.alloc_shared((32, 64), "float16")
                for i, j in T.Parallel(32, 64):
                    B[bx * 32 + i, j] = 0
                for i, j in T.Parallel(32, 64):
                    S[i, j] = A[bx * 32 + i, j] * 2
                T.copy(S, B[bx * 32, 0])
    elif case == "padded":  # 16 bytes of padding a row: rows 144 bytes apart in shared memory, still one per row
        f = _rows(64, 64, 32, layout=Layout.row_major((32, 64), pad=8))
    else:
        f = _rows(64, 4 if case == "narrow" else 64, 32)
    k = tileagent.compile(f, target=target)
    ir = k.get_ir("thread")
    if case == "padded":
        assert "bulk stores of 32 rows x 128 B" in ir
    else:
        assert "bulk.store" not in ir and "cp.async.bulk.global" not in k.get_kernel_source()
    if note is not None:
        assert note in ir
    n = 4 if case == "narrow" else 64
    a, b = torch.randn(64, n, dtype=torch.float16), torch.randn(64, n, dtype=torch.float16)
    want = a + b if case == "read" else a * 2
    k(a, b)
    assert torch.equal(b, want)


def test_emulator_rejects_a_store_never_waited_for(monkeypatch):
    from tileagent.compiler.lower import bulk_store as lower_bulk

    real = lower_bulk.lower_bulk_store

    def no_wait(ctx, s):
        stmts, how = real(ctx, s)
        guard = stmts[-1]
        return stmts[:-1] + [type(guard)(guard.cond, guard.then_body[:-1], (), guard.span)], how

    monkeypatch.setattr(lower_bulk, "lower_bulk_store", no_wait)
    k = tileagent.compile(_rows(64, 64, 32), target="sim")
    a = torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(EmulationError, match="the block ends with bulk stores of thread 0 never waited for"):
        k(a, torch.zeros_like(a))


def test_ptx_and_nvrtc_for_sm90a():
    k = tileagent.compile(_heads(2, 100, 3, 64, 64), target="cuda:sm_90a")
    assert k.cubin("sm_90a")[:4] == b"\x7fELF"
    ptx = k.unit.ptx or ""
    if ptx:  # the PTX emitter covers the kernel; ptxas assembled it
        assert "cp.async.bulk.global.shared::cta.bulk_group" in ptx and "cp.async.bulk.wait_group.read 0;" in ptx
        assert ptx.index("fence.proxy.async.shared::cta;") < ptx.index("cp.async.bulk.global")


@pytest.mark.gpu
def test_gpu_bulk_stores():
    """On an sm_90 GPU: the one-copy, per-row and strided-head cases write exactly what the emulator does."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    for f, shape, dtype, scale in ((_rows(4096, 512, 8), (4096, 512), torch.float16, 2),
                                   (_rows(1000, 64, 48, "float32", threads=32), (1000, 64), torch.float32, 2),
                                   (_heads(2, 1000, 4, 128, 128), (2, 1000, 4, 128), torch.float16, 3)):
        k = tileagent.compile(f, target="cuda")
        assert "bulk store" in k.get_ir("thread")
        a = torch.randn(*shape, dtype=dtype, device="cuda")
        b = torch.full_like(a, float("nan"))
        k(a, b)
        torch.cuda.synchronize()
        assert torch.equal(b, a * scale), shape
