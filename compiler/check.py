"""Semantic checks of the tile IR.

In: a PrimFunc from the frontend. Out: the same PrimFunc, unchanged.
Guarantees, once it returns: tile ops sit inside a T.Kernel and outside T.Parallel; copy extents agree after
dropping size-1 dims; gemm operands are 2-d tiles in legal scopes with matching M/N/K and supported dtypes;
reduce outputs have the input's shape minus ``dim``; local buffers are not indexed by T.Parallel variables;
fragments outside T.Parallel are indexed by constants; constant indices of on-chip buffers are in bounds (element
accesses of stores, lets, conditions, atomics and T.print alike); T.Parallel holds no other loop (the frontend merges
perfect T.Parallel nests into one);
Pipelined ``order``/``stage`` lists cover the body; every ``break``/``continue`` is block-uniform
(``compiler.loop_exits``, E510); every tile op passed its own ``check`` (``compiler.tileops``).
Violations raise CompileError subclasses with the op's span.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import (CompileError, DSLTypeError, InternalCompilerError, ScopeError, ShapeError,
                                            UnsupportedError)
from tileagent.compiler.ir.simplify import depends_on, static_int
from tileagent.compiler.ir.visit import loads
from tileagent.compiler.ir.stmt import (Alloc, AtomicAdd, For, If, Kernel, Let, NamedBarrier, Parallel, Print, PrimFunc,
                                        Region, Store, While)
from tileagent.compiler.language.random import check_random
from tileagent.compiler.loop_exits import check_loop_exits
from tileagent.compiler.tileops import describe, op_for
from tileagent.compiler.thread_ranges import regions


def check(func: PrimFunc) -> PrimFunc:
    """Run every check over ``func``; return it unchanged or raise the first error found."""
    _Checker().body(func.body, in_kernel=False, par_vars=(), static_par=True)
    check_loop_exits(func)
    return func


class _Checker:
    enclosing: tuple = ()  # the loops and branches around the statement being checked
    regions: dict = {}  # id(statement) -> its warp-group range in the kernel being checked (compiler.thread_ranges)

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
        """Check ``s``; ``self.enclosing`` holds the loops and branches around it (tile ops' checks read it)."""
        if isinstance(s, (For, While, If)):
            self.enclosing = self.enclosing + (s,)
            try:
                return self._stmt(s, in_kernel, par_vars, static_par)
            finally:
                self.enclosing = self.enclosing[:-1]
        return self._stmt(s, in_kernel, par_vars, static_par)

    def _stmt(self, s, in_kernel: bool, par_vars: tuple, static_par: bool) -> None:
        in_par = bool(par_vars)
        if op_for(s) is not None or isinstance(s, Alloc):
            if not in_kernel:
                raise ScopeError(f"{_op_name(s)} outside T.Kernel", code="E505",
                                 hint="tile ops and allocations belong inside `with T.Kernel(...)`")
            if in_par:
                raise ScopeError(f"{_op_name(s)} inside T.Parallel", code="E502",
                                 hint="T.Parallel bodies hold element statements; move the tile op out of the loop")
            if getattr(self, "thread_vars", ()) and op_for(s) is not None:
                if not getattr(op_for(s), "per_thread", False):  # a warp's mma uses its threads' own locals
                    _per_thread_tile_op(s, self.thread_vars)
                self.not_under_thread_branch(_op_name(s), s)
        if isinstance(s, Kernel):
            self.thread_vars = _thread_dependent(s) if s.thread_vars else ()
            self.threads, self.regions = s.num_threads, regions(s)
            check_random(s)
            self.body(s.body, True, (), True)
            self.thread_vars = ()
            _fragments_of_one_range(s, self.regions)
        elif isinstance(s, Parallel):
            if getattr(self, "thread_vars", ()):
                _per_thread_parallel(s, self.thread_vars)
                self.not_under_thread_branch("T.Parallel", s)
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
                                 hint="put sequential loops outside the T.Parallel nest; one with a compile-time "
                                      "trip count of at most 64 is unrolled there and allowed")
            self.exprs((s.start, s.extent), par_vars, static_par)
            if "order" in s.annotations:
                n = sum(1 for b in s.body if not isinstance(b, Let))
                if len(s.annotations["order"]) != n:
                    raise DSLTypeError(f"T.Pipelined: order/stage have {len(s.annotations['order'])} entries but "
                                       f"the loop body has {n} statements", code="E307")
            self.body(s.body, in_kernel, par_vars, static_par)
        elif isinstance(s, While):
            if in_par:
                raise ScopeError("while loop inside T.Parallel", code="E506",
                                 hint="put sequential loops outside the T.Parallel nest")
            self.exprs((s.cond,), par_vars, static_par)
            self.body(s.body, in_kernel, par_vars, static_par)
        elif isinstance(s, If):
            self.exprs((s.cond,), par_vars, static_par)
            self.body(s.then_body, in_kernel, par_vars, static_par)
            self.body(s.else_body, in_kernel, par_vars, static_par)
        elif isinstance(s, Print):
            self.exprs((s.value,), par_vars, static_par)
        elif isinstance(s, NamedBarrier):
            if in_par:
                raise ScopeError("T.sync_threads(id, count) inside T.Parallel", code="E502",
                                 hint="a barrier is a statement of the whole block (or of the threads of a branch); "
                                      "put it between loops")
            if s.arrive_count > getattr(self, "threads", s.arrive_count):
                raise DSLTypeError(f"T.sync_threads({s.barrier_id}, {s.arrive_count}): the arrive count exceeds the "
                                   f"kernel's {self.threads} threads", code="E301",
                                   hint="count the threads that reach the barrier (at most the T.Kernel's threads)")
        elif isinstance(s, Store):
            self.access(s.buffer, s.indices, par_vars, static_par)
            self.exprs(s.indices + (s.value,), par_vars, static_par)
        elif isinstance(s, Let):
            self.exprs((s.value,), par_vars, static_par)
        elif isinstance(s, AtomicAdd):
            if s.buffer.scope not in ("global", "shared"):
                raise ScopeError(f"T.atomic_{s.op} into {s.buffer.name} ({s.buffer.scope})", code="E508",
                                 hint="atomics target global or shared memory; update fragments with +=")
            self.access(s.buffer, s.indices, par_vars, static_par)
            self.exprs(s.indices + (s.value,), par_vars, static_par)
            if s.prev is not None and not getattr(self, "thread_vars", ()):
                raise UnsupportedError(f"T.atomic_{s.op}(return_prev=True) outside per-thread code is not supported: "
                                       f"outside T.Parallel a kernel's element statements run once per block, on "
                                       f"one thread, which alone would see the previous value",
                                       hint="bind the threads (tx = T.get_thread_binding()) and fetch-and-add in "
                                            "each thread's code, as TileLang's top-k selector does")
        else:
            op = op_for(s)
            if op is not None:
                self.par_context = (par_vars, static_par)
                op.check(s, self)

    def not_under_thread_branch(self, what: str, s) -> None:
        """E509 for a tile op or T.Parallel (``s``) under an ``if`` on a thread index: its threads split the tile
        among all of the block's, so those outside the branch would leave their part undone (the SIMT emulator
        showed a copy under ``if tx < 128`` of 256 threads filling half of its tile). T.fill/T.clear of a
        per-thread local is the thread's own."""
        from tileagent.compiler.ir.stmt import Fill

        if isinstance(s, Fill) and all(b.scope in ("local", "var") for b in op_for(s).effects(s).writes):
            return
        if self.regions.get(id(s)) is not None:  # a warp group's own tile op (compiler.thread_ranges)
            return
        for x in self.enclosing:
            if isinstance(x, If) and depends_on(x.cond, self.thread_vars):
                raise ScopeError(f"{what} under a condition on a thread index (T.get_thread_binding) that does not "
                                 f"select whole warp groups: a tile op or T.Parallel there is run by the branch's "
                                 f"threads, which must be 128 consecutive threads from a multiple of 128 (or "
                                 f"several such groups), as in `if tx < 128:` / `elif tx < 256:`", code="E509",
                                 hint="split the threads at multiples of 128 with a condition on the thread index "
                                      "alone, run the op in every thread of the block (outside the branch), or "
                                      "write the branch's work as per-thread code (T.serial loops over the "
                                      "thread's elements)")

    # -- element accesses ------------------------------------------------------------------------------------
    def exprs(self, exprs, par_vars=None, static_par=None) -> None:
        """Check the element accesses of ``exprs`` (by default in the context of the tile op being checked)."""
        if par_vars is None:
            par_vars, static_par = self.par_context
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


def _fragments_of_one_range(k: Kernel, where: dict) -> None:
    """E509 for a fragment used by two warp-group ranges of a warp-specialized kernel (``compiler.thread_ranges``)."""
    from tileagent.compiler.thread_ranges import shared_fragments

    found = shared_fragments(k, where) if where else None
    if found is not None:
        buf, (r1, l1), (r2, l2) = found
        def name(r):
            return "the whole block" if r == (0, k.num_threads) else f"threads {r[0]}-{r[1] - 1}"
        raise ScopeError(f"fragment '{buf.name}' is used by {name(r1)} (line {l1}) and by {name(r2)} (line {l2}): a "
                         f"fragment's registers are spread over the threads of the one warp-group range that uses "
                         f"it", code="E509",
                         hint="give each branch its own fragments and pass values between them through shared memory "
                              "(T.copy into a T.alloc_shared buffer, ordered by a barrier)")


def _thread_dependent(k: Kernel) -> tuple:
    """The kernel's thread variables and the Let-bound variables computed from them."""
    from tileagent.compiler.ir.visit import walk

    found = list(k.thread_vars)
    for x in walk(k.body):
        if isinstance(x, Let) and depends_on(x.value, found):
            found.append(x.var)
    return tuple(found)


def _per_thread_tile_op(s, thread_vars: tuple) -> None:
    """In a kernel with per-thread code a tile op is still the whole block's (its threads split the tile), so its
    regions may not start at a thread index, nor may it touch a per-thread local other than by T.fill/T.clear
    (E509)."""
    from tileagent.compiler.ir.stmt import Fill

    effects = op_for(s).effects(s)
    regions = [getattr(s, name) for name in ("src", "dst", "a", "b", "c", "buffer", "out", "region")
               if isinstance(getattr(s, name, None), Region)]
    if any(depends_on(e, thread_vars) for r in regions for e in r.starts):
        raise ScopeError(f"{_op_name(s)} works on a tile at a thread index (T.get_thread_binding): a tile op is the "
                         f"whole block's, its threads split the tile", code="E509",
                         hint="copy per-thread data element by element in a T.serial / T.vectorized loop")
    local = sorted(b.name for b in effects.reads | effects.writes if b.scope in ("local", "var"))
    if local and not isinstance(s, Fill):
        raise ScopeError(f"{_op_name(s)} uses the per-thread local '{local[0]}' in a kernel with per-thread code "
                         f"(T.get_thread_binding)", code="E509",
                         hint="copy per-thread data element by element in a T.serial / T.vectorized loop")


def _per_thread_parallel(s: Parallel, thread_vars: tuple) -> None:
    """In a kernel with per-thread code a T.Parallel loop is still split over the threads by its layout, so it may
    not read a thread index or a per-thread local (E509)."""
    from tileagent.compiler.ir.visit import stmt_exprs, walk
    from tileagent.compiler.lower.smem import buffers_used

    for x in walk(s.body):
        for e in stmt_exprs(x):
            if depends_on(e, thread_vars):
                raise ScopeError("T.Parallel reads a thread index (T.get_thread_binding): the loop's iterations are "
                                 "spread over the threads by its layout", code="E509",
                                 hint="index per-thread work with the thread index in T.serial loops, or write the "
                                      "work as a T.Parallel loop without it")
        local = sorted(b.name for b in buffers_used(x) if b.scope in ("local", "var"))
        if local:
            raise ScopeError(f"T.Parallel uses the per-thread local '{local[0]}' in a kernel with per-thread code "
                             f"(T.get_thread_binding)", code="E509",
                             hint="use a fragment (T.alloc_fragment) inside T.Parallel, or a T.serial loop")


def _op_name(s) -> str:
    if isinstance(s, Alloc):
        return f"allocation of '{s.buffer.name}'"
    return describe(s)
