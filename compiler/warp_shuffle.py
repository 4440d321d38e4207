"""Warp shuffles in per-thread code: TVM's ``T.tvm_warp_shuffle(mask, value, lane, width, warp_size)``, as TileLang's
Hadamard transform example writes it (CUDA's ``__shfl_sync(mask, value, lane, width)``).

In: a value and a source lane (expressions of a T.Kernel with per-thread code, ``T.get_thread_binding``), a constant
full mask and a constant width (a power of two up to 32). Out: the IR call ``Call("shfl", (value, lane, width))``
of the value's dtype; ``gather`` is its semantics on torch tensors over the block's threads, shared by the tile
interpreter and the SIMT emulator; the CUDA target emits ``__shfl_sync`` (``compiler.targets.cuda_shuffle``).
Guarantees: thread ``t`` gets the value of thread ``(t // width) * width + lane % width`` (the lane is taken modulo
the width, as CUDA does); a partial mask, a width that is not a constant power of two up to 32, or a call outside
per-thread code is an error (E701 / E301 / E505); a source thread outside the block is a fault at run time.
"""

from __future__ import annotations

import torch

from tileagent.compiler.diagnostics import DSLTypeError, UnsupportedError
from tileagent.compiler.ir.expr import Call, Const, as_expr, make_cast
from tileagent.compiler.dtypes import DType

SHFL = "shfl"
WIDTHS = (1, 2, 4, 8, 16, 32)
FULL_MASK = 0xFFFFFFFF


def _constant(x):
    return x if isinstance(x, int) and not isinstance(x, bool) else getattr(x, "value", None) \
        if isinstance(x, Const) else None


def tvm_warp_shuffle(mask, value, lane, width, warp_size=32, span=None) -> Call:
    from tileagent.compiler.language.extras import _thread_bindings

    _thread_bindings("T.tvm_warp_shuffle")
    m = _constant(mask)
    if m is None or (int(m) & FULL_MASK) != FULL_MASK:
        raise UnsupportedError(f"T.tvm_warp_shuffle with mask {mask!r}: only the full mask (0xFFFFFFFF, every lane "
                               f"of the warp taking part) is supported")
    w = _constant(width)
    if w not in WIDTHS:
        raise DSLTypeError(f"T.tvm_warp_shuffle: the width must be a constant power of two up to 32, got {width!r}",
                           code="E301")
    v = as_expr(value)
    return Call(SHFL, (v, make_cast(as_expr(lane), DType("int32")), Const(int(w), DType("int32"))), v.dtype)


def gather(value, lane, width: int, tid: torch.Tensor) -> torch.Tensor:
    """The shuffle on every thread ``tid`` of the block at once: ``value`` and ``lane`` are numbers or tensors over
    the threads. Raises IndexError naming the first thread whose source thread is outside the block."""
    n = len(tid)
    value = torch.as_tensor(value).expand(n) if torch.as_tensor(value).dim() == 0 else torch.as_tensor(value)
    lane = torch.as_tensor(lane, dtype=torch.int64)
    src = tid // width * width + torch.remainder(lane, width)
    bad = (src >= n).nonzero()
    if len(bad):
        t = int(bad[0])
        raise IndexError(f"warp shuffle in thread {t} reads thread {int(src.reshape(-1)[t] if src.dim() else src)}, "
                         f"outside the block of {n} threads")
    return value[src.expand(n) if src.dim() == 0 else src]


__all__ = ["FULL_MASK", "SHFL", "gather", "tvm_warp_shuffle"]
