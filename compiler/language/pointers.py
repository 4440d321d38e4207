"""``T.ptr`` and ``T.make_tensor``: global tensors at device addresses that a kernel reads from memory.

In: ``T.Tensor([n], T.ptr)``, a parameter holding n device addresses (an int64 tensor of ``data_ptr()`` values),
and, inside a T.Kernel, ``X = T.make_tensor(address, shape, dtype)`` with an integer address expression
(TileLang's grouped GEMM by pointer tables: ``A = T.make_tensor(A_ptrs[g], (M, K), dtype)``). Out: an ``AllocSpec``
of scope "global" whose ``init`` is the address; the frontend declares ``Alloc(X, init=address)``: a contiguous,
row-major global tensor at that address for the rest of the kernel, read and written like a parameter.
Guarantees: the address is evaluated once where the tensor is made and must be the same for every thread of a block
(the interpreter and the emulator fault otherwise); a kernel that makes such tensors lowers without TMA (tensor maps
are encoded on the host from the tensors it passes); vector accesses assume 16-byte aligned addresses, as torch
allocations are and as TileLang assumes. The CPU interpreter and the SIMT emulator read host memory at the address:
on the CPU the addresses are those of CPU tensors (``compiler.runtime.host_memory``).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError, UnsupportedError
from tileagent.compiler.dtypes import UnsupportedDType, dtype as as_dtype
from tileagent.compiler.ir.expr import Expr, describe
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.language.kernel import AllocSpec


class _Pointer(str):
    """``T.ptr``: the dtype of a device address (int64). ``T.ptr(dtype)`` is the same: the pointee's dtype is given
    where the address becomes a tensor (``T.make_tensor``)."""

    def __call__(self, dtype=None, storage_scope: str = "global", *, is_size_var: bool = False):
        if storage_scope != "global":
            raise UnsupportedError(f"T.ptr(storage_scope={storage_scope!r}): only global addresses are supported",
                                   hint="make tensors at global addresses; shared tiles come from T.alloc_shared")
        return self


ptr = _Pointer("handle")


def make_tensor(ptr, shape, dtype="float32", strides=None) -> AllocSpec:
    """``T.make_tensor(address, shape, dtype="float32")``: the contiguous global tensor at ``address``."""
    if strides is not None:
        raise UnsupportedError("T.make_tensor(..., strides=...) is not supported: the tensor is contiguous, row-major",
                               hint="pass the shape of the whole row-major storage and index into it")
    if not isinstance(ptr, Expr) or isinstance(ptr, bool):
        raise DSLTypeError(f"T.make_tensor: the address must be an integer expression of the kernel (an element "
                           f"of a T.ptr tensor), got {describe(ptr)}", code="E309",
                           hint="pass the addresses in a T.Tensor([n], T.ptr) parameter and read one: A_ptrs[g]")
    if not ptr.dtype.is_int or ptr.dtype.bits != 64:
        raise DSLTypeError(f"T.make_tensor: the address is {ptr.dtype}, not a 64-bit integer", code="E302",
                           hint="read it from a T.Tensor([n], T.ptr) parameter (int64 data_ptr() values)")
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, Expr)) or (static_int(d) is not None and static_int(d) < 1):
            raise DSLTypeError(f"T.make_tensor: shape entries must be positive ints or size expressions, got "
                               f"{shape!r}", code="E105")
    try:
        dt = as_dtype(dtype)
    except UnsupportedDType as e:
        raise DSLTypeError(f"T.make_tensor: {e}", code="E302") from None
    return AllocSpec(dims, dt, "global", ptr)
