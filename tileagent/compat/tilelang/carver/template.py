"""``tilelang.carver.template``: TileLang's roller templates as ``Deferred`` stand-ins, so that programs importing
them at the top (the autotuning GEMM examples) run when they list their configs by hand; calling one is an E701
``UnsupportedError`` (``tilelang.carver``)."""

from __future__ import annotations

from tileagent.compat.tilelang.carver import Deferred, unsupported_name

_NAMES = ("MatmulTemplate", "GEMVTemplate", "ElementwiseTemplate", "GeneralReductionTemplate", "FlashAttentionTemplate",
          "ConvTemplate", "BaseTemplate")
globals().update({n: Deferred("tilelang.carver.template", n) for n in _NAMES})


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported_name("tilelang.carver.template", name)
