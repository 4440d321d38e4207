"""Compiler limits: what a kernel may ask of the target and of the compiler, checked before code is generated.

In: a checked PrimFunc, its LayoutMap and the Target. Out: nothing, or a ``ResourceError`` (E8xx) at the DSL line
that asks too much, with the numbers and the limit.
Guarantees (each limit a named constant here or a field of ``Target``):

- E802: each register array a thread declares (fragments by their layout's registers per thread, locals and vars by
  their size; 32-bit words) fits ``ARRAY_FACTOR`` times ``target.registers_per_thread`` (ptxas spills what does not
  fit: TileLang's DeepSeek-V3.2 sparse MLA backward accumulates a 64 x 512 float32 tile on 128 threads, 256 words, one
  more than sm_90a's 255), and all of them together fit ``SPILL_FACTOR`` times that. Arrays whose lifetimes do not
  overlap share registers, and ptxas spills what does not fit (the resources feedback shows it as local memory), so
  the sum alone is no limit (TileLang's MHA forward declares 340 words per thread and ran at 223 TFLOP/s); past these
  bounds the kernel would run from local memory and NVRTC's time grows with the arrays (a 2048 x 2048 float32 fragment
  is 32768 registers per thread).
- E804: compile-time unrolling stays within ``MAX_UNROLLED`` copies of a body: the product of the enclosing
  ``T.unroll`` extents, times the registers per thread of a ``T.Parallel`` loop (its body is emitted once per
  register slot).
- E801 (shared memory over ``target.shared_bytes``) is checked by ``compiler.lower.smem.check_fits`` once the arena
  is planned; E803 (nesting) where recursion runs out; E805 (NVRTC time) by ``compiler.runtime.nvrtc``.
"""

from __future__ import annotations

import math

from tileagent.compiler.diagnostics import ResourceError
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import Alloc, For, Kernel, Parallel, PrimFunc
from tileagent.compiler.ir.visit import walk

MAX_UNROLLED = 4096  # copies of one body that unrolling may emit
SPILL_FACTOR = 4  # the register arrays of a kernel together may declare this many times the target's registers
ARRAY_FACTOR = 2  # one register array may declare this many times the target's registers (the rest spills)


def check_limits(func: PrimFunc, layouts, target) -> None:
    """Raise the first E802/E804 ResourceError of ``func`` (see the module docstring)."""
    for k in func.body:
        if isinstance(k, Kernel):
            _registers(k, layouts, target)
            _unrolling(k.body, 1, layouts)


def register_words(buf, layouts) -> int:
    """32-bit registers one thread needs for on-chip buffer ``buf`` (0 for global and shared buffers)."""
    if buf.scope == "fragment":
        frag = layouts.fragments.get(buf)
        if frag is None:
            return 0
        count = frag.num_slots
    elif buf.scope in ("local", "var"):
        count = math.prod(static_int(n) or 1 for n in buf.shape) if buf.shape else 1
    else:
        return 0
    return -(-count * buf.dtype.bytes // 4)


def _registers(k: Kernel, layouts, target) -> None:
    allocs = [s for s in walk(k.body) if isinstance(s, Alloc) and s.buffer.scope in ("fragment", "local", "var")
              and s.view_of is None]  # a T.reshape view has its base's registers
    words = [(register_words(s.buffer, layouts), s) for s in allocs]
    total = sum(w for w, _ in words)
    if not words:
        return
    w, biggest = max(words, key=lambda x: x[0])
    limit = target.registers_per_thread
    if w <= ARRAY_FACTOR * limit and total <= SPILL_FACTOR * limit:
        return
    b = biggest.buffer
    what = (f"{b.scope} '{b.name}' {tuple(b.shape)} {b.dtype} needs {w} 32-bit registers per thread over "
            f"{k.num_threads} threads; {target.arch} allows {limit} (an array of up to {ARRAY_FACTOR * limit} "
            f"compiles, partly spilled to local memory)") if w > ARRAY_FACTOR * limit else (
        f"the register arrays of this kernel need {total} 32-bit registers per thread, more than {SPILL_FACTOR} x the "
        f"{limit} {target.arch} allows (the largest: {b.scope} '{b.name}' {tuple(b.shape)} {b.dtype}, {w} per thread)")
    raise ResourceError(what, biggest.span, code="E802",
                        hint="use smaller tiles, more threads, or keep the data in shared memory (T.alloc_shared)")


def _unrolling(stmts, factor: int, layouts) -> None:
    for s in stmts:
        if isinstance(s, For) and s.kind == "unroll":
            n = static_int(s.extent)
            inner = factor * (n if n is not None else 1)
            if inner > MAX_UNROLLED:
                raise ResourceError(f"T.unroll would emit {inner} copies of its body; the compiler unrolls at most "
                                    f"{MAX_UNROLLED}", s.span, code="E804",
                                    hint="use T.serial for long loops (unroll only short inner loops)")
            _unrolling(s.body, inner, layouts)
        elif isinstance(s, Parallel):
            layout = layouts.loops.get(s)
            slots = layout.num_slots if layout is not None else 1
            if factor * slots > MAX_UNROLLED:
                raise ResourceError(
                    f"this T.Parallel loop gives each thread {slots} iterations" +
                    (f" inside unrolled loops ({factor} copies)" if factor > 1 else "") +
                    f", which are unrolled: {factor * slots} copies of its body; the compiler unrolls at most "
                    f"{MAX_UNROLLED}", s.span, code="E804",
                    hint="split the work over a T.serial loop of smaller tiles, or use more threads")
        else:
            for name in ("body", "then_body", "else_body"):
                _unrolling(getattr(s, name, ()) or (), factor, layouts)


__all__ = ["MAX_UNROLLED", "check_limits", "register_words"]
