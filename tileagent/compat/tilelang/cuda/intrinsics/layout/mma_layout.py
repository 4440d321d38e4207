"""``tilelang.cuda.intrinsics.layout.mma_layout``: the index maps of mma.sync m16n8k{8,16,32} fragments and ldmatrix,
and TileLang's shared-memory swizzle for them.

In: integers or IR expressions (a thread id and a register index, or a row and a column of a 16 x 8/16/32 tile).
Out: TileLang's functions of the same names and arguments. Guarantees: the fragment maps are the PTX ISA's register
layouts ("Matrix Fragments for mma.m16n8k16 / m16n8k32 / m16n8k8"), as ``compiler.layout.mma`` encodes them for
T.gemm; ``make_mma_swizzle_layout(buf)`` is a ``T.Layout`` whose map is ``get_swizzle_layout`` (16-byte chunks of a
row XORed with the row in groups of 8 rows, in column blocks of at most 128 bytes), which ``T.annotate_layout`` keeps
as the equal Layout of ours (``compiler.layout.index_map``).
"""

from __future__ import annotations

from tileagent.compat.tilelang.datatype import DataType
from tileagent.compiler.language.extras import Layout


# ldmatrix: (lane, register element) -> (row, col) of the 16 x N tile the x4 form reads (lanes 0-15 give the rows of
# the first two 8 x 8 matrices, lanes 16-31 the other two); "_b" forms read B stored N x K.
def ldmatrix_32x4_to_shared_16x8_layout_a(thread_id, local_id):
    return thread_id % 16, (thread_id // 16) * 4 + local_id % 4


def ldmatrix_32x4_to_shared_16x8_layout_b(thread_id, local_id):
    return (thread_id // 16) * 8 + thread_id % 8, ((thread_id % 16) // 8) * 4 + local_id % 4


def ldmatrix_32x8_to_shared_16x16_layout(thread_id, local_id):
    return thread_id % 16, 8 * (thread_id // 16) + local_id % 8


def ldmatrix_trans_32x8_to_shared_16x16_layout(thread_id, local_id):
    return 8 * (thread_id // 16) + thread_id % 8, 8 * ((thread_id % 16) // 8) + local_id % 8


def ldmatrix_32x16_to_shared_16x32_layout_a(thread_id, local_id):
    return thread_id % 16, local_id + (thread_id // 16) * 16


def ldmatrix_32x16_to_shared_16x32_layout_b(thread_id, local_id):
    return (thread_id // 16) * 8 + thread_id % 8, local_id + 16 * ((thread_id % 16) // 8)


# The accumulator (C/D) of m16n8k16 over a 16 x 16 tile (two n8 atoms): lane = 4 * (row % 8) + col % 8 // 2.
def mma_store_32x8_to_shared_16x16_layout(thread_id, local_id):
    return 8 * (local_id % 4 // 2) + thread_id // 4, 8 * (local_id // 4) + (thread_id % 4) * 2 + local_id % 2


mma_32x8_to_shared_16x16_layout = mma_store_32x8_to_shared_16x16_layout


def mma_store_32x2_to_shared_8x8_layout_fp64(thread_id, local_id):
    return thread_id // 4, (thread_id % 4) * 2 + local_id


# (row, col) of an operand tile -> (lane, register element); "sr": rows spatial (M or N), columns the reduction K;
# "rs": the transposed tile. A: 16 x K, B: 16 (two n8 atoms) x K.
def shared_16x8_to_mma_a_32x4_layout(i, j):
    return 4 * (i % 8) + j % 4, 2 * (j // 4) + i // 8


def shared_16x8_to_mma_b_32x4_layout(i, j):
    return 4 * (i % 8) + j % 4, 2 * (i // 8) + j // 4


def shared_16x16_to_mma_a_32x8_layout(i, j):
    return 4 * (i % 8) + (j % 8) // 2, 4 * (j // 8) + (i // 8) * 2 + j % 2


def shared_16x16_to_mma_b_32x8_layout(i, j):
    return 4 * (i % 8) + (j % 8) // 2, 4 * (i // 8) + (j // 8) * 2 + j % 2


def shared_16x32_to_mma_a_32x16_layout(i, j):
    return 4 * (i % 8) + (j % 16) // 4, 8 * (j // 16) + (i // 8) * 4 + j % 4


def shared_16x32_to_mma_b_32x16_layout(i, j):
    return 4 * (i % 8) + (j % 16) // 4, 8 * (i // 8) + (j // 16) * 4 + j % 4


def _transposed(fn):
    def swapped(i, j):
        return fn(j, i)

    swapped.__name__ = fn.__name__ + "_trans"
    return swapped


shared_16x8_to_mma_a_32x4_layout_trans = _transposed(shared_16x8_to_mma_a_32x4_layout)
shared_16x8_to_mma_b_32x4_layout_trans = _transposed(shared_16x8_to_mma_b_32x4_layout)
shared_16x16_to_mma_a_32x8_layout_trans = _transposed(shared_16x16_to_mma_a_32x8_layout)
shared_16x16_to_mma_b_32x8_layout_trans = _transposed(shared_16x16_to_mma_b_32x8_layout)
shared_32x16_to_mma_a_32x16_layout_trans = _transposed(shared_16x32_to_mma_a_32x16_layout)
shared_32x16_to_mma_b_32x16_layout_trans = _transposed(shared_16x32_to_mma_b_32x16_layout)

shared_16x8_to_mma_32x4_layout_sr_a = shared_16x8_to_mma_a_32x4_layout
shared_16x8_to_mma_32x4_layout_sr_b = shared_16x8_to_mma_b_32x4_layout
shared_16x8_to_mma_32x4_layout_rs_a = shared_16x8_to_mma_a_32x4_layout_trans
shared_16x8_to_mma_32x4_layout_rs_b = shared_16x8_to_mma_b_32x4_layout_trans
shared_16x16_to_mma_32x8_layout_sr_a = shared_16x16_to_mma_a_32x8_layout
shared_16x16_to_mma_32x8_layout_sr_b = shared_16x16_to_mma_b_32x8_layout
shared_16x16_to_mma_32x8_layout_rs_a = shared_16x16_to_mma_a_32x8_layout_trans
shared_16x16_to_mma_32x8_layout_rs_b = shared_16x16_to_mma_b_32x8_layout_trans
shared_16x32_to_mma_32x16_layout_sr_a = shared_16x32_to_mma_a_32x16_layout
shared_16x32_to_mma_32x16_layout_sr_b = shared_16x32_to_mma_b_32x16_layout
shared_16x32_to_mma_32x16_layout_rs_a = shared_32x16_to_mma_a_32x16_layout_trans
shared_16x32_to_mma_32x16_layout_rs_b = shared_32x16_to_mma_b_32x16_layout_trans


# (lane, register element) -> (row, col) of the operand tile the mma reads from each lane's registers: A as
# (M, K), B as (N, K) ("_b": B's rows are N); with g = lane // 4, t = lane % 4 (PTX ISA mma.m16n8k16 / m16n8k32).
def mma_load_a_32x8_to_shared_16x16_layout(thread_id, local_id):
    return thread_id // 4 + 8 * (local_id % 4 // 2), (thread_id % 4) * 2 + local_id % 2 + 8 * (local_id // 4)


def mma_load_b_32x8_to_shared_16x16_layout(thread_id, local_id):
    return thread_id // 4 + 8 * (local_id // 4), (thread_id % 4) * 2 + local_id % 4 % 2 + (local_id % 4 // 2) * 8


def mma_load_a_32x16_to_shared_16x32_layout(thread_id, local_id):
    return 8 * (local_id % 8 // 4) + thread_id // 4, 16 * (local_id // 8) + (thread_id % 4) * 4 + local_id % 4


def mma_load_b_32x16_to_shared_16x32_layout(thread_id, local_id):
    return 8 * (local_id // 8) + thread_id // 4, 16 * (local_id % 8 // 4) + (thread_id % 4) * 4 + local_id % 4


def get_swizzle_layout(row_idx, col_idx, row_size, dtype, swizzle_bytes=None):
    """(column block, row, swizzled column) of element (row_idx, col_idx) of a tile with ``row_size`` columns: the row
    is cut into blocks of ``swizzle_bytes`` (default: the row's bytes, at most 128), and within a block the 16-byte
    chunk ``c`` of row ``r`` is stored at chunk ``c ^ ((r % 8) // (8 // chunks_per_block))``."""
    bits = DataType(dtype).bits
    row_bytes = bits * row_size // 8
    if row_bytes % 32:
        raise ValueError(f"get_swizzle_layout: a row of {row_bytes} bytes; rows must be a multiple of 32 bytes")
    vectors = int(swizzle_bytes if swizzle_bytes is not None else min(128, row_bytes)) // 16
    per_chunk = 128 // bits
    chunk = col_idx // per_chunk
    xor = (row_idx % 8) // (8 // vectors)
    return chunk // vectors, row_idx, ((chunk % vectors) ^ xor) * per_chunk + col_idx % per_chunk


def make_mma_swizzle_layout(shared_buf, is_smooth: bool = False):
    """``T.Layout`` of ``get_swizzle_layout`` over the last two dims of ``shared_buf`` (identity when ``is_smooth`` or
    when its rows are not a multiple of 64 bytes)."""
    shape = tuple(shared_buf.shape)
    dtype = shared_buf.dtype
    if is_smooth or int(shape[-1]) * DataType(dtype).bits % 512:
        return Layout(shape, lambda *idx: idx)

    def forward(*idx):
        return [*idx[:-2], *get_swizzle_layout(idx[-2], idx[-1], shape[-1], dtype)]

    return Layout(shape, forward)
