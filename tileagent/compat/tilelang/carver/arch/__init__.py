"""``tilelang.carver.arch``: its ``driver`` module; the arch models ``CUDA``, ``CDNA``, ``get_arch``,
``auto_infer_current_arch`` import as ``Deferred`` stand-ins (E701 when used: the roller needs them); other names are
an E701 ``UnsupportedError``."""

from __future__ import annotations

from tileagent.compat.tilelang.carver import Deferred, unsupported_name
from tileagent.compat.tilelang.carver.arch import driver  # noqa: F401 -- `from tilelang.carver.arch import driver`

CUDA, CDNA, get_arch, auto_infer_current_arch = (Deferred("tilelang.carver.arch", n) for n in (
    "CUDA", "CDNA", "get_arch", "auto_infer_current_arch"))


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported_name("tilelang.carver.arch", name)
