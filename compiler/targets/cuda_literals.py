"""C types and literals of the IR's dtypes, as the CUDA target writes them.

In: a dtype (``compiler.dtypes.DType``) and a Python number. Out: C++ text.
Guarantees: an integer literal is wrapped to the dtype's width and written so that C reads the same value (the most
negative value as an expression, 64-bit ones with LL/ull); a float32 literal is the shortest decimal that reads back
as the same float32, with an ``f`` suffix; NaN and infinities are bit patterns (NVRTC has no literal for them).
Constants are rounded to float16/bfloat16 (``round_to``, ``bits16``) in plain Python, as torch rounds them: code
generation may run inside a forward whose torch ops the evaluator's guards watch. ``tfloat32`` is a ``float`` that
the code keeps rounded with ``tl_round_tf32`` (``TF32_HELPERS``).
"""

from __future__ import annotations

import math
import struct

from tileagent.compiler.dtypes import DType

CTYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long",
    "float16": "half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
    "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2", "tfloat32": "float",
}
TF32_HELPERS = {  # tfloat32 values are floats whose 13 low mantissa bits are zero (compiler.intrinsics.round_tf32)
    "tf32": """\
// A float rounded to TensorFloat-32 (10 mantissa bits): to nearest, ties to even, as CUTLASS's tfloat32_t(float);
// infinities and NaNs unchanged.
__device__ __forceinline__ float tl_round_tf32(float x) {
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  return __uint_as_float((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
}""",
}


def int_literal(value: int, dt: DType, wide: bool) -> str:
    """``value`` as a C literal of integer dtype ``dt`` (wrapped to its width; ``wide``: as a 64-bit literal)."""
    bits = dt.bits
    unsigned = dt.startswith("uint")
    v = int(value) % (1 << bits)
    if not unsigned and v >= 1 << (bits - 1):
        v -= 1 << bits
    if wide or bits == 64:
        if unsigned:
            return f"{v}ull"
        return "(-9223372036854775807LL - 1)" if v == -(1 << 63) else (f"({v}LL)" if v < 0 else f"{v}LL")
    if bits == 32:
        if unsigned:
            return f"{v}u"
        return "(-2147483647 - 1)" if v == -(1 << 31) else (f"({v})" if v < 0 else str(v))
    return f"(({CTYPES[dt]}){v})"


def float_literal(value: float, dt: DType) -> str:
    """``value`` as a C literal of ``dt`` (float32: the shortest decimal that reads back as the same float32;
    NaN and infinities as bit patterns)."""
    v = float(value)
    double = dt == "float64"
    if math.isnan(v):
        return "__longlong_as_double(0x7ff8000000000000LL)" if double else "__int_as_float(0x7fffffff)"
    if not double:
        try:
            v = struct.unpack("f", struct.pack("f", v))[0]
        except OverflowError:
            v = math.copysign(math.inf, v)
    if math.isinf(v):
        inf = "__longlong_as_double(0x7ff0000000000000LL)" if double else "__int_as_float(0x7f800000)"
        return inf if v > 0 else f"(-{inf})"
    if double:
        s = repr(v)
    else:
        for p in range(1, 18):  # shortest decimal that reads back as the same float32
            s = f"{v:.{p}g}"
            if struct.unpack("f", struct.pack("f", float(s)))[0] == v:
                break
    if not any(c in s for c in ".en"):
        s += ".0"
    s += "" if double else "f"
    return f"({s})" if s.startswith("-") else s


def bits16(x: float, dt: str) -> int:
    """The bits of ``x`` rounded to nearest even as float16 or bfloat16 (without torch: this runs while a module
    compiles, possibly inside a forward that the evaluator's guards watch for torch ops)."""
    if dt == "float16":
        try:
            return struct.unpack("<H", struct.pack("<e", x))[0]
        except OverflowError:  # beyond float16's largest finite value after rounding
            return 0xFC00 if x < 0 else 0x7C00
    u = struct.unpack("<I", struct.pack("<f", round_to(x, "float32")))[0]
    if (u & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep it quiet
        return (u >> 16) | 0x40
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def round_to(x: float, dt: str) -> float:
    """``x`` rounded to the float dtype ``dt`` (float32, float16 or bfloat16; round to nearest even)."""
    if dt == "float16":
        return struct.unpack("<e", struct.pack("<H", bits16(x, dt)))[0]
    if dt == "bfloat16":
        return struct.unpack("<f", struct.pack("<I", bits16(x, dt) << 16))[0]
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


__all__ = ["CTYPES", "bits16", "float_literal", "int_literal", "round_to"]
