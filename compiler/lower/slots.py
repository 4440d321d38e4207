"""Loops over a Fragment's registers: one unrolled ``For`` per register level instead of one copy of the body per
register, so generated sources stay small (NVRTC time grows with source size).

In: a Fragment (the layout an op iterates with) and the LowerContext. Out: ``SlotLoops``: the loop variables, the
tile index each thread handles at a loop point (expressions of THREAD and the loop variables), the nest builder,
and ``fit``, which expresses the register another fragment uses at each loop point as a linear function of
the loop variables (``fit``; None when it is not one, so the caller unrolls instead).
Guarantees: the nest visits every register slot of the layout exactly once; ``fit`` is exact (checked at every
loop point).
"""

from __future__ import annotations

import numpy as np

from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Var, make_binop
from tileagent.compiler.ir.stmt import For
from tileagent.compiler.layout import Fragment


class SlotLoops:
    def __init__(self, ctx, layout: Fragment, vector: int = 1):
        """Loops over ``layout``'s registers; with ``vector`` > 1 the innermost ``vector`` registers (consecutive
        elements of the innermost dim) are left to the body."""
        self.ctx, self.layout, self.vector = ctx, layout, vector
        levels = layout._slot_levels()  # (dim, position, level), slowest first
        self.parts = []  # (dim, position, size, scale within the level, loop var or None)
        for d, j, lv in levels:
            size, scale = lv.size, 1
            if vector > 1 and (d, j) == (len(layout.shape) - 1, 0):
                size, scale = lv.size // vector, vector
            var = Var(ctx.fresh("r"), DType("int32")) if size > 1 else None
            if var is not None:
                ctx.ranges[var] = (0, size - 1)
            self.parts.append((d, j, size, scale, var))
        self.vars = [p[4] for p in self.parts if p[4] is not None]
        self.sizes = [p[2] for p in self.parts if p[4] is not None]

    # -- expressions -----------------------------------------------------------------------------------------
    def slot(self):
        """This layout's register at the loop point (the first of a vector)."""
        s, stride = 0, 1
        for d, j, size, scale, var in reversed(self.parts):
            lv_size = size * scale
            if var is not None:
                s = make_binop("+", s, make_binop("*", var, stride * scale))
            stride *= lv_size
        return s

    def index(self, thread):
        """The tile index at the loop point (first element of a vector), as expressions."""
        digit = {(d, j): (var if var is not None else 0, scale) for d, j, _, scale, var in self.parts}
        idx = []
        for d, levels in enumerate(self.layout.dims):
            value, unit = 0, 1
            for j, lv in enumerate(levels):
                if lv.is_thread:
                    term = make_binop("%", make_binop("//", thread, lv.stride), lv.size)
                else:
                    var, scale = digit[(d, j)]
                    term = make_binop("*", var, scale)
                value = make_binop("+", value, make_binop("*", term, unit))
                unit *= lv.size
            idx.append(value)
        return tuple(idx)

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """Every loop point, in loop order: (values of the loop vars (points, vars), this layout's slot (points,))."""
        grids = np.meshgrid(*[np.arange(n) for n in self.sizes], indexing="ij") if self.sizes else []
        digits = np.stack([g.reshape(-1) for g in grids], axis=1) if grids else np.zeros((1, 0), dtype=np.int64)
        slots = np.zeros(len(digits), dtype=np.int64)
        stride, column = 1, len(self.vars)
        for d, j, size, scale, var in reversed(self.parts):
            if var is not None:
                column -= 1
                slots += digits[:, column] * stride * scale
            stride *= size * scale
        return digits, slots

    def fit(self, per_slot: np.ndarray, care: np.ndarray):
        """The expression c + sum(a_i * var_i) equal to ``per_slot[slot]`` at every loop point whose slot ``care``s
        (values < 0 mean "threads disagree"); None when no such expression exists."""
        digits, slots = self.points()
        y, keep = per_slot[slots], care[slots]
        if (y[keep] < 0).any():
            return None
        if not keep.any():
            return 0
        rows = np.concatenate([np.ones((len(digits), 1), dtype=np.int64), digits], axis=1)[keep]
        coef = self._through_corners(per_slot, care)
        if coef is None:
            solution, *_ = np.linalg.lstsq(rows.astype(float), y[keep].astype(float), rcond=None)
            coef = np.rint(solution).astype(np.int64)
        if not np.array_equal(rows @ coef, y[keep]):
            return None
        expr = int(coef[0])
        for a, v in zip(coef[1:], self.vars):
            if a:
                expr = make_binop("+", expr, make_binop("*", v, int(a)))
        return expr

    def _through_corners(self, per_slot: np.ndarray, care: np.ndarray):
        """(c, a_1, ...) of the linear function through the origin of the loop grid and its neighbours along each
        loop variable (var_i = 1, the others 0), or None when one of those points is not cared for. The points are
        a basis of the grid: any linear function exact at every cared point takes these coefficients, so ``fit``
        need not solve a least-squares problem when they are cared for (it checks every point either way)."""
        steps, stride = {}, 1  # the slot of the point var = 1 (the others 0), as in ``points``
        for _, _, size, scale, var in reversed(self.parts):
            if var is not None:
                steps[id(var)] = stride * scale
            stride *= size * scale
        corners = [0] + [steps[id(v)] for v in self.vars]
        if not all(care[k] for k in corners):
            return None
        c = int(per_slot[0])
        return np.array([c] + [int(per_slot[k]) - c for k in corners[1:]], dtype=np.int64)

    def nest(self, body: list) -> list:
        """``body`` inside one unrolled loop per register level (slowest outermost)."""
        stmts = list(body)
        for var, size in reversed(list(zip(self.vars, self.sizes))):
            stmts = [For(var, 0, size, 1, "unroll", tuple(stmts))]
        return stmts
