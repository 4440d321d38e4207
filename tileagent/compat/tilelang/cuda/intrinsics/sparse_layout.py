"""``tilelang.cuda.intrinsics.sparse_layout``: TileLang's 2:4 semi-structured sparsity metadata helpers, which its
example compressor (``examples/gemm_sp/sparse_utils.py``) imports.

In: an operand dtype and a metadata dtype (any spelling ``T.dtype`` takes). Out: ``GROUP_CONFIG`` (operand dtype ->
(kept, group): 1 of 2 float32 elements, 2 of 4 for 16- and 8-bit ones), ``get_e_factor`` (operand elements one
metadata element indexes: 4 bits of metadata per group) and ``get_e_replicate_factor`` (threads that share one
metadata value: 1 for 8-bit operands, else 2), with TileLang's names, arguments and values.
Guarantees: pure metadata arithmetic; the sparse GEMM itself is ``T.gemm_sp`` (``compiler.language.sparse``).
"""

from __future__ import annotations

from tileagent.compat.tilelang.language import dtype

GROUP_CONFIG = {dtype(name): group for name, group in (
    ("float32", (1, 2)), ("float16", (2, 4)), ("bfloat16", (2, 4)), ("int8", (2, 4)), ("uint8", (2, 4)),
    ("float8_e4m3fn", (2, 4)), ("float8_e5m2", (2, 4)))}

_BITS_PER_GROUP = 4


def get_e_factor(a_dtype, meta_dtype) -> int:
    """How many ``a_dtype`` elements one ``meta_dtype`` element indexes."""
    _, group = GROUP_CONFIG[dtype(a_dtype)]
    return dtype(meta_dtype).bits // _BITS_PER_GROUP * group


def get_e_replicate_factor(a_dtype) -> int:
    """How many consecutive threads share one metadata value."""
    return 1 if dtype(a_dtype).bits <= 8 else 2


__all__ = ["GROUP_CONFIG", "get_e_factor", "get_e_replicate_factor"]
