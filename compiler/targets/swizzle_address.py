"""Shared-memory addresses of swizzled tiles split so that the per-instruction part is one XOR and an immediate.

In: the element index of an ``ldmatrix`` into an XOR-swizzled shared tile, as the lowering wrote it:
``P + (r ^ key(r))`` where ``key(r) = ((r // 2**(base + shift)) % 2**bits) * 2**base`` (``Swizzle.apply``) and P holds
the terms outside the swizzle (whole swizzle periods, the pipeline stage, row atoms). Out: the same address as

    ((smem(thread) + runtime) ^ xor_const) + const            (bytes; smem(thread) = &tile[P_t + (R_t ^ key(R_t))])

where ``thread`` depends on the thread (loop-invariant: the compiler keeps it in a register), ``runtime`` on loop
variables that are not unrolled (the stage; one add per iteration, shared by every ldmatrix of the tile),
``xor_const`` and ``const`` only on unrolled loop variables (constants after unrolling: an immediate XOR and the
instruction's immediate offset). Without the split the compiler keeps one register per (K step, stage) or recomputes
the swizzle for each ldmatrix (flash attention spilled those registers at 4 warps x block_N 64).

Guarantees: ``split_swizzled_index`` returns a split only when it equals the original address for every value of the
variables in their ranges, which holds when (checked here): the terms of r have pairwise disjoint bits, so
r = R_t | R_u and r ^ key(r) = (R_t ^ key(R_t)) ^ R_u with R_u (the unrolled terms) below 2**(base + shift) (the key
bits); every term outside the swizzle is a multiple of 2**m, m = R_u's bit length; and the tile's shared address is a
multiple of 2**m elements (``SMEM_ALIGN`` for the arena, the tile's offset checked), so adding those terms never
carries into the bits the XOR changes. Otherwise None (the caller emits the index as it is).
"""

from __future__ import annotations

from dataclasses import dataclass

from tileagent.compiler.ir.expr import BinOp, Call, Cast, Const, Expr, Unary, Var, make_binop
from tileagent.compiler.ir.printer import expr_str
from tileagent.compiler.ir.simplify import additive_terms, depends_on, sum_of_terms
from tileagent.compiler.tir import LANE, THREAD, WARP

SMEM_ALIGN = 1024  # bytes: the dynamic shared-memory arena is declared __align__(SMEM_ALIGN)


@dataclass(frozen=True)
class SwizzledAddress:
    """Element-index parts (ints or Exprs) of one address; see the module docstring."""

    thread: object
    runtime: object
    xor_const: object
    const: object


def split_swizzled_index(index, ranges: dict, unrolled: set, elem_bytes: int, tile_offset: int):
    """The split of ``index`` (see module docstring) or None.

    Args:
        ranges: (lowest, highest) value of each Var the index may mention (special thread vars included).
        unrolled: the Vars of unrolled loops with constant bounds (constants once the loop is unrolled).
        elem_bytes: bytes of one element of the tile; tile_offset: the tile's byte offset in the arena.
    """
    terms = additive_terms(index)
    if terms is None:
        return None
    coef, const = terms
    swz = [(a, c) for a, c in coef if _swizzle_parts(a) is not None]
    if len(swz) != 1 or swz[0][1] != 1:
        return None
    atom = swz[0][0]
    r, period, modulus, unit = _swizzle_parts(atom)
    inner = additive_terms(r)
    if inner is None:
        return None
    r_coef, r_const = inner
    spans = [_bits(a, c, ranges) for a, c in r_coef] + [r_const if r_const >= 0 else None]
    if any(s is None for s in spans) or not _disjoint(spans):
        return None
    is_const = [_is_const(a, unrolled) for a, _ in r_coef]
    ru = [(a, c) for (a, c), k in zip(r_coef, is_const) if k]
    rt = [(a, c) for (a, c), k in zip(r_coef, is_const) if not k]
    ru_max = sum(_hi(a, c, ranges) for a, c in ru) + r_const
    if ru_max >= period:  # the unrolled part would change the key
        return None
    align = 1 << ru_max.bit_length()
    outer = [(a, c) for a, c in coef if a is not atom]
    if const % align or any(c % align for _, c in outer) or tile_offset % (align * elem_bytes) or \
            SMEM_ALIGN % (align * elem_bytes):
        return None
    rt_expr = sum_of_terms(rt, 0)
    swizzled = make_binop("^", rt_expr, make_binop("*", make_binop("%", make_binop("//", rt_expr, period), modulus),
                                                   unit))
    kinds = {"thread": [], "runtime": [], "const": []}
    for a, c in outer:
        kind = "thread" if depends_on(a, (THREAD, LANE, WARP)) else "const" if _is_const(a, unrolled) else "runtime"
        kinds[kind].append((a, c))
    return SwizzledAddress(thread=make_binop("+", sum_of_terms(kinds["thread"], 0), swizzled),
                           runtime=sum_of_terms(kinds["runtime"], 0), xor_const=sum_of_terms(ru, r_const),
                           const=sum_of_terms(kinds["const"], const))


def _swizzle_parts(e):
    """(r, 2**(base + shift), 2**bits, 2**base) when e is ``r ^ (((r // p) % q) * u)``, else None."""
    if not (isinstance(e, BinOp) and e.op == "^" and isinstance(e.b, BinOp) and e.b.op == "*"):
        return None
    mod, unit = e.b.a, e.b.b
    if not (isinstance(mod, BinOp) and mod.op == "%" and isinstance(mod.a, BinOp) and mod.a.op == "//"):
        return None
    nums = [_const(x) for x in (mod.a.b, mod.b, unit)]
    if any(n is None or n <= 0 or n & (n - 1) for n in nums) or expr_str(mod.a.a) != expr_str(e.a):
        return None
    return (e.a, *nums)


def _const(e):
    if isinstance(e, int):
        return e
    if isinstance(e, Const) and not e.dtype.is_float:
        return int(e.value)
    return None


def _range(e, ranges):
    """(lowest, highest) of an integer expression over ``ranges``, or None."""
    if isinstance(e, int):
        return e, e
    if isinstance(e, Const):
        return None if e.dtype.is_float else (int(e.value), int(e.value))
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, Cast) and e.dtype.is_int:
        return _range(e.value, ranges)
    if isinstance(e, BinOp):
        a, b = _range(e.a, ranges), _range(e.b, ranges)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a[0] + b[0], a[1] + b[1]
        if e.op == "-":
            return a[0] - b[1], a[1] - b[0]
        if e.op == "*":
            products = [x * y for x in a for y in b]
            return min(products), max(products)
        if e.op in ("//", "%") and b[0] == b[1] and b[0] > 0 and a[0] >= 0:
            return (a[0] // b[0], a[1] // b[0]) if e.op == "//" else (0, min(a[1], b[0] - 1))
    return None


def _hi(atom, c, ranges) -> int:
    return c * _range(atom, ranges)[1]


def _bits(atom, c, ranges):
    """The bits term c * atom can set (an int mask), or None when it may be negative or its range is unknown."""
    rng = _range(atom, ranges)
    if rng is None or rng[0] < 0 or c <= 0:
        return None
    low = (c & -c).bit_length() - 1
    return ((1 << (c * rng[1]).bit_length()) - 1) & ~((1 << low) - 1)


def _disjoint(masks) -> bool:
    seen = 0
    for m in masks:
        if seen & m:
            return False
        seen |= m
    return True


def _variables(e):
    if isinstance(e, Var):
        yield e
    elif isinstance(e, Expr):
        for name in getattr(e, "__slots__", ()):
            child = getattr(e, name)
            for x in (child if isinstance(child, tuple) else (child,)):
                if isinstance(x, (Expr, Var)):
                    yield from _variables(x)


def _is_const(e, unrolled) -> bool:
    return not isinstance(e, (Call, Unary)) and all(v in unrolled for v in _variables(e))
