"""Host memory at an address, as a torch tensor: what ``T.make_tensor(address, ...)`` reads on the CPU targets.

In: an integer address (a CPU tensor's ``data_ptr()``, as a program's pointer table holds it), an element count and
a dtype. Out: a flat tensor over that memory (no copy: writes through it land in the tensor that owns the memory).
Guarantees: a null, negative or misaligned address is a ``KernelFault`` naming the tensor and the DSL line; memory
that no live tensor owns cannot be detected here (as on a GPU, it is undefined behaviour: the process may crash).
"""

from __future__ import annotations

import ctypes

import torch

from tileagent.compiler.errors import KernelFault


def tensor_at(address, numel: int, dtype, name: str, span=None) -> torch.Tensor:
    """The ``numel`` elements of ``dtype`` (a DType) at host ``address``, flat. ``address``: an int or a tensor whose
    elements (one per thread) must all be equal."""
    if isinstance(address, torch.Tensor):
        flat = address.reshape(-1)
        if flat.numel() > 1 and bool((flat != flat[0]).any()):
            raise KernelFault(f"T.make_tensor '{name}': the threads of a block read different addresses", span)
        address = int(flat[0])
    address = int(address)
    if address <= 0 or address % dtype.bytes:
        raise KernelFault(f"T.make_tensor '{name}': address {address:#x} is null, negative or not aligned to its "
                          f"{dtype.bytes}-byte {dtype} elements", span)
    raw = (ctypes.c_char * (numel * dtype.bytes)).from_address(address)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype.torch)
