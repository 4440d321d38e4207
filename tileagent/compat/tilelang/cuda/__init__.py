"""``tilelang.cuda``: of TileLang's CUDA backend package, the intrinsic helpers programs import
(``tilelang.cuda.intrinsics``: the mma.sync layout helpers and ``TensorCoreIntrinEmitter``).

In: ``import tilelang.cuda[.intrinsics...]``. Out: these modules. Guarantees: a submodule TileAgent does not provide
(``tilelang.cuda.codegen``, ``tilelang.cuda.intrinsics.sparse_layout``...) is an E701 naming it.
"""

from tileagent.compat.tilelang.cuda import intrinsics  # noqa: F401

__all__ = ["intrinsics"]
