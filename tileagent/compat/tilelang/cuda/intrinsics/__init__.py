"""``tilelang.cuda.intrinsics``: TileLang's mma.sync helpers: the layout functions (``layout``) and the macro
generators (``macro``).

In: ``from tilelang.cuda.intrinsics import ...``. Out: TileLang's names. Guarantees: ``TensorCoreIntrinEmitter`` and
the other emitters resolve lazily from ``macro.mma_macro_generator``, so importing a layout helper never needs them.
"""

from __future__ import annotations

import importlib

from tileagent.compat.tilelang.cuda.intrinsics.layout import (get_ldmatrix_offset, get_mma_micro_size,
                                                               get_swizzle_layout, make_mma_swizzle_layout,
                                                               mma_store_index_map)

_EMITTERS = ("TensorCoreIntrinEmitter", "TensorCoreIntrinEmitterWithLadderTransform", "TensorCoreIntrinEmitterSM120")


def __getattr__(name: str):
    if name in _EMITTERS:
        return getattr(importlib.import_module(f"{__name__}.macro.mma_macro_generator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["get_ldmatrix_offset", "get_mma_micro_size", "get_swizzle_layout", "make_mma_swizzle_layout",
           "mma_store_index_map", *_EMITTERS]
