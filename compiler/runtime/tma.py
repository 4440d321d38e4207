"""TMA tensor maps at launch: the rules a tensor must meet, and ``cuTensorMapEncodeTiled`` through cuda-python.

In: a kernel's ``compiler.tir.TensorMap`` (which global parameter, dims and strides as expressions of the scalar
parameters, box, swizzle), the tensor passed for it and the scalar values of the call.
Out: ``tensor_map_arg`` gives the 128 bytes of the encoded ``CUtensorMap`` as a ctypes array (the kernel takes it by
value, ``__grid_constant__``), or raises ``TmaUnsupported`` saying which rule the tensor breaks; ``problem`` checks the
rules alone (no driver needed).
Rules (cuda.h, ``cuTensorMapEncodeTiled``; checked before the driver sees them, so a tensor that breaks one never
faults): the global address a multiple of 16 bytes; every dim in [1, 2**32]; the strides of dims 1 .. rank - 1 in
bytes multiples of 16 and below 2**40; box dims in [1, 256]; the inner box (box[0] x element size) a multiple of 16
bytes and, with a swizzle, at most the swizzle width; rank 1 .. 5.
Guarantees: encodings are cached per (pointer, dtype, dims, strides, box, swizzle) (``cache_info``; at most
``CACHE_SIZE`` entries, least recently used dropped), so a kernel called again on the same tensors encodes nothing;
the driver is reached only through ``encode`` (tests replace it); the map embeds the address, so another tensor
(another pointer) is another entry.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict

from tileagent.compiler.instructions.tma import MAX_BOX, MAX_RANK, TMA_DTYPES

CACHE_SIZE = 4096
_CACHE: OrderedDict = OrderedDict()
_LOCK = threading.Lock()
_STATS = {"hits": 0, "misses": 0}


class TmaUnsupported(Exception):
    """The tensor passed for a TMA tensor map breaks one of TMA's rules (the message says which): the caller runs the
    kernel variant without TMA."""


def problem(ptr: int, dtype, dims, strides_bytes, box, swizzle: int) -> str | None:
    """Which TMA rule a tensor map over address ``ptr`` with ``dims`` (elements, innermost first), ``strides_bytes``
    (dims 1 .. rank - 1), ``box`` and ``swizzle`` (bytes, 0 = none) of elements of ``dtype`` breaks; None if
    none."""
    elem = dtype.bytes
    rank = len(dims)
    if str(dtype) not in TMA_DTYPES:
        return f"dtype {dtype} has no TMA data type"
    if not 1 <= rank <= MAX_RANK or len(box) != rank or len(strides_bytes) != rank - 1:
        return f"rank {rank} with {len(box)} box dims and {len(strides_bytes)} strides (want 1..{MAX_RANK}, one each)"
    if ptr % 16:
        return f"the global address 0x{ptr:x} is not 16-byte aligned"
    for d, n in enumerate(dims):
        if not 1 <= n <= 1 << 32:
            return f"dim {d} (innermost first) is {n}, outside [1, 2**32]"
    for d, s in enumerate(strides_bytes, start=1):
        if s % 16 or not 0 < s < 1 << 40:
            return f"the stride of dim {d} (innermost first) is {s} bytes, not a multiple of 16 below 2**40"
    for d, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            return f"box dim {d} is {b}, outside [1, {MAX_BOX}]"
    if box[0] * elem % 16:
        return f"the inner box is {box[0] * elem} bytes, not a multiple of 16"
    if swizzle and box[0] * elem > swizzle:
        return f"the inner box is {box[0] * elem} bytes, more than the {swizzle}-byte swizzle span"
    return None


def _driver():
    from tileagent.compiler.runtime.launch import _driver as driver

    return driver()


def encode(dtype, ptr: int, dims, strides_bytes, box, swizzle: int) -> bytes:
    """The 128 bytes of ``cuTensorMapEncodeTiled`` for these (checked) values: interleave none, L2 promotion 256 B,
    out-of-bounds elements filled with zeros. Raises TmaUnsupported when the driver refuses."""
    drv = _driver()
    from tileagent.compiler.runtime.launch import _check

    t = getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{TMA_DTYPES[str(dtype)]}")
    sw = getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}B" if swizzle else
                 "CU_TENSOR_MAP_SWIZZLE_NONE")
    err, tmap = drv.cuTensorMapEncodeTiled(
        t, len(dims), ptr, [drv.cuuint64_t(int(n)) for n in dims], [drv.cuuint64_t(int(s)) for s in strides_bytes],
        [drv.cuuint32_t(int(b)) for b in box], [drv.cuuint32_t(1)] * len(dims),
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != drv.CUresult.CUDA_SUCCESS:
        try:
            _check(drv, err, "cuTensorMapEncodeTiled")
        except Exception as e:  # noqa: BLE001 - KernelRuntimeError with the CUDA error's name
            raise TmaUnsupported(str(e)) from None
    return ctypes.string_at(tmap.getPtr(), 128)


def values(tm, tensor, scalars: dict) -> tuple:
    """(ptr, dims, strides in bytes) of TensorMap ``tm`` for ``tensor`` and the call's ``scalars``."""
    from tileagent.compiler.runtime.launch import eval_scalar

    elem = tm.buffer.dtype.bytes
    dims = tuple(int(eval_scalar(d, scalars)) for d in tm.dims)
    strides = tuple(int(eval_scalar(s, scalars)) * elem for s in tm.strides)
    return int(tensor.data_ptr()), dims, strides


def tensor_map_arg(tm, tensor, scalars: dict):
    """The kernel argument (a ctypes array of 16 uint64, CUtensorMap's bytes) of ``tm`` for ``tensor``; cached.

    Raises:
        TmaUnsupported: the tensor (or the call's sizes) breaks a TMA rule, or the driver refuses the encoding.
    """
    ptr, dims, strides = values(tm, tensor, scalars)
    key = (ptr, str(tm.buffer.dtype), dims, strides, tuple(tm.box), tm.swizzle)
    with _LOCK:
        arg = _CACHE.get(key)
        if arg is not None:
            _CACHE.move_to_end(key)
            _STATS["hits"] += 1
            return arg
    why = problem(ptr, tm.buffer.dtype, dims, strides, tm.box, tm.swizzle)
    if why is not None:
        raise TmaUnsupported(f"tensor map {tm.name} over '{tm.buffer.name}': {why}")
    raw = encode(tm.buffer.dtype, ptr, dims, strides, tm.box, tm.swizzle)
    arg = (ctypes.c_uint64 * 16).from_buffer_copy(raw)
    with _LOCK:
        _STATS["misses"] += 1
        _CACHE[key] = arg
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return arg


def cache_info() -> dict:
    """Hits, misses and entries of the encoding cache."""
    with _LOCK:
        return {**_STATS, "entries": len(_CACHE)}


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
        _STATS.update(hits=0, misses=0)


__all__ = ["CACHE_SIZE", "TmaUnsupported", "cache_info", "clear_cache", "encode", "problem", "tensor_map_arg",
           "values"]
