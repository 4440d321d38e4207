"""``tilelang.cuda.intrinsics.layout.utils``: ``get_ldmatrix_offset``, ``get_mma_micro_size``,
``mma_store_index_map`` (TileLang's names and arguments), over the maps of ``mma_layout``.

In: a lane and a register element (or an operand's row and column) as integers or IR expressions. Out: their shared
tile positions. Guarantees: the same results as TileLang's functions of these names.
"""

from __future__ import annotations

from tileagent.compat.tilelang.cuda.intrinsics.layout import mma_layout as _m
from tileagent.compat.tilelang.cuda.intrinsics.layout.mma_layout import (get_swizzle_layout,  # noqa: F401
                                                                          make_mma_swizzle_layout)
from tileagent.compat.tilelang.datatype import DataType

EIGHT_BIT_K32 = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn", "int8", "uint8")


def get_ldmatrix_offset(matrix, row_idx, col_idx, stride, dtype="float16", transposed: bool = False):
    """(row, col) in the shared tile that lane ``row_idx``'s register element ``col_idx`` of ldmatrix.x4 reads."""
    if matrix not in ("A", "B"):
        raise ValueError("matrix should be either A or B")
    bits = DataType(dtype).bits
    k_major = (matrix == "A" and not transposed) or (matrix == "B" and transposed)
    if bits == 16:
        fn = _m.ldmatrix_trans_32x8_to_shared_16x16_layout if transposed else _m.ldmatrix_32x8_to_shared_16x16_layout
        return fn(row_idx, col_idx)
    if bits not in (32, 8, 4, 2, 1) or not k_major:
        raise ValueError(f"ldmatrix supports B transposed and A non-transposed for {bits}-bit elements"
                         if bits in (32, 8, 4, 2, 1) else f"Unsupported dtype {dtype}")
    if bits == 32:
        fn = _m.ldmatrix_32x4_to_shared_16x8_layout_a if matrix == "A" else _m.ldmatrix_32x4_to_shared_16x8_layout_b
        return fn(row_idx, col_idx)
    fn = _m.ldmatrix_32x16_to_shared_16x32_layout_a if matrix == "A" else _m.ldmatrix_32x16_to_shared_16x32_layout_b
    row, col = fn(row_idx, col_idx)
    return row, col * (8 // bits)


def mma_store_index_map(thread_id, local_id):
    return _m.mma_store_32x8_to_shared_16x16_layout(thread_id, local_id)


def mma_store_index_map_fp64(thread_id, local_id):
    return _m.mma_store_32x2_to_shared_8x8_layout_fp64(thread_id, local_id)


def get_mma_micro_size(dtype):
    """(16, 16, k) of one warp's mma tile: k = 32 for 8-bit inputs, else 16."""
    return 16, 16, 32 if str(dtype) in EIGHT_BIT_K32 else 16
