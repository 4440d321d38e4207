"""The tile-op registry: tile-IR statement class -> the TileOp that owns it (``compiler.tileops.base``).

In: nothing at import but the op modules listed in ``_OPS``. Out: ``op_for(stmt)`` (the TileOp of a statement, or
None for statements that are not tile ops), ``describe(stmt)`` (the op's name for diagnostics), ``TILE_OP_NODES``
and ``BUILTINS`` (DSL functions an op module adds to ``tileagent.language``, from its ``BUILTINS`` dict).
Guarantees: one TileOp per statement class; a new tile op is one module here plus its line in ``_OPS``.
"""

from __future__ import annotations

import sys

from tileagent.compiler.tileops.atomic_add import AtomicAddTileOp
from tileagent.compiler.tileops.base import Effects, TileOp
from tileagent.compiler.tileops.copy import CopyOp
from tileagent.compiler.tileops.cumsum import CumSumOp
from tileagent.compiler.tileops.fill import FillOp
from tileagent.compiler.tileops.gemm import GemmOp
from tileagent.compiler.tileops.reduce import ReduceOp
from tileagent.compiler.tileops.warp_mma import WarpLdMatrixOp, WarpMmaOp
from tileagent.compiler.tileops.wgmma_gemm import WaitWgmmaOp, WgmmaGemmOp

_OPS = (
    CopyOp(),            # T.copy
    GemmOp(),            # T.gemm
    ReduceOp(),          # T.reduce_*
    FillOp(),            # T.fill / T.clear
    AtomicAddTileOp(),   # T.atomic_add of a tile
    CumSumOp(),          # T.cumsum
    WgmmaGemmOp(),       # T.wgmma_gemm: T.gemm without its wgmma wait
    WaitWgmmaOp(),       # T.wait_wgmma: wgmma.wait_group
    WarpMmaOp(),         # mma.sync on per-thread local arrays (TileLang's TensorCoreIntrinEmitter.mma)
    WarpLdMatrixOp(),    # ldmatrix into per-thread local arrays (TensorCoreIntrinEmitter.ldmatrix_a / _b)
)

REGISTRY: dict[type, TileOp] = {op.node: op for op in _OPS}
TILE_OP_NODES: tuple[type, ...] = tuple(REGISTRY)
BUILTINS: dict = {}
for _op in _OPS:
    BUILTINS.update(getattr(sys.modules[type(_op).__module__], "BUILTINS", {}))


def op_for(stmt) -> TileOp | None:
    """The TileOp owning ``stmt``, or None when it is no tile op (loops, element statements, thread IR)."""
    return REGISTRY.get(type(stmt))


def describe(stmt) -> str:
    """How diagnostics name a statement: the tile op as written (``T.reduce_max``), a loop or an annotation."""
    op = op_for(stmt)
    if op is not None:
        return op.name(stmt)
    name = type(stmt).__name__
    return {"Parallel": "T.Parallel loop", "AnnotateLayout": "T.annotate_layout"}.get(name, name)


__all__ = ["BUILTINS", "Effects", "REGISTRY", "TILE_OP_NODES", "TileOp", "describe", "op_for"]
