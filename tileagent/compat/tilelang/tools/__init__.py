"""``tilelang.tools``: TileLang's ``Analyzer`` (FLOPs and global-memory bytes of a PrimFunc, a roofline estimate).

In: a PrimFunc (``kernel.get_tir(...)``) and a device model (``tilelang.carver.arch.CUDA("cuda")``). Out:
``AnalysisResult(total_flops, total_global_bytes, estimated_time, expected_tflops, expected_bandwidth_GBps)`` with
TileLang's rules: every T.gemm counts ``2*M*N*K`` and every T.copy with a global side the bytes of that side, times
the trip counts of the sequential loops around it and the blocks of the grid's x and y; the peak TFLOP/s comes from
TileLang's table (sm_80/86/89 only: None elsewhere, as in TileLang, and the estimate is then the memory time); the
bandwidth is the device model's ``bandwidth[1]`` MB/s.
Guarantees: a loop or grid extent that is not a compile-time integer is an E701 naming it (TileLang's Analyzer needs
static extents too). ``plot_layout`` and the other tools (iket, lower traces, pass timing) are not provided: an
E701 when called or imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from tileagent.compiler.diagnostics import UnsupportedError
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import Copy, For, Gemm, Kernel, PrimFunc
from tileagent.compiler.tileops.gemm import gemm_shape

# TileLang's table: compute capability -> (cores per SM, clock (GHz), FLOPs per cycle, SM count)
ARCH_CONFIGS = {"80": (128, 1.41, 2, 108), "86": (128, 1.70, 2, 84), "89": (128, 2.52, 2, 128)}


@dataclass(frozen=True)
class AnalysisResult:
    total_flops: int
    total_global_bytes: int
    estimated_time: float
    expected_tflops: float | None
    expected_bandwidth_GBps: float


def _static(e, what: str) -> int:
    n = static_int(e)
    if n is None:
        raise UnsupportedError(f"tilelang.tools.Analyzer: the {what} ({e}) is not a compile-time integer")
    return n


class Analyzer:
    """TileLang's ``Analyzer.analysis(fn, device)`` over TileAgent's tile IR."""

    def __init__(self, fn, device):
        if not isinstance(fn, PrimFunc):
            raise UnsupportedError(f"tilelang.tools.Analyzer takes a PrimFunc (kernel.get_tir(...)), got "
                                   f"{type(fn).__name__}")
        self.fn, self.device = fn, device
        self.total_flops = self.total_global_bytes = 0

    def ir_pass(self) -> "Analyzer":
        for k in (s for s in self.fn.body if isinstance(s, Kernel)):
            grid = [_static(g, "grid extent") for g in k.grid] + [1, 1]
            self._visit(k.body, grid[0] * grid[1])
        return self

    def _visit(self, body, times: int) -> None:
        for s in body:
            if isinstance(s, Gemm):
                m, n, k, _ = gemm_shape(s)
                self.total_flops += 2 * m * n * k * times
            elif isinstance(s, Copy):
                side = s.src if s.src.buffer.scope == "global" else s.dst if s.dst.buffer.scope == "global" else None
                if side is not None:
                    elements = 1
                    for e in side.extents:
                        elements *= e
                    self.total_global_bytes += elements * side.buffer.dtype.bytes * times
            elif isinstance(s, For):
                self._visit(s.body, times * _static(s.extent, f"trip count of loop {s.var.name}"))
            else:
                for name in ("body", "then_body", "else_body"):
                    self._visit(getattr(s, name, ()) or (), times)

    def calculate(self) -> AnalysisResult:
        config = ARCH_CONFIGS.get(str(self.device.compute_capability)[:2])
        peak = round(config[3] * config[0] * config[1] * config[2] / 1e3, 1) if config else None
        bandwidth_gbps = self.device.bandwidth[1] / 1000
        mem_time = self.total_global_bytes / (bandwidth_gbps * 1e9)
        estimated = max(mem_time, self.total_flops / (peak * 1e12)) if peak else mem_time
        return AnalysisResult(self.total_flops, self.total_global_bytes, estimated, peak, bandwidth_gbps)

    @classmethod
    def analysis(cls, fn, device) -> AnalysisResult:
        return cls(fn, device).ir_pass().calculate()


def plot_layout(layout, *args, **kwargs):
    raise UnsupportedError("tilelang.tools.plot_layout is not provided by TileAgent's TileLang compatibility layer: "
                           "layouts are inferred (kernel.layouts() prints them as tables)")


__all__ = ["ARCH_CONFIGS", "AnalysisResult", "Analyzer", "plot_layout"]
