"""Data types of the tile DSL.

In: a dtype as users write it: a string (``"float16"``, ``"float"``, ``"half"``), a ``T.float16``-style name, or a
torch dtype. Out: a canonical :class:`DType`, a ``str`` subclass holding the TileLang spelling (``"float32"``).
Guarantees: every DType names a type the compiler can store; unknown names raise :class:`UnsupportedDType`.
"""

from __future__ import annotations

import torch

# canonical name -> torch dtype used to hold values of that type on the host
_TORCH = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "tfloat32": torch.float32,  # TensorFloat-32: float32 storage holding values of 10 mantissa bits (round_tf32)
    "float64": torch.float64,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "bf16": "bfloat16",
            "fp16": "float16", "fp32": "float32", "float8_e4m3": "float8_e4m3fn",  # TileLang: e4m3 is e4m3fn on CUDA
            "uint": "uint32", "long": "int64", "short": "int16", "ulong": "uint64",  # TileLang's C-style names
            "tf32": "tfloat32", "custom[tfloat32]": "tfloat32",
            "handle": "int64"}  # T.ptr: a device address, an int64 of data_ptr() (compiler.language.pointers)
SUB_BYTE = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2, "int1": 1, "uint1": 1, "float4_e2m1fn": 4,
            "float6_e2m3fn": 6, "float6_e3m2fn": 6}
"""Sub-byte dtype names TileLang has (TileAgent knows their widths; it stores only those of ``PACKED``)."""
PACKED = {"int4": "int8", "uint4": "uint8"}
"""Sub-byte dtypes a tensor or tile may have, each stored two to a byte: element 2k in the low nibble of byte k,
2k + 1 in the high one (as torch code packs int4 into int8). Such a buffer is a buffer of the byte dtype with half
the last dim, marked ``Buffer.packed`` (``compiler.language.packed``)."""
_BITS = {"bool": 8, "float8_e4m3fn": 8, "float8_e5m2": 8}  # the rest filled in by DType.bits


class UnsupportedDType(ValueError):
    """A dtype the DSL does not know; the message lists the known ones."""


class DType(str):
    """A canonical dtype name. Calling it builds a constant: ``T.float32(0)``."""

    def __call__(self, value=0):
        from tileagent.compiler.ir.expr import Const

        return Const(value, self)

    @property
    def is_float(self) -> bool:
        return self.startswith(("float", "bfloat", "tfloat"))

    @property
    def is_int(self) -> bool:
        return self.startswith(("int", "uint"))

    @property
    def is_bool(self) -> bool:
        return self == "bool"

    @property
    def bits(self) -> int:
        bits = _BITS.get(self)
        if bits is None:  # every canonical name once (the compiler asks thousands of times per kernel)
            bits = _BITS[str(self)] = int("".join(ch for ch in self.split("_")[0] if ch.isdigit()))
        return bits

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def torch(self) -> torch.dtype:
        return _TORCH[self]

    def as_torch(self) -> torch.dtype:
        """The torch dtype (TileLang's ``T.float16.as_torch()``)."""
        return _TORCH[self]


def dtype(value) -> DType:
    """Normalize a user-written dtype to its canonical DType; raise UnsupportedDType otherwise."""
    if isinstance(value, DType):
        return value
    if isinstance(value, torch.dtype):
        for name, td in _TORCH.items():
            if td == value:
                return DType(name)
        raise UnsupportedDType(f"unsupported dtype {value}; known: {', '.join(_TORCH)}")
    if isinstance(value, str):
        name = _ALIASES.get(value, value)
        if name in _TORCH:
            return DType(name)
        if name in SUB_BYTE:
            raise UnsupportedDType(f"sub-byte dtype {name} ({SUB_BYTE[name]} bits) is not supported as a buffer or "
                                   f"value dtype; store such data packed in int8/uint8 and unpack it with shifts and "
                                   f"masks")
    raise UnsupportedDType(f"unsupported dtype {value!r}; known: {', '.join(_TORCH)}")


def packed_name(value) -> str | None:
    """The canonical name of ``value`` when it is a packed sub-byte dtype (``PACKED``: int4, uint4), else None."""
    name = _ALIASES.get(value, value) if isinstance(value, str) else None
    return name if name in PACKED else None


def from_python(value) -> DType:
    """The dtype a Python literal takes when nothing else decides it."""
    if isinstance(value, bool):
        return DType("bool")
    if isinstance(value, int):
        return DType("int32") if -(2**31) <= value < 2**31 else DType("int64")
    return DType("float32")


def promote(a: DType, b: DType) -> DType:
    """The dtype of a binary operation on a and b (TVM rules: float beats int, wider beats narrower)."""
    if a == b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return DType("float32") if a.is_float else a  # float16 vs bfloat16 (or float32 vs tfloat32): float32


KNOWN = tuple(_TORCH)
