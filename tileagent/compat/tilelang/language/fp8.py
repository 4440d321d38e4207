"""``tilelang.language.fp8``: the FP8 dtype of the platform (``determine_fp8_type``, ``determine_torch_fp8_type``).

In: the format TileLang programs ask for, ``"e4m3"`` or ``"e5m2"``. Out: ``T.float8_e4m3fn`` / ``T.float8_e5m2`` (the
OCP formats NVIDIA GPUs use), or the torch dtype of the same name.
Guarantees: TileLang's results on CUDA; an unknown format is a ValueError as in TileLang; on ROCm (the FNUZ formats)
an ``UnsupportedError`` (E701), since TileAgent targets NVIDIA GPUs only.
"""

from __future__ import annotations

import torch

from tileagent.compiler.diagnostics import UnsupportedError
from tileagent.compiler.dtypes import DType


def determine_fp8_type(fp8_format: str = "e4m3") -> DType:
    """The FP8 dtype for ``fp8_format`` ("e4m3" or "e5m2") on this platform."""
    if fp8_format not in ("e4m3", "e5m2"):
        raise ValueError(f"Unsupported FP8 format: {fp8_format}")
    if torch.version.hip is not None:
        raise UnsupportedError("FP8 on ROCm (float8_e4m3fnuz/e5m2fnuz) is not supported: TileAgent targets NVIDIA "
                               "GPUs", hint="run on a CUDA build of torch")
    return DType("float8_e4m3fn" if fp8_format == "e4m3" else "float8_e5m2")


def determine_torch_fp8_type(fp8_format: str = "e4m3") -> torch.dtype:
    """The torch dtype of ``determine_fp8_type(fp8_format)``."""
    return determine_fp8_type(fp8_format).torch


__all__ = ["determine_fp8_type", "determine_torch_fp8_type"]
