"""The order in which the CPU interpreter runs a kernel's thread blocks.

In: ``blocks_backward(on)`` around calls of compiled kernels (the evaluator's candidate process, every second call).
Out: ``backward()``, read by ``compiler.interp`` at each T.Kernel: whether its blocks run last to first.
Guarantees: the default is first to last (bx fastest); kernels of a cluster keep their order whatever is set (the
interpreter's cluster emulation runs the blocks of a cluster in order). Why: a kernel whose result depends on the order
of its blocks (one block's plain write over another's, a read of what another block wrote in the same launch) is wrong
on a GPU, whose blocks run in no fixed order, yet right on the interpreter in its one order; run both ways on two calls
of the same inputs, it gives two results (red team, round 2 session 45: two such kernels passed every CPU check).
"""

from __future__ import annotations

import contextlib

_BACKWARD = [False]


def backward() -> bool:
    """Whether kernels run their blocks last to first now."""
    return _BACKWARD[0]


@contextlib.contextmanager
def blocks_backward(on: bool = True):
    """Within the block, kernels run their blocks last to first when ``on``."""
    before, _BACKWARD[0] = _BACKWARD[0], on
    try:
        yield
    finally:
        _BACKWARD[0] = before
