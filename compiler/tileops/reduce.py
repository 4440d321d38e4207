"""``T.reduce_<kind>(buffer, out, dim, clear)``: out = reduce(buffer, dim) for kind in sum, max, min, abssum, absmax,
prod (``T.reduce_prod``: TileAgent's, not TileLang's; a product of float32 values in float32).

Check: both whole buffers in fragments or shared memory; ``dim`` in range; out's shape is buffer's without ``dim``
(``(1,)`` for a 1-d buffer). Effects: reads buffer (and out unless clear), writes out.
Layouts (common): out's layout is buffer's projection along ``dim`` (that dim replicated); an unassigned source
takes the blocked default. Lowering: ``compiler.lower.reduce`` (in-thread, shuffles, one round through the shared
scratch). Interpreter: accumulates in float32 (float64 for float64), rounds once.
"""

from __future__ import annotations

import torch

from tileagent.compiler.diagnostics import ScopeError, ShapeError
from tileagent.compiler.intrinsics import compute_dtype
from tileagent.compiler.ir.stmt import Reduce
from tileagent.compiler.tileops.base import Effects, TileOp

KINDS = ("sum", "max", "min", "abssum", "absmax", "prod")


class ReduceOp(TileOp):
    node = Reduce
    layout_level = "common"

    def name(self, s) -> str:
        return f"T.reduce_{s.kind}"

    def dsl(self, s) -> str:
        clear = "" if s.clear or s.kind == "abssum" else ", clear=False"
        return f"T.reduce_{s.kind}({s.src.name}, {s.dst.name}, dim={s.dim}{clear})"

    def check(self, s, checker) -> None:
        for buf, arg in ((s.src, "buffer"), (s.dst, "out")):
            if buf.scope not in ("fragment", "shared"):
                raise ScopeError(f"T.reduce_{s.kind} {arg} '{buf.name}' is in {buf.scope} memory; reductions work "
                                 f"on fragments or shared tiles", code="E501")
        nd = s.src.ndim
        if not -nd <= s.dim < nd:
            raise ShapeError(f"T.reduce_{s.kind}: dim {s.dim} is out of range for the {nd}-d buffer "
                             f"'{s.src.name}'", code="E404")
        dim = s.dim % nd
        want = tuple(d for k, d in enumerate(s.src.shape) if k != dim) or (1,)
        if tuple(s.dst.shape) != want:
            raise ShapeError(f"T.reduce_{s.kind}: out '{s.dst.name}' has shape {tuple(s.dst.shape)}, but reducing "
                             f"'{s.src.name}' {tuple(s.src.shape)} over dim {dim} gives {want}", code="E404")

    def effects(self, s) -> Effects:
        return Effects.of(reads=(s.src,) if s.clear else (s.src, s.dst), writes=(s.dst,))

    def _fragments(self, s) -> bool:
        return s.src.scope == "fragment" and s.dst.scope == "fragment"

    def infer_common(self, s, inference) -> bool:
        src = inference.r.fragments.get(s.src)
        if self._fragments(s) and src is not None and s.dst not in inference.r.fragments:
            return inference.assign(s.dst, src.project(s.dim % s.src.ndim), s, "reduction output")
        return False

    def free_tiles(self, s) -> list:
        return [(s.src, None)] if s.src.scope == "fragment" else []

    def verify_layout(self, s, inference) -> None:
        if self._fragments(s):
            fragments = inference.r.fragments
            want = fragments[s.src].project(s.dim % s.src.ndim)
            if not fragments[s.dst].same_as(want):
                inference.conflict(s.dst, fragments[s.dst], want, s, "L002")

    def scratch_bytes(self, s, layouts, threads: int) -> int:
        from tileagent.compiler.lower.reduce import scratch_bytes

        return scratch_bytes(s, layouts, threads)

    def lower(self, s, ctx) -> list:
        from tileagent.compiler.lower.reduce import lower_reduce

        return lower_reduce(ctx, s)

    def interpret(self, s, it, mask) -> None:
        src = it.mem[s.src]
        cd = compute_dtype(s.dst.dtype)
        x = src.to(cd)
        dim = s.dim % src.dim()
        if s.kind in ("abssum", "absmax"):
            x = x.abs()
        if s.kind in ("sum", "abssum"):
            r = x.sum(dim)
        elif s.kind == "prod":
            r = x.prod(dim)
        elif s.kind in ("max", "absmax"):
            r = x.amax(dim)
        else:
            r = x.amin(dim)
        r = r.reshape(s.dst.shape)
        dst = it.mem[s.dst]
        if not s.clear:
            old = dst.to(cd)
            r = {"sum": torch.add, "abssum": torch.add, "max": torch.maximum, "absmax": torch.maximum,
                 "min": torch.minimum, "prod": torch.mul}[s.kind](old, r)
        dst.copy_(r.to(dst.dtype))
