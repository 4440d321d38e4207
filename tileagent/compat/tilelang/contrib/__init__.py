"""``tilelang.contrib`` under the compatibility layer: only ``tilelang.contrib.nvcc``'s compute-capability queries.

In: imports of ``tilelang.contrib[.nvcc]``. Out: these modules. Guarantees: any other contrib module (``hipcc``,
``nvrtc``, ``cc``...) is an E701 ``UnsupportedError`` at its import (TileAgent compiles with NVRTC itself).
"""
