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
