"""``tilelang.carver.roller.rasterization``: the roller's rasterization plans as ``Deferred`` stand-ins (the autotuning
GEMM examples compare a roller hint's plan with ``NoRasterization`` only when the roller ran); E701 when used."""

from __future__ import annotations

from tileagent.compat.tilelang.carver import Deferred, unsupported_name

NoRasterization, Rasterization2DRow, Rasterization2DColumn = (Deferred("tilelang.carver.roller.rasterization", n)
                                                             for n in ("NoRasterization", "Rasterization2DRow",
                                                                       "Rasterization2DColumn"))


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported_name("tilelang.carver.roller.rasterization", name)
