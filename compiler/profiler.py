"""Profiler of a compiled kernel: ``kernel.get_profiler()`` (TileLang's surface).

In: a JITKernel with static shapes. Out: ``do_bench`` (median milliseconds; CUDA events on the GPU, wall clock on the
CPU targets) and ``assert_allclose(reference)`` on generated inputs.
Guarantees: inputs are drawn fresh (uniform in [-1, 1] for floats, small integers otherwise); outputs named by
``out_idx`` are allocated by the kernel; the timing loop warms up before it measures.
"""

from __future__ import annotations

import statistics
import time

import torch

from tileagent.compiler.errors import KernelArgumentError
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import Buffer


class Profiler:
    def __init__(self, kernel):
        self.kernel = kernel
        self.device = torch.device("cuda" if kernel.target == "cuda" else "cpu")

    def inputs(self) -> list:
        out = []
        for k, p in enumerate(self.kernel.params):
            if k in self.kernel.out_idx:
                continue
            if not isinstance(p, Buffer):
                raise KernelArgumentError(f"the profiler cannot invent a value for scalar parameter '{p.name}'")
            shape = [static_int(d) for d in p.shape]
            if any(d is None for d in shape):
                raise KernelArgumentError(f"parameter '{p.name}' has a dynamic shape; pass input_tensors")
            if p.dtype.is_float:
                t = torch.empty(shape, dtype=torch.float32, device=self.device).uniform_(-1, 1).to(p.dtype.torch)
            else:
                t = torch.randint(-2, 3, shape, device=self.device).to(p.dtype.torch)
            out.append(t)
        return out

    def assert_allclose(self, reference_program, input_tensors=None, atol=1e-2, rtol=1e-2) -> None:
        ins = input_tensors if input_tensors is not None else self.inputs()
        got = self.kernel(*ins)
        want = reference_program(*ins)
        got = got if isinstance(got, (list, tuple)) else [got]
        want = want if isinstance(want, (list, tuple)) else [want]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w.to(g.dtype), atol=atol, rtol=rtol)

    def do_bench(self, func=None, warmup: int = 25, rep: int = 100, input_tensors=None) -> float:
        """Median time of one call in milliseconds (``func`` defaults to the kernel)."""
        ins = input_tensors if input_tensors is not None else self.inputs()
        fn = func if func is not None else self.kernel
        for _ in range(warmup):
            fn(*ins)
        times = []
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            for _ in range(rep):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*ins)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for _ in range(rep):
                t0 = time.perf_counter()
                fn(*ins)
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
