"""``tilelang.carver.arch``: its ``driver`` module; ``CUDA(target)``, TileLang's device model with its attributes
(``sm_version``, ``compute_capability``, ``compute_max_core``, ``smem_cap``, ``bandwidth``..., read through
``driver``; ``RuntimeError("Cannot find cuda device 0.")`` without one, as TileLang), for ``tilelang.tools.Analyzer``;
``CDNA``, ``get_arch``, ``auto_infer_current_arch`` import as ``Deferred`` stand-ins (E701 when used: the roller needs
them); other names are an E701 ``UnsupportedError``."""

from __future__ import annotations

from tileagent.compat.tilelang.carver import Deferred, unsupported_name
from tileagent.compat.tilelang.carver.arch import driver  # noqa: F401 -- `from tilelang.carver.arch import driver`

CDNA, get_arch, auto_infer_current_arch = (Deferred("tilelang.carver.arch", n) for n in (
    "CDNA", "get_arch", "auto_infer_current_arch"))


class CUDA:
    """TileLang's ``CUDA(target)`` device model (its attributes; the roller's methods are not provided)."""

    def __init__(self, target="cuda"):
        prop = driver.get_cuda_device_properties()
        if prop is None:
            raise RuntimeError("Cannot find cuda device 0.")
        self.target, self.platform, self.name = target, "CUDA", prop.name
        self.sm_version = prop.major * 10 + prop.minor
        self.compute_capability = f"{prop.major}{prop.minor}"
        self.compute_max_core, self.warp_size = int(prop.multi_processor_count), 32
        self.smem_cap = driver.get_shared_memory_per_block()
        self.max_smem_usage, self.reg_cap, self.sm_partition = 2 * self.smem_cap, 65536, 4
        self.l2_cache_size_bytes = int(prop.L2_cache_size)
        self.transaction_size = [32, 128]  # bytes
        self.bandwidth = [750, 12080]  # MB/s, TileLang's fixed figures (shared, global)

    def __repr__(self) -> str:
        return f"CUDA({self.target})"


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported_name("tilelang.carver.arch", name)
