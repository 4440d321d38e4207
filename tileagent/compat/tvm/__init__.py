"""``import tvm`` (and ``from tilelang import tvm``) under ``tileagent.compat.install()``: the part of TVM's Python API
that TileLang programs use directly, served by TileAgent's IR.

In: a TileLang program's plain-Python helpers that build scalar expressions with TVM's API (``tvm.tirx.const``,
``tirx.reinterpret``, ``tirx.Select``...; TileLang's dequantization examples) and its uses of ``tvm.DataType``,
``tvm.target.Target`` and ``tvm.testing.requires_package``. Out: TileAgent objects with TVM's names and semantics:
``tvm.tirx`` (also ``tvm.tir``) builds ``tileagent.compiler.ir`` expressions, ``tvm.DataType`` is
``tilelang.DataType``. Guarantees: this module is used only when no real TVM is installed (the finder of
``tileagent.compat`` checks); any other part of TVM (``tvm.relay``, ``tvm.runtime``...) is an E701 at its import or
attribute, naming it.
"""

from __future__ import annotations

from tileagent.compat.tilelang.datatype import DataType
from tileagent.compat.tvm import target, testing, tirx
from tileagent.compiler.diagnostics import UnsupportedError

tir = tirx  # TVM's older name for the same namespace

__version__ = "0.0.0+tileagent"
"""Not a TVM release: TileAgent's stand-in for the few TVM names TileLang programs use."""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise UnsupportedError(f"tvm.{name} is not provided by TileAgent (it includes only tvm.tirx/tir expression "
                           f"builders, tvm.DataType, tvm.target.Target and tvm.testing.requires_package)",
                           hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


__all__ = ["DataType", "target", "testing", "tir", "tirx"]
