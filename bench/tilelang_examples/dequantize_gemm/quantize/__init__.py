# From TileLang (https://github.com/tile-ai/tilelang), examples/dequantize_gemm/quantize/__init__.py at commit a35008a.
# MIT License, Copyright (c) Tile-AI (bench/tilelang_examples/LICENSE). Unmodified below this header.
from .quantization import (
    _tir_packed_int_to_int_convert,  # noqa: F401
    _tir_packed_to_signed_convert,  # noqa: F401
    _tir_packed_to_unsigned_convert,  # noqa: F401
    _tir_packed_to_fp4_to_f16,  # noqa: F401
    _tir_u8_to_f8_e4m3_to_f16,  # noqa: F401
    _tir_packed_to_unsigned_convert_with_zeros,  # noqa: F401
    _tir_u8_to_f4_to_bf16,  # noqa: F401
)

from .utils import (
    gen_quant4,  # noqa: F401
    general_compress,  # noqa: F401
    interleave_weight,  # noqa: F401
)

from .lop3 import get_lop3_intrin_group  # noqa: F401
from .mxfp import get_mxfp_intrin_group  # noqa: F401
from .nvfp4 import (  # noqa: F401
    pack_blockscaled_chunk_kmajor_scale_bytes,
    quantize_bf16_to_nvfp4_blockscaled,
    swizzle_blockscaled_chunk_kmajor_scale_words,
    unswizzle_blockscaled_chunk_kmajor_scale_words,
)
