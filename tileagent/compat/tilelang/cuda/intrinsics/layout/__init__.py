"""``tilelang.cuda.intrinsics.layout``: the mma.sync layout helpers (``mma_layout``, ``utils``)."""

from tileagent.compat.tilelang.cuda.intrinsics.layout.mma_layout import get_swizzle_layout, make_mma_swizzle_layout
from tileagent.compat.tilelang.cuda.intrinsics.layout.utils import (get_ldmatrix_offset, get_mma_micro_size,
                                                                     mma_store_index_map)

__all__ = ["get_ldmatrix_offset", "get_mma_micro_size", "get_swizzle_layout", "make_mma_swizzle_layout",
           "mma_store_index_map"]
