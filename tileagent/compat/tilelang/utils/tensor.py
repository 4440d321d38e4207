"""``tilelang.utils.tensor``: ``torch_assert_close`` (mismatch-ratio tolerant), ``map_torch_type``,
``TensorSupplyType``."""

import torch

from tileagent.compiler.dtypes import dtype as as_dtype
from tileagent.compiler.profiler import TensorSupplyType, torch_assert_close


def map_torch_type(name: str) -> torch.dtype:
    """The torch dtype of a TileLang dtype name (``"float16"`` -> ``torch.float16``)."""
    return as_dtype(name).torch


__all__ = ["TensorSupplyType", "get_tensor_supply", "map_torch_type", "torch_assert_close"]


def get_tensor_supply(supply_type: TensorSupplyType = TensorSupplyType.Integer):
    """A function ``param -> tensor`` (``param`` has ``shape`` and ``dtype``/``torch_dtype()``) filling tensors as
    ``supply_type`` says, on the current CUDA device when there is one."""
    from tileagent.compiler.profiler import supply_tensor

    def get_tensor(param) -> torch.Tensor:
        dt = param.torch_dtype() if callable(getattr(param, "torch_dtype", None)) else param.dtype
        if not isinstance(dt, torch.dtype):
            dt = as_dtype(dt).torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return supply_tensor(tuple(int(d) for d in param.shape), dt, supply_type, device)

    return get_tensor
