"""``T.reshape(src, shape)`` / ``T.view(src, shape)``: a buffer read in another shape over the same storage.

In: a buffer of the kernel and a shape of the same element count (compile-time integers for on-chip buffers). Out:
for a fragment or a local buffer, an ``AllocSpec`` the frontend declares as ``Alloc(view, view_of=src)``: no storage
of its own, ``src``'s elements row-major in the new shape; for a global tensor, ``T.Tensor(shape, dtype, src.data)``
(the view ``compiler.frontend`` already makes of a global tensor's storage). Guarantees: writes through either name
are seen through the other, on every target. The interpreter views the same torch storage. A local view reuses its
base's register array (both are row-major). A fragment view's layout is its base's, cut at the new dims
(``compiler.layout.fragment.reshape``): every element stays on the thread and register that holds it, so nothing
moves at run time; layout inference ties the two (whichever gets a layout first fixes the other's), and where no
layout of the new shape keeps the elements in place (a new dim's size does not divide the run of the base's layout
levels it cuts, e.g. 16 columns cut into 3-wide rows) it is an ``L006`` naming both buffers. Shared buffers: E701
(their swizzled layouts do not reshape); a different element count E402; ``T.view`` with another dtype E701.
"""

from __future__ import annotations

import math

from tileagent.compiler.diagnostics import DSLTypeError, ShapeError, UnsupportedError
from tileagent.compiler.ir.stmt import Buffer
from tileagent.compiler.language.kernel import AllocSpec, _shape


def reshape(src, shape):
    """``T.reshape(src, shape)``: ``src`` (a fragment, local buffer or global tensor) read row-major as ``shape``."""
    if not isinstance(src, Buffer):
        raise DSLTypeError(f"T.reshape: the source must be a buffer, got {src!r}", code="E309")
    if src.scope == "global":
        from tileagent.compiler.language.types import BufferData, Tensor

        return Tensor(shape, src.dtype, BufferData(src))
    if src.scope == "shared":
        raise UnsupportedError(f"T.reshape of shared buffer '{src.name}' is not supported: shared tiles get swizzled "
                               f"layouts that do not carry over to another shape",
                               hint=f"allocate '{src.name}' in the shape you index it with, or compute its indices")
    new = _shape(shape, "T.reshape")
    if math.prod(new) != math.prod(src.shape):
        raise ShapeError(f"T.reshape of '{src.name}' {tuple(src.shape)} to {new}: {math.prod(src.shape)} elements vs "
                         f"{math.prod(new)}", code="E402", hint="a reshape keeps the number of elements")
    return AllocSpec(new, src.dtype, "fragment" if src.scope == "fragment" else "local", view_of=src)


def view(src, shape=None, dtype=None):
    """``T.view(src, shape=None, dtype=None)``: ``T.reshape`` when the dtype stays; another dtype is an E701."""
    if dtype is not None and isinstance(src, Buffer) and str(dtype) != str(src.dtype):
        raise UnsupportedError(f"T.view of '{src.name}' as {dtype}: reinterpreting a buffer's bytes as another dtype "
                               f"is not supported", hint="convert element by element with T.reinterpret(value, dtype)")
    return reshape(src, src.shape if shape is None else shape)
