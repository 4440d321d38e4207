"""Element atomic adds of a T.Parallel nest merged into vector atomics.

In: the thread-IR statements ``lower_parallel`` built (unrolled loops over a layout's registers).
Out: the same statements, where an unrolled loop (r over an even count) held only ``dst[base + r] += reg[rbase + r]``
(one scalar ``AtomicAdd``: op "add", no returned value, global float32 / float16 / bfloat16 destination; or that
under an ``If`` whose condition does not depend on ``r``, a bounds check along another dim) now holds
one ``VecAtomicAdd`` per ``width`` iterations (``width`` 4 or 2 for float32, 2 for 16-bit: ``VECTOR_ATOMIC_WIDTHS``).
Guarantees: merged only when ``base`` is a known multiple of ``width`` (the destination's data pointer is checked at
launch: ``required_alignment``) and the loop variable enters both indices as a plain ``+ r``; each element's add stays
atomic, as before (TileLang vectorizes such loops the same way: ``AtomicAddx2``). Anything else is left as it was.
Why: a gemm fragment written back with ``T.atomic_add(dQ[i, j], dq[i, j])`` (attention backward) holds pairs of
adjacent columns per thread; a warp's scalar atomics touch every 32-byte sector twice, the pairs once.
"""

from __future__ import annotations

from dataclasses import replace

from tileagent.compiler.instructions.copy import VECTOR_ATOMIC_WIDTHS
from tileagent.compiler.ir.expr import Cast, Load, as_expr, make_binop
from tileagent.compiler.ir.simplify import depends_on, known_multiple, static_int
from tileagent.compiler.ir.stmt import AtomicAdd, For, If
from tileagent.compiler.lower.shared_vectors import run_base
from tileagent.compiler.tir import VecAtomicAdd


def merge_vector_atomics(stmts: list) -> list:
    """``stmts`` with each unrolled loop of element atomic adds that qualifies (module docstring) vectorized."""
    out = []
    for s in stmts:
        if isinstance(s, For):
            merged = _vectorized(s)
            out.append(merged if merged is not None else replace(s, body=tuple(merge_vector_atomics(list(s.body)))))
        else:
            out.append(s)
    return out


def _vectorized(loop: For):
    extent = static_int(loop.extent)
    if loop.kind != "unroll" or static_int(loop.start) != 0 or static_int(loop.step) != 1 or extent is None:
        return None
    guard = None
    if len(loop.body) == 1 and isinstance(loop.body[0], If) and not loop.body[0].else_body \
            and not depends_on(loop.body[0].cond, (loop.var,)):  # a bounds check along another dim
        guard = loop.body[0]
    body = guard.then_body if guard is not None else loop.body
    if len(body) != 1 or not isinstance(add := body[0], AtomicAdd):
        return None
    widths = [w for w in VECTOR_ATOMIC_WIDTHS.get(str(add.buffer.dtype), ()) if extent % w == 0]
    if add.op != "add" or add.prev is not None or add.buffer.scope != "global" or not widths:
        return None
    value = add.value.value if isinstance(add.value, Cast) else add.value
    if not isinstance(value, Load) or value.buffer.scope != "local" or len(value.indices) != 1:
        return None
    d_base, s_base = run_base(add.indices[0], loop.var, extent), run_base(value.indices[0], loop.var, extent)
    if d_base is None or s_base is None:
        return None
    width = next((w for w in sorted(widths, reverse=True) if known_multiple(d_base) % w == 0), None)
    if width is None:
        return None
    if extent == width:
        vector = VecAtomicAdd(add.buffer, as_expr(d_base), value.buffer, as_expr(s_base), width, add.span)
    else:
        step = make_binop("*", loop.var, width)
        vector = replace(loop, extent=extent // width, body=(VecAtomicAdd(
            add.buffer, as_expr(make_binop("+", d_base, step)), value.buffer, as_expr(make_binop("+", s_base, step)),
            width, add.span),))
    return vector if guard is None else If(guard.cond, (vector,), (), guard.span)
