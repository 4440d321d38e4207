"""Layout inference: choose a Fragment for every fragment buffer and every T.Parallel loop of a PrimFunc.

In: a checked PrimFunc. Out: a ``LayoutMap`` (fragment buffer -> Fragment, Parallel loop -> Fragment over its
iteration space, and the op that fixed each fragment's layout, for diagnostics).
Levels, as in TileLang: strict constraints first (``T.annotate_layout``), then common ones that propagate through
ops (a reduction's output follows its input with the reduced dim replicated; a loop that indexes a fragment with its
own variables runs on that fragment's layout), then free choices (an unconstrained loop or tile gets the blocked,
coalesced default of ``make_blocked``, reusing an earlier loop's layout of the same extents when it fits), and back
to propagation until everything has a layout.
Fragment indices inside T.Parallel are loop variables, constants, or loop-invariant expressions (an enclosing serial
loop's variable, a block index: TileLang composes the fragment's thread map with any index expression and rejects only
variables bound inside the loop). A loop-invariant index may take any value of its dim, so every check holds for all
of them; a fragment some loop indexes that way gets that dim in registers (every thread holds all of it) when its
layout is a free choice, and a fragment whose layout spreads such a dim over threads is an L004 error.
A fragment still without a layout that a loop with a layout reads gets that layout, projected onto the loop dims it
indexes, with its dims in the order it indexes them (``x[j, i]`` in a loop over (i, j): the map transposed), and
its dims indexed by constants or loop-invariant values held in registers (``a[k, o]``, k an unrolled serial).
The reverse: a loop left to a free choice whose blocked default does not fit the fragments it reads runs on a read
fragment's layout (its loop dims in order first, then in another order: ``logits[n, q]`` in a loop over (q, n), a
reduction's output stored transposed, runs on logits' thread map with the dims permuted; TileLang composes the
fragment's thread map with the index map the same way), with the loop dims it does not index in registers.
An index ``v // c`` (loop variable over a constant: packed data, ``B_local[i, j // 2]``) is checked element by element
like a loop variable; a fragment still without a layout that a loop reads that way gets the loop's layout with the
innermost register level of that dim divided by ``c`` (``_compressed``), when that level holds a multiple of ``c``.
Optional gemm entries: an entry marked ``fallback_on_conversion`` (wgmma RS) that imposes the layout of its A operand
in registers is dropped for that gemm, and the kernel's inference redone, when a T.copy fills that operand from a
fragment of another layout (a conversion through shared memory) that inference without the entry would not need
(``_needless_conversions`` tries it; where the alternative converts too or fails, the entry stays); when inference
fails, first every such entry is
dropped, then every entry marked ``fallback_on_conflict`` (both wgmma entries: their layouts next to mma.sync's can
conflict, e.g. scores split over warpgroups along N beside an mma.sync P @ V), and inference is redone;
a failure without such entries is the error. The gemm then takes the next entry (mma.sync), and ``LayoutMap.notes``
says why. So switching an optional entry on never makes a kernel that compiled without it fail.
Guarantees: in every T.Parallel loop, the threads that run an iteration hold every fragment element it reads, and
exactly the threads holding an element it writes run that iteration; a reduction's output layout is its input's
projection. Otherwise a LayoutError names both ops, both layouts, both source lines, and gives a hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tileagent.compiler.diagnostics import LayoutError
from tileagent.compiler.ir.expr import BinOp, Expr, Load, Var
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import (AnnotateLayout, AtomicAdd, Buffer, Copy, For, If, Kernel, Let, Parallel, PrimFunc,
                                        Reduce, Store)
from tileagent.compiler.ir.visit import loads, stmt_exprs, walk
from tileagent.compiler.layout.fragment import Fragment, Level, make_blocked, reshape
from tileagent.compiler.layout.index_map import IndexMapLayout
from tileagent.compiler.layout.layout import Layout, swizzled
from tileagent.compiler.tileops import describe, op_for


@dataclass
class LayoutMap:
    fragments: dict = field(default_factory=dict)  # Buffer -> Fragment
    loops: dict = field(default_factory=dict)  # Parallel -> Fragment over the iteration space
    origin: dict = field(default_factory=dict)  # Buffer -> (stmt, why)
    shared: dict = field(default_factory=dict)  # Buffer -> Layout or SwizzledLayout from annotations
    gemm_partition: dict = field(default_factory=dict)  # Gemm -> (warps along M, warps along N)
    instructions: dict = field(default_factory=dict)  # Gemm -> GemmChoice (compiler.instructions)
    notes: dict = field(default_factory=dict)  # Gemm -> [(entry, why)]: entries dropped for it after a first try

    def __str__(self) -> str:
        lines = []
        for buf, frag in self.fragments.items():
            stmt, why = self.origin.get(buf, (None, ""))
            where = f" (line {stmt.span.line}: {why})" if stmt is not None and stmt.span else ""
            lines.append(f"{buf.name}: {frag.describe()}{where}")
        for loop, frag in self.loops.items():
            names = ", ".join(v.name for v in loop.vars)
            line = f"line {loop.span.line}" if loop.span else "?"
            lines.append(f"T.Parallel({names}) at {line}: {frag.describe()}")
        return "\n".join(lines)


def infer_layouts(func: PrimFunc, target=None) -> LayoutMap:
    """The layouts of ``func``'s kernels; gemm instructions are chosen for ``target`` (a ``Target``: its arch and
    features decide which registry entries apply; None: every feature, as ``compiler.instructions`` says). A fragment
    that several kernels declare (the parts of a T.Kernel cut at ``T.sync_grid()`` that use it) keeps the layout the
    first of them gave it: the later ones start from it (a conflict there is their L0xx), since the lowering reads
    one layout per buffer."""
    from tileagent.compiler.thread_ranges import check_lowerable, parts

    result = LayoutMap()
    for whole in func.body:
        if not isinstance(whole, Kernel):
            continue
        check_lowerable(whole, target)
        for k, own in parts(whole):  # a warp group's own tile ops: their layouts over its threads
            excluded: dict = {}  # gemm -> registry entries dropped for it (fallback_on_conversion)
            while True:
                part = LayoutMap()
                inference = _KernelInference(k, part, excluded, target)
                if own is not None:
                    inference.fragments = own
                for buf in inference.fragments:  # a fragment of an earlier kernel (T.sync_grid's parts): its layout
                    if buf in result.fragments:
                        part.fragments[buf], part.origin[buf] = result.fragments[buf], result.origin[buf]
                try:
                    inference.run()
                    drop = inference.misaligned_register_operands()
                except LayoutError as e:  # a conflict an optional entry's layout caused: retry without it
                    why = f"layout inference failed with it: {str(e.message).splitlines()[0]}"
                    chosen = part.instructions.items()
                    drop = {g: (c.instruction, why) for g, c in chosen
                            if getattr(c.instruction, "fallback_on_conversion", False)}  # RS first, then the rest
                    drop = drop or {g: (c.instruction, why) for g, c in chosen
                                    if getattr(c.instruction, "fallback_on_conflict", False)}
                    if not drop:
                        raise
                    drop = _Failed(drop)
                if drop and not isinstance(drop, _Failed):
                    drop = _needless_conversions(k, excluded, drop, target)
                if not drop:
                    break
                for g, (entry, why) in drop.items():
                    excluded.setdefault(g, []).append(entry)
                    result.notes.setdefault(g, []).append((entry, why))
            for name in ("fragments", "loops", "origin", "shared", "gemm_partition", "instructions"):
                getattr(result, name).update(getattr(part, name))
    return result


class _Failed(dict):
    """Entries to drop because inference failed with them (not merely because of a conversion)."""


def _needless_conversions(kernel: Kernel, excluded: dict, drop: dict, target=None) -> dict:
    """The part of ``drop`` (gemm -> (entry, why): a register-A entry whose layout makes a copy into A a conversion)
    whose conversion the gemm's next entry would avoid: inference redone without those entries, the copy into A then
    needs no conversion. Where the alternative converts as well, or fails, the register entry is kept (the conversion
    is there either way, and the wgmma is the faster gemm)."""
    trial = {g: list(v) for g, v in excluded.items()}
    for g, (entry, _) in drop.items():
        trial.setdefault(g, []).append(entry)
    alternative = _KernelInference(kernel, LayoutMap(), trial, target)
    try:
        alternative.run()
    except LayoutError:
        return {}
    converting = alternative.register_operand_conversions(only_optional=False)
    return {g: v for g, v in drop.items() if g not in converting}


ANY = ("any", None)  # pattern entry: an index that does not change within the loop (any value of its dim)


def divided_loop_var(loop: Parallel, e):
    """(loop dim, c) when ``e`` is ``v // c`` for the variable ``v`` of that T.Parallel dim and an int ``c`` > 1 (layout
    inference gives such a read its layout; the lowering maps its registers)."""
    if isinstance(e, BinOp) and e.op == "//" and isinstance(e.a, Var) and any(e.a is v for v in loop.vars):
        c = static_int(e.b)
        if c is not None and c > 1:
            return next(d for d, v in enumerate(loop.vars) if v is e.a), c
    return None


def shifted_loop_var(loop: Parallel, e):
    """(loop dim, n, o) when ``e`` is ``v + o`` (or ``o + v``) for the variable ``v`` of a T.Parallel dim of static
    extent n and a loop-invariant ``o`` that is a multiple of n by its form (TileLang's mHC reads
    ``x_frag[i, jj * 4 + j]`` in a loop over 4 values of j: block jj of the row); None otherwise."""
    if not (isinstance(e, BinOp) and e.op == "+"):
        return None
    for v, o in ((e.a, e.b), (e.b, e.a)):
        if isinstance(v, Var) and any(v is lv for lv in loop.vars):
            d = next(d for d, lv in enumerate(loop.vars) if lv is v)
            n = static_int(loop.extents[d])
            if n is not None and loop_invariant(loop, o) and _multiple_of(o, n):
                return d, n, o
    return None


def _multiple_of(e, n: int) -> bool:
    """True when ``e`` is a multiple of ``n`` by its form: a constant, a product with a multiple, a sum of multiples."""
    if static_int(e) is not None:
        return static_int(e) % n == 0
    if isinstance(e, BinOp) and e.op == "*":
        return _multiple_of(e.a, n) or _multiple_of(e.b, n)
    return isinstance(e, BinOp) and e.op in ("+", "-") and _multiple_of(e.a, n) and _multiple_of(e.b, n)


def _compressed(layout: Fragment, pattern) -> Fragment | None:
    """The layout of a fragment ``x`` read as ``x[.., v // c, ..]`` by a loop running on ``layout`` (every other dim
    its own loop variable, in order): the loop's innermost register level of that dim divided by ``c``, so the thread
    that runs iteration v holds element v // c. None when the pattern is not of that form, or the c consecutive
    iterations are not in one thread's registers (then the fragment gets a layout another way, and the access check
    decides)."""
    divs = [p for p in pattern if isinstance(p, tuple) and p[0] == "div"]
    if not divs or len(pattern) != len(layout.shape):
        return None
    dims = list(layout.dims)
    for k, p in enumerate(pattern):
        if isinstance(p, tuple) and p[0] == "div":
            d, c = p[1], p[2]
            levels = dims[d]
            if d != k or not levels or levels[0].is_thread or levels[0].size % c or layout.shape[d] % c:
                return None
            inner = levels[0].size // c
            dims[d] = ((Level(inner),) if inner > 1 else ()) + tuple(levels[1:])
            if not dims[d]:
                dims[d] = (Level(1),)
        elif p != k:
            return None
    shape = tuple(n // p[2] if isinstance(p, tuple) else n for n, p in zip(layout.shape, pattern))
    try:
        return Fragment(shape, tuple(dims), layout.replicate, layout.num_threads)
    except ValueError:
        return None


def _vars_of(e, out: set) -> set:
    """The Vars an expression reads (also inside load indices), by identity."""
    if isinstance(e, Var):
        out.add(id(e))
    elif isinstance(e, Load):
        for i in e.indices:
            _vars_of(i, out)
    elif isinstance(e, Expr):
        for name in getattr(e, "__slots__", ()):
            child = getattr(e, name)
            for c in (child if isinstance(child, tuple) else (child,)):
                if isinstance(c, Expr):
                    _vars_of(c, out)
    return out


def loop_invariant(loop: Parallel, e) -> bool:
    """True when ``e`` does not change within ``loop``: it reads neither its variables nor names bound in its body."""
    bound = {id(v) for v in loop.vars}
    bound |= {id(s.var) for s in walk(loop.body) if isinstance(s, (Let, For))}
    return not (_vars_of(e, set()) & bound)


def _vector_for(buffers) -> int:
    sizes = [b.dtype.bytes for b in buffers if b.scope in ("global", "shared")]
    return max(1, 16 // min(sizes)) if sizes else 8


class _KernelInference:
    def __init__(self, kernel: Kernel, result: LayoutMap, excluded: dict | None = None, target=None):
        self.kernel, self.r, self.target = kernel, result, target
        self.excluded = excluded or {}  # gemm -> registry entries not to choose for it
        self.threads = kernel.num_threads
        self.ops = [s for s in walk(kernel.body) if isinstance(s, (Parallel, AnnotateLayout)) or op_for(s) is not None]
        self.fragments = [s.buffer for s in walk(kernel.body) if getattr(s, "buffer", None) is not None
                          and type(s).__name__ == "Alloc" and s.buffer.scope == "fragment"]
        self.views: dict = {}  # fragment -> the fragments sharing its storage (T.reshape): one layout, cut per shape
        for s in walk(kernel.body):
            if type(s).__name__ == "Alloc" and s.view_of is not None and s.buffer.scope == "fragment":
                self.views.setdefault(s.buffer, []).append(s.view_of)
                self.views.setdefault(s.view_of, []).append(s.buffer)
        self.register_dims: dict = {}  # fragment -> dims some T.Parallel indexes with a loop-invariant expression
        for op in self.ops:
            if isinstance(op, Parallel):
                for buf, indices, _, _ in self.accesses(op):
                    dims = {d for d, i in enumerate(indices) if not self._loop_index(op, i) and
                            static_int(i) is None and loop_invariant(op, i)}
                    if dims:
                        self.register_dims.setdefault(buf, set()).update(dims)

    def misaligned_register_operands(self) -> dict:
        """Gemm -> (entry, why) for each gemm whose chosen entry asks to be dropped (``fallback_on_conversion``) when
        its A operand in registers would be filled by a copy from a fragment of another layout (a conversion through
        shared memory): the wgmma RS entry, whose A layout lines up with a wgmma accumulator of the same warpgroup
        split, not with an mma.sync accumulator of another warp split (``infer_layouts`` then checks that the next
        entry would avoid the conversion)."""
        return self.register_operand_conversions(only_optional=True)

    def register_operand_conversions(self, only_optional: bool) -> dict:
        """Gemm -> (entry, why) for each gemm (with ``only_optional``: whose entry is ``fallback_on_conversion``) whose
        A operand in registers a T.copy fills from a fragment of another layout."""
        out = {}
        for g, choice in self.r.instructions.items():
            a = g.a.buffer
            if (only_optional and not getattr(choice.instruction, "fallback_on_conversion", False)) or \
                    a.scope != "fragment":
                continue
            for op in self.ops:
                if isinstance(op, Copy) and op.dst.buffer is a and op.src.buffer.scope == "fragment" and \
                        not self.r.fragments[op.src.buffer].same_as(self.r.fragments[a]):
                    line = op.span.line if op.span else "?"
                    out[g] = (choice.instruction, f"'{a.name}' is copied from '{op.src.buffer.name}' (line {line}), "
                              "whose layout is not the wgmma A-register layout (it would need a conversion through "
                              "shared memory)")
                    break
        return out

    # -- assignment and conflicts ----------------------------------------------------------------------------
    def assign(self, buf: Buffer, frag: Fragment, stmt, why: str) -> bool:
        known = self.r.fragments.get(buf)
        if known is not None:
            if not known.same_as(frag):
                self.conflict(buf, known, frag, stmt, "L002" if isinstance(stmt, Reduce) else "L003")
            return False
        self.r.fragments[buf] = frag
        self.r.origin[buf] = (stmt, why)
        for other in self.views.get(buf, ()):  # T.reshape: the same registers under the other shape
            cut = reshape(frag, tuple(other.shape))
            if cut is None:
                line = stmt.span.line if stmt is not None and stmt.span else "?"
                raise LayoutError(
                    f"T.reshape between fragments '{buf.name}' {tuple(buf.shape)} and '{other.name}' "
                    f"{tuple(other.shape)}: the layout line {line} gives '{buf.name}' ({why}) keeps no thread and "
                    f"register of each element under the other shape", getattr(stmt, "span", None), code="L006",
                    notes=[f"'{buf.name}': {frag.describe()}"],
                    hint="reshape only where the new dims cut the layout's runs of registers and threads evenly "
                         "(e.g. split the last dim by a power of two), or copy through T.alloc_shared")
            self.assign(other, cut, stmt, f"{why}, through T.reshape of '{buf.name}'")
        return True

    def conflict(self, buf: Buffer, known: Fragment, wanted: Fragment, stmt, code: str):
        first, why = self.r.origin.get(buf, (None, ""))
        first_line = first.span.line if first is not None and first.span else "?"
        this_line = stmt.span.line if stmt.span else "?"
        raise LayoutError(
            f"layout conflict on fragment '{buf.name}': line {first_line} ({why}) and line {this_line} "
            f"({describe(stmt)}) need different thread maps", stmt.span, code=code,
            notes=[f"line {first_line}: {known.describe()}", f"line {this_line}: {wanted.describe()}"],
            hint=f"give both ops the same tile shape, copy '{buf.name}' through T.alloc_shared between them, or pin "
                 f"one layout with T.annotate_layout")

    # -- the passes ------------------------------------------------------------------------------------------
    def run(self) -> None:
        for op in self.ops:
            tile_op = op_for(op)
            if tile_op is not None and tile_op.layout_level == "strict":
                tile_op.infer_strict(op, self)
        for op in self.ops:
            if isinstance(op, AnnotateLayout):
                for buf, layout in op.layouts:
                    if isinstance(layout, Fragment):
                        self.assign(buf, layout, op, "T.annotate_layout")
                    elif isinstance(layout, Layout):
                        self.r.shared[buf] = layout
                    elif isinstance(layout, IndexMapLayout):  # a user's T.Layout: a gemm's own layout wins
                        self.r.shared[buf] = self.r.shared.get(buf) or layout.layout
                    else:  # make_swizzled_layout(buf): a gemm instruction's own swizzle where it chose one
                        # (wgmma's canonical layout, which TileLang's swizzle is on Hopper), else ours
                        self.r.shared[buf] = self.r.shared.get(buf) or swizzled(tuple(buf.shape), buf.dtype.bytes)
        while True:
            while self.propagate():
                pass
            if not self.free_choice():
                break
        for op in self.ops:
            if isinstance(op, Parallel):
                self.verify_loop(op)
            elif op_for(op) is not None:
                op_for(op).verify_layout(op, self)

    def propagate(self) -> bool:
        changed = False
        for op in self.ops:
            tile_op = op_for(op)
            if tile_op is not None:
                changed |= tile_op.infer_common(op, self)
            elif isinstance(op, Parallel) and op not in self.r.loops:
                layout = self.loop_from_fragments(op)
                if layout is not None:
                    self.set_loop(op, layout)
                    changed = True
        return changed

    def free_choice(self) -> bool:
        """Give the largest op still without a layout the default one (loops before tiles on ties, then program
        order), so that small loops and reduction outputs follow the big tiles. False when nothing is left."""
        candidates = []
        for n, op in enumerate(self.ops):
            if isinstance(op, Parallel) and op not in self.r.loops:
                extents = tuple(static_int(e) for e in op.extents)
                candidates.append((-len(extents), -np.prod(extents), 0, n, op, None))
            tiles = op_for(op).free_tiles(op) if op_for(op) is not None else []
            for buf, other in tiles:
                if buf not in self.r.fragments:
                    candidates.append((-buf.ndim, -np.prod(buf.shape), 1, n, op, (buf, other)))
        if candidates:
            *_, op, tile = min(candidates, key=lambda c: c[:4])
            if tile is None:
                self.set_loop(op, self.free_loop_layout(op))
            else:
                buf, other = tile
                vec = _vector_for([other.buffer]) if other is not None else self.copy_vector(buf)
                self.assign(buf, make_blocked(buf.shape, self.threads, vec, self.register_dims.get(buf, ())), op,
                            f"{describe(op)}, default layout")
            return True
        for buf in self.fragments:
            if buf not in self.r.fragments:
                self.assign(buf, make_blocked(buf.shape, self.threads, 4, self.register_dims.get(buf, ())), None,
                            "unused")
                return True
        return False

    def loop_vector(self, buffers) -> int:
        """Elements per thread-run of a T.Parallel loop over ``buffers``: 16 bytes of the narrowest memory buffer it
        touches, else (registers only) the narrowest width the copies moving its fragments use, so that a float32
        tile loaded by one copy, transformed, and stored by another moves 16 bytes per thread per access."""
        if any(b.scope in ("global", "shared") for b in buffers):
            return _vector_for(buffers)
        return min((self.copy_vector(b) for b in buffers if b.scope == "fragment"), default=8)

    @staticmethod
    def run_buffers(loop: Parallel) -> list:
        """The buffers a T.Parallel loop accesses along its last variable (the dim of a thread's contiguous run):
        those decide its vector width. One read the same for the whole run (``lab[i]`` in a loop over (i, j)) does not:
        an int64 label would otherwise cut the loop, and the copies of the tiles it shares a layout with, to 2-wide.
        All accessed buffers when none varies along it."""
        accesses = [(s.buffer, s.indices) for s in walk(loop.body) if isinstance(s, (Store, AtomicAdd))]
        accesses += [(ld.buffer, ld.indices) for s in walk(loop.body) for e in stmt_exprs(s) for ld in loads(e)]
        last = {id(loop.vars[-1])}
        along = [b for b, indices in accesses if any(_vars_of(i, set()) & last for i in indices)]
        return along or [b for b, _ in accesses]

    def copy_vector(self, buf: Buffer) -> int:
        """The vector width that suits the copies moving ``buf`` to or from memory."""
        for op in self.ops:
            if isinstance(op, Copy) and buf in (op.src.buffer, op.dst.buffer):
                other = op.dst.buffer if op.src.buffer is buf else op.src.buffer
                if other.scope in ("global", "shared"):
                    return _vector_for([other])
        return 8

    # -- loops -----------------------------------------------------------------------------------------------
    def accesses(self, loop: Parallel):
        """(buffer, index tuple, is_store) of every fragment access in the loop body."""
        out = []
        for s in walk(loop.body):
            exprs = []
            if isinstance(s, (Store, AtomicAdd)):
                if s.buffer.scope == "fragment":
                    out.append((s.buffer, s.indices, True, s))
                exprs = list(s.indices) + [s.value]
            elif isinstance(s, Let):
                exprs = [s.value]
            elif isinstance(s, If):
                exprs = [s.cond]
            for e in exprs:
                for load in loads(e):
                    if load.buffer.scope == "fragment":
                        out.append((load.buffer, load.indices, False, s))
        return out

    @staticmethod
    def _loop_index(loop: Parallel, i) -> bool:
        return isinstance(i, Var) and any(i is v for v in loop.vars)

    def _pattern(self, loop: Parallel, buf: Buffer, indices, stmt):
        """Per fragment dim: the loop dim its index is, ('const', c), ANY (loop-invariant), or ('div', d, c) for
        ``v // c`` with ``v`` the variable of loop dim ``d`` and ``c`` a positive constant (TileLang's dequantization
        loops read the packed byte ``B_local[i, j // 2]``), or ('shift', d, n) for ``v + o`` with ``o`` a
        loop-invariant multiple of the dim's extent n (``shifted_loop_var``). LayoutError (L004) for anything else."""
        pattern = []
        for dim, i in enumerate(indices):
            if self._loop_index(loop, i):
                d = next(d for d, v in enumerate(loop.vars) if v is i)
                extent = static_int(loop.extents[d])
                if extent is not None and extent > buf.shape[dim]:  # guarded by an if: fine on the CPU interpreter
                    raise LayoutError(f"fragment '{buf.name}' (shape {tuple(buf.shape)}) is indexed by '{i.name}', a "
                                      f"T.Parallel variable running to {extent - 1}, past dim {dim}: the GPU "
                                      f"layouts cover the declared shape only", getattr(stmt, "span", None) or
                                      loop.span, code="L004",
                                      hint=f"allocate '{buf.name}' with the loop's extent ({extent}) in dim {dim} "
                                           f"(TileLang sizes it by the loop), or loop over {buf.shape[dim]}")
                pattern.append(d)
            elif static_int(i) is not None:
                pattern.append(("const", static_int(i)))
            elif loop_invariant(loop, i):
                pattern.append(ANY)
            elif (div := divided_loop_var(loop, i)) is not None:  # x[i, j // 2]: packed data, c loop steps a value
                pattern.append(("div",) + div)
            elif (shift := shifted_loop_var(loop, i)) is not None:  # x[i, jj * 4 + j]: block jj of the dim
                pattern.append(("shift",) + shift[:2])
            else:
                raise LayoutError(f"fragment '{buf.name}' is indexed by an expression of the loop variables",
                                  getattr(stmt, "span", None) or loop.span, code="L004",
                                  hint="index fragments with the T.Parallel variables themselves (x[i, j]), a "
                                       "variable over a constant (x[i, j // 2]), constants, "
                                       "or values that do not change in the loop (an enclosing T.serial variable, "
                                       "for a dim the loop does not run over: x[k, j] of a (K, N) fragment in "
                                       "T.Parallel(N)); stage shifted or strided accesses (every other column: "
                                       "xs[i, 2 * j]) through T.alloc_shared")
        return pattern

    def _unshifted(self, loop: Parallel, buf: Buffer, frag: Fragment, pattern, stmt):
        """(frag, pattern) with each ('shift', d, n) dim read as loop dim d of ``frag`` cut to its first n indices:
        what every block of n holds when the layout repeats its thread map from block to block. L004 when it does
        not (block ``o // n`` would be held by other threads than block 0)."""
        for dim, p in enumerate(pattern):
            if isinstance(p, tuple) and p[0] == "shift":
                cut = frag.truncate(dim, p[2])
                if cut is None:
                    first, why = self.r.origin.get(buf, (None, ""))
                    first_line = first.span.line if first is not None and first.span else "?"
                    raise LayoutError(
                        f"fragment '{buf.name}' is read in blocks of {p[2]} along dim {dim} (a loop variable plus a "
                        f"multiple of {p[2]}), but its layout (line {first_line}: {why}) does not hold every block "
                        f"in the same threads", getattr(stmt, "span", None) or loop.span, code="L004",
                        notes=[f"{buf.name}: {frag.describe()}"],
                        hint=f"loop over all of dim {dim} of '{buf.name}' in the T.Parallel (x[i, j]), or stage it "
                             f"through T.alloc_shared")
                frag, pattern = cut, pattern[:dim] + [p[1]] + pattern[dim + 1:]
        return frag, pattern

    def _sliced(self, frag: Fragment, pattern) -> Fragment | None:
        """``frag`` without its ANY dims (they must be held in registers only: the same threads for every value),
        or None when some ANY dim is spread over threads."""
        for d in reversed(range(len(pattern))):
            if pattern[d] is ANY:
                if any(lv.is_thread and lv.size > 1 for lv in frag.dims[d]):
                    return None
                frag = frag.project(d) if len(frag.shape) > 1 else None
                if frag is None:
                    return None
        return frag

    def loop_from_fragments(self, loop: Parallel) -> Fragment | None:
        """The layout a loop takes from a fragment whose layout is known: one indexed by the loop's variables in
        order (or with loop-invariant dims held in registers); failing that, one indexed by all of them in another
        order (``Q_t[k, i] = Q[i, k]`` where Q_t is a gemm operand: the loop runs on Q_t's thread map, permuted, and
        Q then gets that layout, as TileLang composes a fragment's thread map with the index map)."""
        extents = tuple(static_int(e) for e in loop.extents)
        permuted = None
        for buf, indices, _, stmt in self.accesses(loop):
            if buf not in self.r.fragments:
                continue
            own, pattern = self._unshifted(loop, buf, self.r.fragments[buf], self._pattern(loop, buf, indices, stmt),
                                           stmt)
            if pattern == list(range(len(extents))) and own.shape == extents:
                return own
            # x[k, j] with k serial, or x[j, 0] where that dim is in registers or of size 1 (the (N, 1) logits of a
            # reduction in TileLang's HISA indexer): x's row layout
            held = [ANY if isinstance(p, tuple) and p[0] == "const" else p for p in pattern]
            if ANY in held and [p for p in held if p is not ANY] == list(range(len(extents))):
                frag = self._sliced(own, held)
                if frag is not None and frag.shape == extents:
                    return frag
            if permuted is None and all(isinstance(p, int) for p in pattern) and \
                    sorted(pattern) == list(range(len(extents))):
                frag = own.permute(sorted(range(len(pattern)), key=pattern.__getitem__))
                permuted = frag if frag.shape == extents else None
        return permuted

    def free_loop_layout(self, loop: Parallel) -> Fragment:
        extents = tuple(static_int(e) for e in loop.extents)
        buffers = self.run_buffers(loop)
        for buf, indices, _, stmt in self.accesses(loop):
            if buf not in self.r.fragments and self.register_dims.get(buf) and tuple(buf.shape) == extents and \
                    self._pattern(loop, buf, indices, stmt) == list(range(len(extents))):
                # another loop indexes some dims of buf with a serial variable: keep those in registers
                return make_blocked(extents, self.threads, self.loop_vector(buffers), self.register_dims[buf])
        if self.accesses(loop):  # a loop over memory alone is not tied to another's registers: vectorized runs
            for other, layout in self.r.loops.items():
                if layout.shape == extents and self.compatible(loop, layout):
                    return layout
        blocked = make_blocked(extents, self.threads, self.loop_vector(buffers))
        if self.compatible(loop, blocked):
            return blocked
        for in_order in (True, False):
            for buf, indices, is_store, stmt in self.accesses(loop):
                # TileLang's loop layout from a read fragment: x[h] read in T.Parallel(H, K) runs (h, k) on the owners
                # of x[h], every k of it in their registers (S[h, k] = ... / logsum[h] in split-KV decoding with
                # logits); second, a read in another dim order (x[j, i] in a loop over (i, j): a reduction's output
                # stored transposed, TileLang's DSA indexers) runs on x's thread map with its dims permuted, as
                # TileLang composes the fragment's thread map with any index map
                pattern = self._pattern(loop, buf, indices, stmt)
                if is_store or buf not in self.r.fragments or not pattern or \
                        any(isinstance(p, tuple) for p in pattern) or len(set(pattern)) < len(pattern) or \
                        (pattern == sorted(pattern)) != in_order:
                    continue
                layout = self.r.fragments[buf].permute(sorted(range(len(pattern)), key=pattern.__getitem__))
                for d in range(len(extents)):
                    if d not in pattern:
                        layout = layout.insert_register_dim(d, extents[d])
                if layout.shape == extents and self.compatible(loop, layout):
                    return layout
        return blocked

    def set_loop(self, loop: Parallel, layout: Fragment) -> None:
        self.r.loops[loop] = layout
        extents = layout.shape
        for buf, indices, _, stmt in self.accesses(loop):
            if buf in self.r.fragments:
                continue
            pattern = self._pattern(loop, buf, indices, stmt)
            frag = _compressed(layout, pattern)
            if frag is not None and tuple(buf.shape) == frag.shape:  # x[i, j // c]: c loop steps share a value
                self.assign(buf, frag, loop, "T.Parallel loop, its packed reads x[.., v // c]")
                continue
            dims = [p for p in pattern if isinstance(p, int)]  # the loop dims it indexes, in its dims' order
            if any(isinstance(p, tuple) and p[0] in ("div", "shift") for p in pattern) or not dims or \
                    len(set(dims)) < len(dims):
                continue
            frag = layout
            for d in reversed(range(len(extents))):
                if d not in dims:
                    frag = frag.project(d)
            if dims != sorted(dims):  # x[j, i] in a loop over (i, j): the loop's thread map, transposed
                frag = frag.permute([sorted(dims).index(p) for p in dims])
            for d, p in enumerate(pattern):  # loop-invariant and constant dims: every value in each owner's registers
                if not isinstance(p, int):
                    frag = frag.insert_register_dim(d, buf.shape[d])
            if tuple(buf.shape) == frag.shape:
                self.assign(buf, frag, loop, "T.Parallel loop" if len(pattern) == len(extents) else
                            "T.Parallel loop, replicated over the loop dims it does not index")

    def loop_owner(self, loop: Parallel, layout: Fragment):
        """The fragment whose layout the loop runs on (indexed with all loop variables in order), if any."""
        for buf, indices, _, stmt in self.accesses(loop):
            frag = self.r.fragments.get(buf)
            if frag is layout or (frag is not None and frag.shape == layout.shape and frag.same_as(layout)):
                if self._pattern(loop, buf, indices, stmt) == list(range(len(layout.shape))):
                    return buf
        return None

    def compatible(self, loop: Parallel, layout: Fragment) -> bool:
        try:
            self._check_accesses(loop, layout)
        except LayoutError:
            return False
        return True

    def verify_loop(self, loop: Parallel) -> None:
        self._check_accesses(loop, self.r.loops[loop], raise_conflict=True)

    def _check_accesses(self, loop: Parallel, layout: Fragment, raise_conflict: bool = False) -> None:
        # Owner sets as packed bits (Fragment.owner_bits: 8 threads a byte) and index grids as open grids that
        # broadcast to the loop's shape: the same sets as the bool masks of every (iteration, thread), 8 to
        # hundreds of times less data.
        identity = list(range(len(layout.shape)))
        runs = None
        for buf, indices, is_store, stmt in self.accesses(loop):
            frag = self.r.fragments.get(buf)
            if frag is None:
                continue
            try:
                frag, pattern = self._unshifted(loop, buf, frag, self._pattern(loop, buf, indices, stmt), stmt)
            except LayoutError:
                if raise_conflict:
                    raise
                raise LayoutError("incompatible") from None
            if pattern == identity and (frag is layout or frag == layout or frag.same_as(layout)):
                continue  # the loop runs on this fragment's own thread map: each iteration on the element's owners
            spread = [d for d, p in enumerate(pattern) if p is ANY and
                      any(lv.is_thread and lv.size > 1 for lv in frag.dims[d])]
            if spread:
                if not raise_conflict:
                    raise LayoutError("incompatible")
                first, why = self.r.origin.get(buf, (None, ""))
                first_line = first.span.line if first is not None and first.span else "?"
                raise LayoutError(
                    f"fragment '{buf.name}' is indexed in the T.Parallel loop at line "
                    f"{loop.span.line if loop.span else '?'} by a value that does not change in the loop (dim "
                    f"{spread[0]}), but its layout (line {first_line}: {why}) spreads that dim over threads, so no "
                    f"one thread holds the element for every value", getattr(stmt, "span", None) or loop.span,
                    code="L004", notes=[f"{buf.name}: {frag.describe()}"],
                    hint=f"let a T.Parallel loop over all of '{buf.name}' write it first (its serially indexed dims "
                         f"then stay in registers), or go through T.alloc_shared")
            if runs is None:
                runs = layout.owner_bits()
            bits = frag.owner_bits()
            any_dims = tuple(d for d, p in enumerate(pattern) if p is ANY)
            every = np.bitwise_and.reduce(bits, axis=any_dims, keepdims=True) if any_dims else bits  # every value
            some = np.bitwise_or.reduce(bits, axis=any_dims, keepdims=True) if any_dims else bits
            rank = len(layout.shape)
            idx = tuple(np.arange(layout.shape[p]).reshape([-1 if d == p else 1 for d in range(rank)])
                        if not isinstance(p, tuple) else
                        np.minimum(np.arange(layout.shape[p[1]]) // p[2], buf.shape[k] - 1).reshape(
                            [-1 if d == p[1] else 1 for d in range(rank)]) if p[0] == "div" else
                        (p[1] if p is not ANY else 0) for k, p in enumerate(pattern))
            holds = every[idx]
            bad = ((runs ^ holds) | (runs ^ some[idx])) if is_store else (runs & ~holds)
            if bad.any():
                if not raise_conflict:
                    raise LayoutError("incompatible")
                first, why = self.r.origin.get(buf, (None, ""))
                first_line = first.span.line if first is not None and first.span else "?"
                bad = np.broadcast_to(bad, runs.shape)
                point = tuple(int(x[0]) for x in np.nonzero(bad.any(-1)))
                idx = tuple(np.broadcast_to(i, layout.shape) for i in idx)
                owner = self.loop_owner(loop, layout)
                runs_on = f"the layout of '{owner.name}'" if owner is not None else "its own layout"
                raise LayoutError(
                    f"layout conflict between '{buf.name}' (layout from line {first_line}: {why}) and the T.Parallel "
                    f"loop at line {loop.span.line if loop.span else '?'}, which runs on {runs_on}: iteration "
                    f"{point} runs on threads that do not hold {buf.name}[{', '.join(str(int(i[point])) for i in idx)}]",
                    getattr(stmt, "span", None) or loop.span, code="L001",
                    notes=[f"loop ({runs_on}): {layout.describe()}", f"{buf.name}: {frag.describe()}"],
                    hint=f"make the loop's extents match '{buf.name}''s shape, or go through T.alloc_shared")
