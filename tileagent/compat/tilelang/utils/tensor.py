"""``tilelang.utils.tensor``: ``torch_assert_close`` (mismatch-ratio tolerant), ``map_torch_type``,
``TensorSupplyType``."""

import torch

from tileagent.compiler.dtypes import dtype as as_dtype
from tileagent.compiler.profiler import TensorSupplyType, torch_assert_close


def map_torch_type(name: str) -> torch.dtype:
    """The torch dtype of a TileLang dtype name (``"float16"`` -> ``torch.float16``)."""
    return as_dtype(name).torch


__all__ = ["TensorSupplyType", "map_torch_type", "torch_assert_close"]
