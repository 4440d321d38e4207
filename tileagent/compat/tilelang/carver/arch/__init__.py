"""``tilelang.carver.arch``: only its ``driver`` module is provided; other names (``CUDA``, ``CDNA``, ``get_arch``,
...) are an E701 ``UnsupportedError``."""

from __future__ import annotations

from tileagent.compat.tilelang.carver import unsupported_name
from tileagent.compat.tilelang.carver.arch import driver  # noqa: F401 -- `from tilelang.carver.arch import driver`


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported_name("tilelang.carver.arch", name)
