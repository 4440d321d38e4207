"""``tilelang.language.dtypes``: TileLang's dtype module (``dtype``, the dtype names, ``_TORCH_DTYPE_TO_STR``).

In: imports such as ``from tilelang.language.dtypes import _TORCH_DTYPE_TO_STR, dtype`` (TileLang's 2:4 sparse GEMM
helpers use that table to turn a torch dtype into a TileLang one).
Out: ``dtype`` is ``T.dtype`` (a canonical dtype from any spelling: a name, a torch dtype, a dtype), the dtype names
are ``T``'s (``float16``, ``bfloat16``, ``int8``, ``float8_e4m3fn``...), and ``_TORCH_DTYPE_TO_STR`` maps each torch
dtype TileLang's table lists (those this torch has) to its canonical name, as TileLang's does.
Guarantees: the same objects as ``tilelang.language`` (``dtypes.float16 is T.float16``).
"""

from __future__ import annotations

import torch

from tileagent.compat.tilelang.language import (  # noqa: F401 -- the names TileLang's module exports
    bfloat16, bool, double, dtype, float, float8_e4m3fn, float8_e5m2, float16, float32, float64, half, int, int8,
    int16, int32, int64, long, short, uint, uint8, uint16, uint32, uint64)

# TileLang's table (tilelang/language/dtypes.py), the extended entries only where this torch has the dtype
_TORCH_DTYPE_TO_STR = {
    torch.bool: "bool", torch.short: "int16", torch.int: "int32", torch.long: "int64", torch.half: "float16",
    torch.float: "float32", torch.double: "float64", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
    torch.int64: "int64", torch.uint8: "uint8", torch.float16: "float16", torch.float32: "float32",
    torch.float64: "float64", torch.bfloat16: "bfloat16",
}
for _name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
              "float8_e8m0fnu", "float4_e2m1fnx2"):
    if hasattr(torch, _name):
        _TORCH_DTYPE_TO_STR[getattr(torch, _name)] = _name
del _name

__all__ = ["bfloat16", "bool", "double", "dtype", "float", "float8_e4m3fn", "float8_e5m2", "float16", "float32",
           "float64", "half", "int", "int8", "int16", "int32", "int64", "long", "short", "uint", "uint8", "uint16",
           "uint32", "uint64"]
