"""``tilelang.carver.roller``: only ``roller.rasterization``'s names, as ``Deferred`` stand-ins (E701 when used);
anything else is an E701 ``UnsupportedError`` (``tilelang.carver``)."""

from __future__ import annotations

from tileagent.compat.tilelang.carver import unsupported_name
from tileagent.compat.tilelang.carver.roller import rasterization  # noqa: F401


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported_name("tilelang.carver.roller", name)
