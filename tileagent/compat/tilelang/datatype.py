"""``tilelang.DataType`` (TVM's ``DataType``): a dtype name with ``bits``, ``lanes`` and type predicates.

In: a dtype spelling (``"float16"``, ``"int8x4"``, ``T.float16``, a torch dtype). Out: a ``str`` subclass equal to the
canonical name. Guarantees: unknown names raise ``ValueError`` with the known ones.
"""

from __future__ import annotations

import re

from tileagent.compiler.dtypes import SUB_BYTE as _SUB_BYTE, DType, UnsupportedDType, dtype as as_dtype


class DataType(str):
    """``DataType("float16").bits == 16``; ``DataType("int8x4").lanes == 4``."""

    def __new__(cls, value):
        text = str(value) if not isinstance(value, str) else value
        lanes = 1
        m = re.fullmatch(r"(.+?)x(\d+)", text)
        if m and not text.startswith("float8_e"):
            text, lanes = m.group(1), int(m.group(2))
        if text in _SUB_BYTE:
            base, bits = text, _SUB_BYTE[text]
        else:
            try:
                base = as_dtype(value if lanes == 1 and not isinstance(value, str) else text)
            except UnsupportedDType as e:
                raise ValueError(str(e)) from None
            bits = DType(base).bits
        self = super().__new__(cls, base if lanes == 1 else f"{base}x{lanes}")
        self.base, self.bits, self.lanes = str(base), bits, lanes
        return self

    @property
    def type_code(self) -> str:
        b = self.base
        return "bfloat" if b.startswith("bfloat") else "float" if b.startswith("float") else \
            "uint" if b.startswith("uint") else "bool" if b == "bool" else "int"

    def is_float(self) -> bool:
        return self.base.startswith(("float", "bfloat"))

    def is_float8(self) -> bool:
        return self.base.startswith("float8")

    def is_int(self) -> bool:
        return self.base.startswith("int")

    def is_uint(self) -> bool:
        return self.base.startswith("uint")

    def is_bool(self) -> bool:
        return self.base == "bool"

    def with_lanes(self, lanes: int) -> "DataType":
        return DataType(self.base if lanes == 1 else f"{self.base}x{lanes}")

    @property
    def itemsize(self) -> int:
        return max(1, self.bits * self.lanes // 8)


__all__ = ["DataType"]
