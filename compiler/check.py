"""Semantic checks of the tile IR.

In: a PrimFunc from the frontend. Out: the same PrimFunc, unchanged.
Guarantees, once it returns: tile ops sit inside a T.Kernel and outside T.Parallel; copy extents agree after
dropping size-1 dims; gemm operands are 2-d tiles in legal scopes with matching M/N/K and supported dtypes;
reduce outputs have the input's shape minus ``dim``; local buffers are not indexed by T.Parallel variables;
fragments outside T.Parallel are indexed by constants; constant indices of on-chip buffers are in bounds (element
accesses of stores, lets, conditions, atomics and T.print alike); T.Parallel holds no other loop (the frontend merges
perfect T.Parallel nests into one);
Pipelined ``order``/``stage`` lists cover the body. Violations raise CompileError subclasses with the op's span.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import CompileError, DSLTypeError, InternalCompilerError, ScopeError, ShapeError
from tileagent.compiler.ir.simplify import depends_on, static_int
from tileagent.compiler.ir.visit import loads
from tileagent.compiler.ir.stmt import (Alloc, AtomicAdd, AtomicAddTile, Copy, Fill, For, Gemm, If, Kernel, Let, Parallel,
                              Print, PrimFunc, Reduce, Region, Store)

GEMM_INPUT_DTYPES = ("float16", "bfloat16", "float32", "int8", "float8_e4m3fn", "float8_e5m2")
GEMM_ACCUM_DTYPES = ("float32", "float16", "int32")
TILE_OPS = (Copy, Gemm, Reduce, Fill, AtomicAddTile)


def check(func: PrimFunc) -> PrimFunc:
    """Run every check over ``func``; return it unchanged or raise the first error found."""
    _Checker().body(func.body, in_kernel=False, par_vars=(), static_par=True)
    return func


class _Checker:
    def body(self, stmts, in_kernel: bool, par_vars: tuple, static_par: bool) -> None:
        for s in stmts:
            try:
                self.stmt(s, in_kernel, par_vars, static_par)
            except CompileError as e:
                raise e.with_span(s.span)
            except Exception as e:  # noqa: BLE001 -- nothing but CompileError escapes a compile
                raise InternalCompilerError(f"internal error while checking {type(s).__name__}: "
                                            f"{type(e).__name__}: {e}", s.span) from e

    def stmt(self, s, in_kernel: bool, par_vars: tuple, static_par: bool) -> None:
        in_par = bool(par_vars)
        if isinstance(s, TILE_OPS) or isinstance(s, Alloc):
            if not in_kernel:
                raise ScopeError(f"{_op_name(s)} outside T.Kernel", code="E505",
                                 hint="tile ops and allocations belong inside `with T.Kernel(...)`")
            if in_par:
                raise ScopeError(f"{_op_name(s)} inside T.Parallel", code="E502",
                                 hint="T.Parallel bodies hold element statements; move the tile op out of the loop")
        if isinstance(s, Kernel):
            self.body(s.body, True, (), True)
        elif isinstance(s, Parallel):
            if in_par:
                raise ScopeError("T.Parallel nested inside T.Parallel", code="E506",
                                 hint="only a perfect nest is allowed (the inner T.Parallel the outer one's only "
                                      "statement, its extents free of the outer variables); or write one nest: "
                                      "for i, j in T.Parallel(M, N)")
            static = all(static_int(e) is not None for e in s.extents)
            self.body(s.body, in_kernel, s.vars, static)
        elif isinstance(s, For):
            if in_par:
                raise ScopeError(f"T.{s.kind} loop inside T.Parallel", code="E506",
                                 hint="put sequential loops outside the T.Parallel nest")
            self.exprs((s.start, s.extent), par_vars, static_par)
            if "order" in s.annotations:
                n = sum(1 for b in s.body if not isinstance(b, Let))
                if len(s.annotations["order"]) != n:
                    raise DSLTypeError(f"T.Pipelined: order/stage have {len(s.annotations['order'])} entries but "
                                       f"the loop body has {n} statements", code="E307")
            self.body(s.body, in_kernel, par_vars, static_par)
        elif isinstance(s, If):
            self.exprs((s.cond,), par_vars, static_par)
            self.body(s.then_body, in_kernel, par_vars, static_par)
            self.body(s.else_body, in_kernel, par_vars, static_par)
        elif isinstance(s, Print):
            self.exprs((s.value,), par_vars, static_par)
        elif isinstance(s, Store):
            self.access(s.buffer, s.indices, par_vars, static_par)
            self.exprs(s.indices + (s.value,), par_vars, static_par)
        elif isinstance(s, Let):
            self.exprs((s.value,), par_vars, static_par)
        elif isinstance(s, AtomicAdd):
            if s.buffer.scope not in ("global", "shared"):
                raise ScopeError(f"T.atomic_add into {s.buffer.name} ({s.buffer.scope})", code="E508",
                                 hint="atomics target global or shared memory; update fragments with +=")
            self.access(s.buffer, s.indices, par_vars, static_par)
            self.exprs(s.indices + (s.value,), par_vars, static_par)
        elif isinstance(s, Copy):
            self.copy_shapes("T.copy", s.src, s.dst)
        elif isinstance(s, AtomicAddTile):
            if s.dst.buffer.scope not in ("global", "shared"):
                raise ScopeError(f"T.atomic_add into {s.dst.buffer.name} ({s.dst.buffer.scope})", code="E508")
            self.copy_shapes("T.atomic_add", s.src, s.dst)
        elif isinstance(s, Fill):
            self.region_bounds(s.dst)
            self.exprs((s.value,), par_vars, static_par)
        elif isinstance(s, Gemm):
            self.gemm(s)
        elif isinstance(s, Reduce):
            self.reduce(s)

    # -- element accesses ------------------------------------------------------------------------------------
    def exprs(self, exprs, par_vars, static_par) -> None:
        for e in exprs:
            for load in loads(e):
                self.access(load.buffer, load.indices, par_vars, static_par, load.span)

    def access(self, buf, indices, par_vars, static_par, span=None) -> None:
        try:
            self._access(buf, indices, par_vars, static_par)
        except CompileError as e:
            raise e.with_span(span)

    @staticmethod
    def _access(buf, indices, par_vars, static_par) -> None:
        if buf.scope == "local" and any(depends_on(i, par_vars) for i in indices):
            raise ScopeError(f"local buffer '{buf.name}' is indexed by a T.Parallel variable", code="E503",
                             hint=f"allocate '{buf.name}' with T.alloc_fragment to share it across the loop")
        if buf.scope == "fragment":
            if not par_vars and any(static_int(i) is None for i in indices):
                raise ScopeError(f"fragment '{buf.name}' is indexed by a non-constant outside T.Parallel",
                                 code="E504",
                                 hint="index fragments inside `for ... in T.Parallel(...)`, or with constants")
            if par_vars and not static_par:
                raise ScopeError(f"fragment '{buf.name}' is indexed in a T.Parallel loop with a non-static extent",
                                 code="E507", hint="give T.Parallel constant extents when it touches fragments")
        if buf.scope != "global":
            for dim, (i, n) in enumerate(zip(indices, buf.shape)):
                v = static_int(i)
                if v is not None and not 0 <= v < n:
                    raise ShapeError(f"index {v} is out of bounds for dim {dim} of '{buf.name}' "
                                     f"(shape {tuple(buf.shape)})", code="E406")

    # -- tile ops --------------------------------------------------------------------------------------------
    def region_bounds(self, r: Region) -> None:
        if r.buffer.scope == "global":
            return
        for dim, (s, n, size) in enumerate(zip(r.starts, r.extents, r.buffer.shape)):
            v = static_int(s)
            if n > size or (v is not None and not (0 <= v and v + n <= size)):
                raise ShapeError(f"region of '{r.buffer.name}' covers [{v if v is not None else '?'}, +{n}) in dim "
                                 f"{dim}, outside its shape {tuple(r.buffer.shape)}", code="E406")

    def copy_shapes(self, op: str, src: Region, dst: Region) -> None:
        self.region_bounds(src)
        self.region_bounds(dst)
        if src.tile_shape() != dst.tile_shape():
            raise ShapeError(f"{op} extents do not match: src {src.buffer.name} {tuple(src.extents)} vs dst "
                             f"{dst.buffer.name} {tuple(dst.extents)}", code="E402",
                             hint="both sides must have the same extents once size-1 dims are dropped; "
                                  "check the slice bounds and the tile shape")

    def gemm(self, g: Gemm) -> None:
        for r, arg, scopes in ((g.a, "A", ("shared", "fragment")), (g.b, "B", ("shared", "fragment")),
                               (g.c, "C", ("fragment",))):
            if r.buffer.scope not in scopes:
                raise ScopeError(f"T.gemm operand {arg} '{r.buffer.name}' is in {r.buffer.scope} memory; it must be "
                                 f"in {' or '.join(scopes)}", code="E501",
                                 hint="T.copy the tile into T.alloc_shared (A, B) or use a T.alloc_fragment "
                                      "accumulator (C)")
        a, b, c = (_matrix(r, arg) for r, arg in ((g.a, "A"), (g.b, "B"), (g.c, "C")))
        m, ka = (a[1], a[0]) if g.transpose_a else a
        kb, n = (b[1], b[0]) if g.transpose_b else b
        if ka != kb:
            raise ShapeError(f"T.gemm K shape check failed: K_A = {ka}, K_B = {kb}", code="E403",
                             hint="check transpose_A/transpose_B and the tile shapes")
        if c[0] != m:
            raise ShapeError(f"T.gemm M shape check failed: M_A = {m}, M_C = {c[0]}", code="E403")
        if c[1] != n:
            raise ShapeError(f"T.gemm N shape check failed: N_B = {n}, N_C = {c[1]}", code="E403")
        if g.a.buffer.dtype != g.b.buffer.dtype or g.a.buffer.dtype not in GEMM_INPUT_DTYPES:
            raise DSLTypeError(f"T.gemm inputs must share a dtype among {', '.join(GEMM_INPUT_DTYPES)}; got "
                               f"A {g.a.buffer.dtype}, B {g.b.buffer.dtype}", code="E302")
        if g.c.buffer.dtype not in GEMM_ACCUM_DTYPES:
            raise DSLTypeError(f"T.gemm accumulator dtype {g.c.buffer.dtype} is not supported; use one of "
                               f"{', '.join(GEMM_ACCUM_DTYPES)}", code="E302")

    def reduce(self, r: Reduce) -> None:
        for buf, arg in ((r.src, "buffer"), (r.dst, "out")):
            if buf.scope not in ("fragment", "shared"):
                raise ScopeError(f"T.reduce_{r.kind} {arg} '{buf.name}' is in {buf.scope} memory; reductions work "
                                 f"on fragments or shared tiles", code="E501")
        nd = r.src.ndim
        if not -nd <= r.dim < nd:
            raise ShapeError(f"T.reduce_{r.kind}: dim {r.dim} is out of range for the {nd}-d buffer "
                             f"'{r.src.name}'", code="E404")
        dim = r.dim % nd
        want = tuple(d for k, d in enumerate(r.src.shape) if k != dim) or (1,)
        if tuple(r.dst.shape) != want:
            raise ShapeError(f"T.reduce_{r.kind}: out '{r.dst.name}' has shape {tuple(r.dst.shape)}, but reducing "
                             f"'{r.src.name}' {tuple(r.src.shape)} over dim {dim} gives {want}", code="E404")


def _matrix(r: Region, arg: str) -> tuple[int, int]:
    ext = r.matrix_shape()
    if len(ext) != 2:
        raise ShapeError(f"T.gemm operand {arg} must be a 2-d tile, got extents {tuple(r.extents)}", code="E403")
    return ext[0], ext[1]


def _op_name(s) -> str:
    if isinstance(s, Reduce):
        return f"T.reduce_{s.kind}"
    if isinstance(s, Alloc):
        return f"allocation of '{s.buffer.name}'"
    return {Copy: "T.copy", Gemm: "T.gemm", Fill: "T.fill", AtomicAddTile: "T.atomic_add"}[type(s)]
