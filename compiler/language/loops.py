"""Loops: ``T.Parallel``, ``T.Pipelined``, ``T.serial``, ``T.unroll`` (Python ``range`` is ``T.serial``).

Each returns a LoopSpec; the frontend binds the loop variables and builds the For/Parallel statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.ir.expr import Expr, make_binop


@dataclass(frozen=True)
class LoopSpec:
    kind: str  # parallel, pipelined, serial, unroll
    start: object = 0
    extent: object = None
    step: object = 1
    extents: tuple = ()  # parallel only
    annotations: dict = field(default_factory=dict)


def _bounds(start, stop, step, name: str):
    for v, what in ((start, "start"), (stop, "stop"), (step, "step")):
        if v is not None and not isinstance(v, (int, Expr)) or isinstance(v, bool):
            raise DSLTypeError(f"{name}: {what} must be an integer or an integer expression, got {v!r}", code="E301")
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    if isinstance(step, int) and step < 1:
        raise DSLTypeError(f"{name}: step must be >= 1, got {step}", code="E301")
    extent = make_binop("-", stop, start)
    if step != 1:
        extent = make_binop("//", make_binop("+", extent, make_binop("-", step, 1)), step)
    return start, extent, step


def Parallel(*extents, coalesced_width=None, loop_layout=None, prefer_async=None, annotations=None):
    """``for i, j in T.Parallel(M, N)``: elementwise work over an M x N tile, spread over the block's threads.

    The body may hold element statements only (stores, let-bindings, ifs, scalar atomics): no tile ops.
    """
    if not extents:
        raise DSLTypeError("T.Parallel needs at least one extent", code="E301")
    for e in extents:
        if isinstance(e, bool) or not isinstance(e, (int, Expr)) or (isinstance(e, int) and e < 1):
            raise DSLTypeError(f"T.Parallel extents must be positive integers, got {e!r}", code="E301")
    ann = {k: v for k, v in (("coalesced_width", coalesced_width), ("loop_layout", loop_layout)) if v is not None}
    return LoopSpec("parallel", extents=tuple(extents), annotations=ann)


def Pipelined(start, stop=None, num_stages=0, order=None, stage=None, sync=None, group=None, annotations=None):
    """A sequential loop whose copies are overlapped with compute across ``num_stages`` buffers (0: plain loop).

    ``order``/``stage`` schedule the body's statements by hand; both lists have one entry per statement.
    """
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 0:
        raise DSLTypeError(f"T.Pipelined: num_stages must be an int >= 0, got {num_stages!r}", code="E307")
    for name, lst in (("order", order), ("stage", stage)):
        if lst is not None and (not isinstance(lst, (list, tuple)) or not all(isinstance(x, int) for x in lst)):
            raise DSLTypeError(f"T.Pipelined: {name} must be a list of ints, got {lst!r}", code="E307")
    if (order is None) != (stage is None) or (order is not None and len(order) != len(stage)):
        raise DSLTypeError("T.Pipelined: order and stage must be given together, with one entry per statement",
                           code="E307")
    start, extent, step = _bounds(start, stop, None, "T.Pipelined")
    ann = {"num_stages": num_stages}
    if order is not None:
        ann.update(order=tuple(order), stage=tuple(stage))
    return LoopSpec("pipelined", start, extent, step, annotations=ann)


def serial(start, stop=None, step=None, *, annotations=None):
    """A plain sequential loop, executed by every thread of the block."""
    return LoopSpec("serial", *_bounds(start, stop, step, "T.serial"))


def unroll(start, stop=None, step=None, *, explicit=False, unroll_factor=None):
    """A sequential loop the compiler unrolls."""
    return LoopSpec("unroll", *_bounds(start, stop, step, "T.unroll"))


Serial = serial


@dataclass(frozen=True)
class PersistentSpec:
    """``for bx, by in T.Persistent([gx, gy], wave_size, index, group_size=8)``: what the frontend expands."""

    domain: tuple
    wave_size: object
    index: object
    group_size: int


def Persistent(domain, wave_size, index, group_size=8):
    """A persistent-kernel tile loop (TileLang's ``T.Persistent``): the block numbered ``index`` of ``wave_size``
    resident blocks visits the tiles ``w * wave_size + index`` of ``domain`` (grouped by ``group_size`` along the last
    dim, as TileLang orders them), binding one coordinate per dim; tiles past the domain are skipped.

    Raises:
        DSLTypeError: E301 for an empty domain, a non-integer or non-positive domain extent, wave size or group size.
    """
    domain = tuple(domain) if isinstance(domain, (list, tuple)) else (domain,)
    if not domain:
        raise DSLTypeError("T.Persistent: the domain needs at least one extent", code="E301")
    for v, what in [(d, "domain extent") for d in domain] + [(wave_size, "wave_size")]:
        if isinstance(v, bool) or not isinstance(v, (int, Expr)) or isinstance(v, int) and v < 1:
            raise DSLTypeError(f"T.Persistent: {what} must be a positive integer or an integer expression, got {v!r}",
                               code="E301")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise DSLTypeError(f"T.Persistent: group_size must be a positive Python integer, got {group_size!r}",
                           code="E301")
    if not isinstance(index, (int, Expr)) or isinstance(index, bool):
        raise DSLTypeError(f"T.Persistent: index must be an integer expression (the block index), got {index!r}",
                           code="E301")
    return PersistentSpec(domain, wave_size, index, group_size)
