"""``tilelang.utils``: ``TensorSupplyType`` and tensor helpers (``tilelang.utils.tensor``)."""

from tileagent.compiler.profiler import TensorSupplyType
from tileagent.compat.tilelang.utils.tensor import map_torch_type, torch_assert_close

__all__ = ["TensorSupplyType", "map_torch_type", "torch_assert_close"]
