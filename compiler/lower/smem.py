"""Shared-memory planning: one dynamic arena per kernel; buffers whose lifetimes do not overlap share bytes.

In: a T.Kernel of the tile IR, the shared buffers' Layouts, and the bytes of scratch the lowering needs (reduction
workspace). Out: ``SharedPlan`` (byte offset of each buffer, the scratch offset, the arena size).
A staged tile (software pipeline) takes its number of stages times its 128-byte-aligned size.
Guarantees: offsets are 16-byte aligned, and multiples of a layout's ``align_bytes`` where it asks for more (a
wgmma operand's swizzle atom); then ``base_align`` is the largest such alignment and ``total_bytes`` includes
``base_align - 16`` bytes of slack so that the kernel can round its arena start up to it; two buffers used by
overlapping ranges of top-level statements never overlap in memory; the scratch area overlaps nothing; ``reuse_points`` lists the top-level statements that first
use bytes an earlier, now dead buffer used (the lowering puts a barrier before each). ``check_fits`` reports a plan
over the target's shared memory (E801).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tileagent.compiler.diagnostics import ResourceError
from tileagent.compiler.ir.expr import Expr, Load
from tileagent.compiler.ir.stmt import Alloc, AnnotateLayout, Buffer, Region
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.layout import Layout
from tileagent.compiler.lower.pipeline import stage_stride

ALIGN = 16


@dataclass(frozen=True)
class SharedPlan:
    offsets: dict
    layouts: dict
    scratch_offset: int
    total_bytes: int
    reuse_points: set = field(default_factory=set)  # top-level statements that write bytes a dead buffer used
    elements: dict = field(default_factory=dict)  # buffer -> elements of its slice of the arena (all its stages)
    base_align: int = ALIGN  # bytes the arena's start must be aligned to (see the module docstring)


def plan_shared(body: tuple, annotated: dict, scratch_bytes: int, stages: dict | None = None) -> SharedPlan:
    """``body``: the kernel's top-level statements; ``stages``: buffers a software pipeline keeps several copies of
    (``pipeline.stage_stride`` apart), and how many."""
    stages = stages or {}
    buffers = [s.buffer for s in body if isinstance(s, Alloc) and s.buffer.scope == "shared"]
    nested = (s.buffer for s in walk(body) if isinstance(s, Alloc))
    buffers += [b for b in nested if b.scope == "shared" and b not in buffers]
    mentioned = [set() if isinstance(s, AnnotateLayout) else buffers_used(s) for s in body]  # a pin is no use
    used = set().union(*(m for s, m in zip(body, mentioned) if not isinstance(s, Alloc)))
    buffers = [b for b in buffers if b in used or b in annotated]  # an unused tile takes no memory
    layouts = {b: annotated.get(b) if isinstance(annotated.get(b), Layout) else Layout.row_major(b.shape)
               for b in buffers}
    live = {b: [None, None] for b in buffers}
    for k, found in enumerate(mentioned):
        for b in found:
            if b in live:
                live[b][0] = k if live[b][0] is None else live[b][0]
                live[b][1] = k
    placed: list[tuple[int, int, int, int]] = []  # offset, size, first, last
    reuse: set[int] = set()
    offsets = {}
    elements = {b: layouts[b].size if b not in stages else stage_stride(b, layouts[b]) * stages[b] for b in buffers}
    for b in sorted(buffers, key=lambda b: (live[b][0] if live[b][0] is not None else -1)):
        first, last = live[b]
        first, last = (first, last) if first is not None else (0, len(body))
        size = _align(elements[b] * b.dtype.bytes)
        align = max(ALIGN, layouts[b].align_bytes)
        offset = 0
        for o, sz, f, la in sorted(placed):
            overlaps_in_time = not (la < first or last < f)
            if overlaps_in_time and o < offset + size and offset < o + sz:
                offset = _align(o + sz, align)
        if any(la < first and o < offset + size and offset < o + sz for o, sz, f, la in placed):
            reuse.add(first)
        placed.append((offset, size, first, last))
        offsets[b] = offset
    end = max((o + sz for o, sz, _, _ in placed), default=0)
    scratch = _align(end)
    total = scratch + _align(scratch_bytes) if scratch_bytes else end
    base_align = max([ALIGN] + [layouts[b].align_bytes for b in offsets])
    if base_align > ALIGN:
        total += base_align - ALIGN  # the arena start is 16-byte aligned; rounding it up skips at most this
    return SharedPlan(offsets, layouts, scratch, total, reuse, elements, base_align)


def check_fits(plan: SharedPlan, kernel, target) -> None:
    """Raise ResourceError E801 at the T.Kernel when ``plan`` needs more shared memory than ``target`` gives a block,
    naming the largest buffers."""
    if plan.total_bytes <= target.shared_bytes:
        return
    sizes = sorted(((plan.elements[b] * b.dtype.bytes, b) for b in plan.offsets), key=lambda x: -x[0])
    top = ", ".join(f"'{b.name}' {tuple(b.shape)} {b.dtype} {n} B" for n, b in sizes[:3])
    scratch = plan.total_bytes - plan.scratch_offset if plan.total_bytes > plan.scratch_offset else 0
    raise ResourceError(f"this kernel needs {plan.total_bytes} bytes of shared memory per block; {target.arch} "
                        f"allows {target.shared_bytes} (largest: {top or 'none'}" +
                        (f"; scratch {scratch} B: the compiler's own staging, the most any one tile op needs "
                         f"(a fragment copy that changes thread map, a reduction across warps, a fragment's scan)"
                         if scratch else "") + ")", kernel.span, code="E801",
                        hint="use smaller shared tiles or fewer pipeline stages, or keep data in fragments (a large "
                             "scratch: smaller fragment tiles, or reduce each tile as it is made)")


def _align(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


def buffers_used(s) -> set:
    """Every buffer a statement (with its nested statements) mentions."""
    found = set()
    _collect(s, found)
    return found


def _collect(x, found):
    if isinstance(x, Buffer):
        found.add(x)
    elif isinstance(x, Region):
        found.add(x.buffer)
        for e in x.starts:
            _collect(e, found)
    elif isinstance(x, Load):
        found.add(x.buffer)
        for i in x.indices:
            _collect(i, found)
    elif isinstance(x, Expr):
        for name in getattr(x, "__slots__", ()):
            _collect(getattr(x, name), found)
    elif isinstance(x, (tuple, list)):
        for c in x:
            _collect(c, found)
    elif hasattr(x, "__dataclass_fields__") and not isinstance(x, Alloc):
        for name in x.__dataclass_fields__:
            if name != "span":
                _collect(getattr(x, name), found)
