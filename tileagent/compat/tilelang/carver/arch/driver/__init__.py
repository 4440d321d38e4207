"""``tilelang.carver.arch.driver``: TileLang's CUDA device queries, with its names, signatures and results.

In: a device id (default 0). Out: the device's properties read through torch (``torch.cuda.get_device_properties``).
Guarantees: ``get_cuda_device_properties`` / ``get_device_name`` give None without a CUDA device, as TileLang's do;
the size queries raise ``RuntimeError("Failed to get device properties.")`` then (TileLang's message), never an
AttributeError. ``format`` is one of ``bytes``, ``kb``, ``mb`` (ValueError otherwise).
"""

from __future__ import annotations

_FORMATS = {"bytes": 1, "kb": 1024, "mb": 1024 * 1024}


def get_cuda_device_properties(device_id: int = 0):
    """torch's properties of CUDA device ``device_id``, or None when torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(device_id)


def _props(device_id: int):
    prop = get_cuda_device_properties(device_id)
    if prop is None:
        raise RuntimeError("Failed to get device properties.")
    return prop


def _scaled(value: int, format: str) -> int:
    if format not in _FORMATS:
        raise ValueError(f"Invalid format {format!r}. Must be one of: bytes, kb, mb")
    return int(value) // _FORMATS[format]


def get_device_name(device_id: int = 0) -> str | None:
    prop = get_cuda_device_properties(device_id)
    return prop.name if prop is not None else None


def get_num_sms(device_id: int = 0) -> int:
    """The number of streaming multiprocessors (132 on an H100/H200 SXM)."""
    return int(_props(device_id).multi_processor_count)


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:
    """Shared memory a block gets without opting in (48 KiB on current GPUs)."""
    return _scaled(_props(device_id).shared_memory_per_block, format)


def get_max_dynamic_shared_size_bytes(device_id: int = 0, format: str = "bytes") -> int:
    """Shared memory per multiprocessor (TileLang reads cudaDevAttrMaxSharedMemoryPerMultiprocessor)."""
    return _scaled(_props(device_id).shared_memory_per_multiprocessor, format)


def get_registers_per_block(device_id: int = 0) -> int:
    """32-bit registers per block (torch reports the per-multiprocessor count, equal to it on sm_80 and sm_90)."""
    return int(_props(device_id).regs_per_multiprocessor)


def get_persisting_l2_cache_max_size(device_id: int = 0) -> int:
    """The L2 cache size in bytes (an upper bound of the persisting part TileLang reports)."""
    return int(_props(device_id).L2_cache_size)


__all__ = ["get_cuda_device_properties", "get_device_name", "get_max_dynamic_shared_size_bytes", "get_num_sms",
           "get_persisting_l2_cache_max_size", "get_registers_per_block", "get_shared_memory_per_block"]
