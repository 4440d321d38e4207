"""Barrier insertion (compiler/lower/barriers.py) seen in the CUDA it leads to: a barrier wherever two statements
of a block touch the same shared or global buffer, one of them writing; none between statements on distinct
buffers."""

import pytest
import torch

import tileagent
import tileagent.language as T


def _source(body_kind: str) -> str:
    @T.prim_func
    def main(x: T.Tensor((1024,), "float32"), y: T.Tensor((1024,), "float32"), ws: T.Tensor((1024,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(1024):
                ws[i] = x[i] * 2.0
            for i in T.Parallel(1024):
                if body_kind == "reversed":  # another thread's element of the workspace
                    y[i] = ws[1023 - i]
                else:  # the input again: no buffer in common with a write
                    y[i] = x[1023 - i]

    return tileagent.compile(main, target="cuda:sm_90a").get_kernel_source()


def _between_loops(src: str) -> str:
    first = src.index("ws[")
    return src[first:src.index("y[", first)]


def test_a_global_workspace_written_by_one_parallel_loop_and_read_by_the_next_gets_a_barrier():
    """The second loop reads ws[1023 - i], which the first loop's layout gave another thread: without
    __syncthreads() it may run before that thread's store (the GPU's threads are not in lock-step)."""
    assert "__syncthreads();" in _between_loops(_source("reversed"))


def test_loops_on_distinct_global_buffers_get_no_barrier():
    assert "__syncthreads" not in _source("input")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_reversed_workspace_read_is_right_on_the_gpu():
    @T.prim_func
    def main(x: T.Tensor((4096,), "float32"), y: T.Tensor((4096,), "float32"), ws: T.Tensor((4096,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(4096):
                ws[i] = x[i] * 2.0
            for i in T.Parallel(4096):
                y[i] = ws[4095 - i]

    kernel = tileagent.compile(main, target="cuda")
    x = torch.randn(4096, device="cuda")
    y, ws = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    kernel(x, y, ws)
    torch.testing.assert_close(y, (x * 2).flip(0), rtol=0, atol=0)


def _unpack_nibbles():
    """TileLang's dequantizing GEMMs in small: per-thread code reads 4 packed bytes from shared memory, unpacks them
    and stores each thread's 8 values in a T.vectorized loop (TileLang's fast_dequant_bf16_fp4_twiddling)."""
    @T.prim_func
    def main(X: T.Tensor((64, 32), "uint8"), Y: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            xs = T.alloc_shared((64, 32), "uint8")
            ys = T.alloc_shared((64, 64), "float16")
            T.copy(X, xs)
            tx = T.get_thread_binding()
            a = T.alloc_local((4,), "uint8")
            b = T.alloc_local((8,), "float16")
            for i in T.serial(4):
                for v in T.vectorized(4):
                    index = i * 512 + tx * 4 + v
                    a[v] = xs[index // 32, index % 32]
                for v in T.vectorized(8):
                    b[v] = T.cast((a[v // 2] >> (4 * (v % 2))) & 15, "float16")
                for v in T.vectorized(8):
                    index = i * 1024 + tx * 8 + v
                    ys[index // 64, index % 64] = b[v]
            T.copy(ys, Y)

    return main


def test_per_thread_stores_need_no_barrier_between_them_and_the_copys_barrier_goes_before_the_loop():
    """Write after write by plain per-thread stores at thread-dependent addresses is no hazard (TileLang's thread
    sync orders only read-after-write and write-after-read): no barrier between a thread's stores (there was one
    per element). The T.copy before the loop is ordered by one barrier before the loop, not one per iteration."""
    src = tileagent.compile(_unpack_nibbles(), out_idx=[1], target="cuda:sm_90a").get_kernel_source()
    loop = src[src.index("for (int i = 0; i < 4; ++i)"):]
    loop = loop[:loop.index("\n  }\n")]
    assert "__syncthreads" not in loop
    assert src[:src.index("for (int i = 0; i < 4; ++i)")].rstrip().endswith("__syncthreads();")
    x = torch.randint(0, 256, (64, 32), dtype=torch.uint8)
    want = torch.stack([x & 15, x >> 4], -1).reshape(64, 64).half()
    for target in ("sim", "cpu"):
        torch.testing.assert_close(tileagent.compile(_unpack_nibbles(), out_idx=[1], target=target)(x), want,
                                   rtol=0, atol=0)


def test_a_store_every_thread_makes_to_one_address_after_per_thread_stores_gets_a_barrier():
    """s[tx] = 1 then s[0] = 2 by every thread: without a barrier thread 0's first store may land after another
    thread's second, and s[0] would end 1."""
    @T.prim_func
    def main(Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128,), "float32")
            tx = T.get_thread_binding()
            s[tx] = 1.0
            s[0] = 2.0
            T.copy(s, Y)

    src = tileagent.compile(main, out_idx=[0], target="cuda:sm_90a").get_kernel_source()
    first = src.index("s[tx")
    assert "__syncthreads();" in src[first:src.index("s[0] = ", first)]
    want = torch.ones(128)
    want[0] = 2.0
    torch.testing.assert_close(tileagent.compile(main, out_idx=[0], target="cpu")(), want)


def test_a_row_every_thread_stores_gets_one_barrier_an_outer_iteration_not_one_an_element():
    """TileLang's naive GEMV: every thread stores all of A_shared (the same values) and its own row of B_shared, then
    reads them. The store of A_shared[tk] by one statement in the next iteration is no hazard; the reads of the last
    outer iteration are, once: a barrier before the store loop (there was one in it, 128 an outer iteration)."""
    @T.prim_func
    def gemv(A: T.Tensor((256,), "float16"), B: T.Tensor((32, 256), "float16"), C: T.Tensor((32,), "float16")):
        with T.Kernel(1, threads=32):
            tn = T.get_thread_binding(0)
            a_s = T.alloc_shared((64,), "float16")
            b_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_local((1,), "float32")
            T.clear(acc)
            for bk in T.serial(4):
                for tk in T.serial(64):
                    a_s[tk] = A[bk * 64 + tk]
                    b_s[tn, tk] = B[tn, bk * 64 + tk]
                for tk in T.serial(64):
                    acc[0] += a_s[tk].astype("float32") * b_s[tn, tk].astype("float32")
            C[tn] = acc[0]

    src = tileagent.compile(gemv, target="cuda:sm_90a").get_kernel_source()
    stores = src[src.index("for (int tk = 0;"):]
    assert "__syncthreads" not in stores[:stores.index("}")]
    assert src[:src.index("for (int tk = 0;")].rstrip().endswith("__syncthreads();")
    a, b = torch.randn(256, dtype=torch.float16), torch.randn(32, 256, dtype=torch.float16)
    c = torch.empty(32, dtype=torch.float16)
    tileagent.compile(gemv, target="sim")(a, b, c)
    torch.testing.assert_close(c.float(), b.float() @ a.float(), rtol=1e-2, atol=1e-2)


def test_two_stores_at_an_address_read_from_a_buffer_get_a_barrier():
    """s[idx[0]] = 1 then s[idx[0]] = 2 by every thread: the address is read from a buffer, so it may be one address
    in every thread (it is here), and without a barrier one thread's first store may land after another's second
    (session 41's note: the write-after-write exemption took any address that reads a buffer as per-thread)."""
    @T.prim_func
    def main(Idx: T.Tensor((1,), "int32"), Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128,), "float32")
            tx = T.get_thread_binding()
            s[tx] = 0.0
            s[Idx[0]] = 1.0
            s[Idx[0]] = 2.0
            T.copy(s, Y)

    src = tileagent.compile(main, out_idx=[1], target="cuda:sm_90a").get_kernel_source()
    first = src.index("] = 1.0")
    assert "__syncthreads();" in src[first:src.index("] = 2.0", first)]
    want = torch.zeros(128)
    want[5] = 2.0
    for target in ("sim", "cpu"):
        torch.testing.assert_close(tileagent.compile(main, out_idx=[1], target=target)(
            torch.tensor([5], dtype=torch.int32)), want)
