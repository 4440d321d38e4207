"""Lowering of ``T.gemm`` to tensor cores: warp-wide ``mma.sync`` m16n8k16 (fp16/bf16 in, fp32 accumulate),
m16n8k32 for 8-bit operands (fp8 -> fp32, int8 -> int32), which is m16n8k16 over pairs of bytes: K steps of 32
elements, ldmatrix reading rows of 16 bytes, four bytes per A/B register (K-major operands only), and m16n8k8 .tf32
for 32-bit operands (float32 / tfloat32), m16n8k16 over 32-bit elements: K steps of 8, one element per register.
int4 / uint4 tiles (two elements a byte, ``Gemm.packed``) are lowered as their bytes, as int8, into m16n8k64.

In: a Gemm whose accumulator has the mma layout of its warp partition (layout inference guarantees it; see
``compiler.layout.mma``), A and B in shared memory, or A in registers with the A-operand layout. Out: thread IR.
How: each warp walks its (M / wm) x (N / wn) tile in 16 x 8 atoms; for every 16-deep step of K it loads the B atoms
of its columns once (``ldmatrix.x4``, ``.trans`` for a K x N tile, two atoms per instruction), then per row atom its
A atom (one ``ldmatrix.x4``, ``.trans`` for a transposed A; or A's registers named directly when A lives in
registers) and issues one ``Mma`` per column atom. Operands ldmatrix cannot read (not 16-byte rows, a sub-chunk
swizzle) are loaded element by element in the mma register layout instead.
Guarantees: C += op(A) @ op(B) for the whole tile (C zeroed first with ``clear_accum``), every lane of every warp
executing each Mma.
"""

from __future__ import annotations

from tileagent.compiler.ir.expr import Const, as_expr, make_binop
from tileagent.compiler.ir.stmt import Alloc, Copy, For, Gemm, Store
from tileagent.compiler.instructions.base import k_step
from tileagent.compiler.instructions.mma_sync import DTYPES as MMA_DTYPES, MmaSyncM16N8K16
from tileagent.compiler.ir.visit import leaves, walk
from tileagent.compiler.ir.simplify import difference, is_even, known_multiple
from tileagent.compiler.tir import THREAD, Declare, LdMatrix, Mma, VecCopy

def lower_gemm(ctx, s: Gemm) -> list:
    """The mma.sync lowering of ``s`` (the registry entry ``compiler.instructions.mma_sync`` applies: its dtypes and
    operand scopes were checked there)."""
    a_buf, b_buf, c_buf = s.a.buffer, s.b.buffer, s.c.buffer
    row_base, col_base, tm, tn, k = _warp_tile(ctx, s)
    step_k = k_step(a_buf)  # K elements per mma: 16, 32 for 8-bit operands, 8 for 32-bit ones
    per = 4 // a_buf.dtype.bytes  # elements per 32-bit register: 2, 4 (8-bit) or 1 (tf32)
    lane = make_binop("%", THREAD, 32)
    g, t = make_binop("//", lane, 4), make_binop("%", lane, 4)
    c_reg = ctx.mem(c_buf)
    out = []
    if s.clear_accum:
        zero = ctx.var("z")
        out.append(For(zero, 0, c_reg.shape[0], 1, "unroll", (Store(c_reg, (zero,), Const(
            0.0 if c_buf.dtype.is_float else 0, c_buf.dtype)),)))
    n_atoms = tn // 8
    ld_a = a_buf.scope == "shared" and ldmatrix_ok(ctx, s.a) and not (per == 1 and s.transpose_a)
    ld_b = ldmatrix_ok(ctx, s.b) and not (per == 1 and not s.transpose_b)  # .trans moves 16-bit units, not tf32
    if per == 4 and not (ld_b and (ld_a or a_buf.scope == "fragment")):
        from tileagent.compiler.diagnostics import TargetError

        bad = b_buf if not ld_b else a_buf
        raise TargetError(f"T.gemm on {a_buf.dtype} (mma.sync m16n8k32): ldmatrix cannot read the shared tile "
                          f"'{bad.name}' (rows of whole 16-byte chunks, the tile's K start a multiple of 16 "
                          f"elements)", s.span, code="E602",
                          hint="keep 8-bit gemm operands as whole shared tiles whose K extent is a multiple of 16")
    # ldmatrix fills 32-bit registers (uint32: 2 per B atom, 4 per A atom); element loads fill registers of the
    # element dtype (16-bit: 4 per B atom, 8 per A atom; tf32: 2 and 4)
    b_per, a_per = (2 if ld_b else 2 * per), (4 if ld_a else 4 * per)
    b_frag = ctx.scratch_registers("b_frag", b_per * n_atoms, "uint32" if ld_b else b_buf.dtype)
    out.append(Declare(b_frag, span=s.span))
    a_frag = hoisted = ctx.hoisted_a.get(s)  # A's atoms of every K step, loaded before the enclosing loop
    if a_buf.scope == "shared" and hoisted is None:  # every row atom of one K step
        a_frag = ctx.scratch_registers("a_frag", a_per * (tm // 16), "uint32" if ld_a else a_buf.dtype)
        out.append(Declare(a_frag, span=s.span))

    def c_slot(am, h, an, pair):
        return make_binop("+", make_binop("*", make_binop("+", make_binop("*", make_binop("+", make_binop(
            "*", am, 2), h), n_atoms), an), 2), pair)

    def load(frag, first, region, pairs, transpose: bool) -> list:
        """frag[first + i] = op(region)[pairs[i]], two elements at a time as one 32-bit access where they are
        adjacent in shared memory."""
        stmts = []
        if per == 1:  # one 32-bit element per register: nothing to pair
            return [Store(frag, (as_expr(make_binop("+", first, i)),), ctx.element(region.buffer, _element(
                region, *pair, transpose)), s.span) for i, pair in enumerate(pairs)]
        for i in range(0, len(pairs), 2):
            idx = [_element(region, *pairs[j], transpose) for j in (i, i + 1)]
            if _adjacent_pair(ctx, region.buffer, idx):
                stmts.append(VecCopy(frag, as_expr(make_binop("+", first, i)), ctx.mem(region.buffer),
                                     as_expr(ctx.offset(region.buffer, idx[0])), 2, s.span))
            else:
                stmts += [Store(frag, (as_expr(make_binop("+", first, j)),), ctx.element(region.buffer, idx[j - i]),
                                s.span) for j in (i, i + 1)]
        return stmts

    mi, r8 = make_binop("//", lane, 8), make_binop("%", lane, 8)

    def load_b(kb, k0) -> list:
        """B atoms of the warp's columns for one K step: ldmatrix (.trans for a K x N tile) two atoms at a time, or
        element loads by the mma register layout."""
        if not ld_b:
            an = ctx.var("an")
            col = make_binop("+", make_binop("+", col_base, make_binop("*", an, 8)), g)
            b_pairs = [(make_binop("+", k0, hk * step_k // 2 + e), col) for hk in (0, 1) for e in range(per)]
            return [For(an, 0, n_atoms, 1, "unroll", tuple(load(b_frag, make_binop("*", an, 2 * per), s.b, b_pairs,
                                                                 s.transpose_b)))]
        return [ldmatrix_b(kb, first) for first in range(0, n_atoms, 2)]

    def ldmatrix_b(kb, first) -> LdMatrix:
        """B atoms first and first + 1 (the last one alone when n_atoms is odd) of one K step: matrix mi holds K
        half mi % 2 of atom first + mi // 2."""
        num = 4 if first + 1 < n_atoms else 2
        kk = make_binop("+", make_binop("*", kb, step_k), make_binop("*", make_binop("%", mi, 2), step_k // 2))
        nn = make_binop("+", col_base, make_binop("*", make_binop("+", first, make_binop("//", mi, 2)), 8))
        elem = (make_binop("+", kk, r8), nn) if not s.transpose_b else (kk, make_binop("+", nn, r8))
        index = ctx.offset(b_buf, _element(s.b, *elem, s.transpose_b))
        return LdMatrix(b_frag, as_expr(first * 2), ctx.mem(b_buf), as_expr(index), num, not s.transpose_b, s.span)

    def load_a(kb, k0, am) -> list:
        """The A atom (16 x step_k) of row atom ``am`` for one K step into a_frag[a_per am ...]."""
        if ld_a:
            return [_ldmatrix_a(ctx, s, row_base, kb, am, a_frag, make_binop("*", am, 4))]
        row = make_binop("+", make_binop("+", row_base, make_binop("*", am, 16)), g)
        a_pairs = [(make_binop("+", row, dr), make_binop("+", k0, hk * step_k // 2 + e))
                   for hk in (0, 1) for dr in (0, 8) for e in range(per)]
        return load(a_frag, make_binop("*", am, a_per), s.a, a_pairs, s.transpose_a)

    def step(kb):
        """Statements of one K step of step_k (kb: its index, an int or a loop variable): the A atoms of the warp's
        rows, then its B atoms and one Mma per atom pair. With ldmatrix, B comes two atoms at a time right before
        the Mmas that read them, so a wide warp tile (P @ V: 16 atoms) does not hold all its B registers at once."""
        am = ctx.var("am")
        k0 = make_binop("+", make_binop("*", kb, step_k), make_binop("*", t, per))
        body = [] if ld_b else load_b(kb, k0)
        if hoisted is not None:  # registers (kb * m_atoms + am) * 4 + i
            first = make_binop("*", make_binop("+", make_binop("*", kb, tm // 16), am), 4)
            a_regs = tuple(as_expr(make_binop("+", first, i)) for i in range(4))
        elif a_buf.scope == "shared":
            am_load = ctx.var("am")
            body.append(For(am_load, 0, tm // 16, 1, "unroll", tuple(load_a(kb, k0, am_load))))
            a_regs = tuple(as_expr(make_binop("+", make_binop("*", am, a_per), i)) for i in range(a_per))
        elif a_buf in ctx.packed:  # packed pairs: register ((am * 2 + h) * (K / 8) + kat) holds slots 2r, 2r + 1
            k_atoms = k // 8
            a_regs = tuple(as_expr(make_binop("+", make_binop("*", make_binop("+", make_binop("*", am, 2), h), k_atoms),
                                              make_binop("+", make_binop("*", kb, 2), hk)))
                           for h, hk in ((0, 0), (1, 0), (0, 1), (1, 1)))
        elif s.transpose_a:  # stored K x M, dims swapped: slot ((kat * 2 + pair) * tm / 16 + am) * 2 + h
            a_regs = tuple(as_expr((((kb * 2 + hk) * 2 + e) * (tm // 16) + am) * 2 + h)
                           for h, hk in ((0, 0), (1, 0), (0, 1), (1, 1)) for e in range(2))
        else:
            # A in registers with the A-operand layout: slot ((am * 2 + h) * (K / 8) + kat) * 2 + pair (16-bit);
            # 8-bit: ((am * 2 + h) * (K / 16) + kat) * 4 + byte, four bytes per 32-bit register; tf32: per = 1
            k_atoms = k // (4 * per)
            a_regs = tuple(as_expr(make_binop("+", make_binop("*", make_binop("+", make_binop("*", make_binop(
                "+", make_binop("*", am, 2), h), k_atoms), make_binop("+", make_binop("*", kb, 2), hk)), per), e))
                for h, hk in ((0, 0), (1, 0), (0, 1), (1, 1)) for e in range(per))

        def mmas(first, count) -> For:
            """One Mma per (row atom, column atom first .. first + count - 1)."""
            an2 = ctx.var("an")
            c_regs = tuple(as_expr(c_slot(am, h, an2, pair)) for h, pair in ((0, 0), (0, 1), (1, 0), (1, 1)))
            mma = Mma(c_reg, c_regs, ctx.mem(a_buf) if a_frag is None else a_frag, a_regs, b_frag,
                      tuple(as_expr(make_binop("+", make_binop("*", an2, b_per), i)) for i in range(b_per)), s.span,
                      s.packed or str(a_buf.dtype))  # int4 / uint4 tiles: their bytes, m16n8k64
            return For(am, 0, tm // 16, 1, "unroll", (For(an2, first, count, 1, "unroll", (mma,)),))

        if not ld_b:
            return body + [mmas(0, n_atoms)]
        for first in range(0, n_atoms, 2):
            body += [ldmatrix_b(kb, first), mmas(first, min(2, n_atoms - first))]
        return body

    steps = k // step_k
    if a_buf.scope == "fragment":
        for kb in range(steps):  # register indices of A must be constants: unroll in Python
            out += step(kb)
    else:
        kb = ctx.var("kb")
        ctx.ranges[kb] = (0, steps - 1)
        out.append(For(kb, 0, steps, 1, "unroll" if steps <= 8 else "serial", tuple(step(kb))))
    return out


def packable_a_operands(body, layouts) -> set:
    """16-bit fragments used only as T.gemm A operands and as the destination of whole copies from float32 fragments
    of the same layout (flash attention's P): they can live as packed 32-bit pairs (``PackPairs`` fills them, ``Mma``
    reads them as they are), which saves a convert and a repack per pair."""
    from tileagent.compiler.lower.smem import buffers_used

    candidates = {g.a.buffer for g in walk(body) if isinstance(g, Gemm) and g.a.buffer.scope == "fragment"
                  and str(g.a.buffer.dtype) in MMA_DTYPES}
    candidates -= {g.a.buffer for g in walk(body) if isinstance(g, Gemm) and g.transpose_a}  # pairs are not along K
    for x in leaves(body):
        for b in candidates & buffers_used(x):
            ok = (isinstance(x, Alloc) or (isinstance(x, Gemm) and b is x.a.buffer and b not in (x.b.buffer, x.c.buffer))
                  or (isinstance(x, Copy) and x.dst.buffer is b and x.src.buffer.scope == "fragment"
                      and x.src.buffer.dtype == "float32" and x.src.buffer in layouts.fragments
                      and layouts.fragments[x.src.buffer].same_as(layouts.fragments[b])))
            if not ok:
                candidates = candidates - {b}
    return {b for b in candidates if b in layouts.fragments and layouts.fragments[b].num_slots % 2 == 0}


MAX_HOISTED_REGISTERS = 32  # per thread, for a loop-invariant A operand (64 spilled in MLA and slowed 4-warp FA)


def hoistable_a(s: Gemm, layouts, shared_layouts: dict) -> bool:
    """Whether a gemm whose shared A tile its loop never changes (the caller checks that) may keep A's atoms of every
    K step in registers, loaded once before the loop: ldmatrix can read A, the gemm runs on mma.sync (wgmma reads A
    from shared memory), the K steps are unrolled (at most 8) and the registers stay within MAX_HOISTED_REGISTERS."""
    if s.a.buffer.scope != "shared" or s.a.buffer.dtype.bytes != 2 or s not in layouts.gemm_partition or \
            not _ldmatrix_readable(s.a, shared_layouts[s.a.buffer]):
        return False
    choice = layouts.instructions.get(s)
    if choice is not None and not isinstance(choice.instruction, MmaSyncM16N8K16):
        return False
    m_atoms, k_steps = _hoisted_atoms(s, layouts)
    return k_steps <= 8 and 4 * m_atoms * k_steps <= MAX_HOISTED_REGISTERS


def _hoisted_atoms(s: Gemm, layouts) -> tuple[int, int]:
    """(row atoms of a warp's tile of A, K steps) of gemm ``s``."""
    wm, _ = layouts.gemm_partition[s]
    m, _ = s.c.matrix_shape()
    k = s.a.matrix_shape()[0 if s.transpose_a else 1]
    return m // wm // 16, k // 16


def hoist_a_operand(ctx, s: Gemm) -> list:
    """Statements that load A's atoms of every K step of gemm ``s`` into registers once, before its loop (the plan
    decided it: ``KernelPlan.hoisted``, ``hoistable_a``); ``ctx.hoisted_a[s]`` then names them and ``lower_gemm``
    skips A's loads."""
    if s in ctx.hoisted_a:
        return []
    row_base = _warp_tile(ctx, s)[0]
    m_atoms, k_steps = _hoisted_atoms(s, ctx.layouts)
    frag = ctx.scratch_registers("a_hoisted", 4 * m_atoms * k_steps, "uint32")
    ctx.hoisted_a[s] = frag
    return [Declare(frag, span=s.span)] + [_ldmatrix_a(ctx, s, row_base, kb, am, frag, (kb * m_atoms + am) * 4)
                                           for kb in range(k_steps) for am in range(m_atoms)]


def _warp_tile(ctx, s: Gemm):
    """(first row, first column, rows, columns) of this thread's warp tile of C, and the depth K."""
    wm, wn = ctx.layouts.gemm_partition[s]
    m, n = s.c.matrix_shape()
    k = s.a.matrix_shape()[0 if s.transpose_a else 1]
    tm, tn = m // wm, n // wn
    warp = make_binop("//", THREAD, 32)
    return (make_binop("*", make_binop("//", warp, wn), tm), make_binop("*", make_binop("%", warp, wn), tn), tm, tn,
            k)


def _ldmatrix_a(ctx, s: Gemm, row_base, kb, am, frag, first) -> LdMatrix:
    """ldmatrix.x4 of A's atom (row atom ``am``, K step ``kb``) into frag[first .. first + 3]: matrix mi holds rows
    + 8 (mi % 2) and K + 8 (mi // 2); .trans when A is stored K x M."""
    lane = make_binop("%", THREAD, 32)
    mi, r8 = make_binop("//", lane, 8), make_binop("%", lane, 8)
    step_k = k_step(s.a.buffer)
    mm = make_binop("+", make_binop("+", row_base, make_binop("*", am, 16)), make_binop("*", make_binop("%", mi, 2), 8))
    kk = make_binop("+", make_binop("*", kb, step_k), make_binop("*", make_binop("//", mi, 2), step_k // 2))
    elem = (make_binop("+", mm, r8), kk) if not s.transpose_a else (mm, make_binop("+", kk, r8))
    index = ctx.offset(s.a.buffer, _element(s.a, *elem, s.transpose_a))
    return LdMatrix(frag, as_expr(first), ctx.mem(s.a.buffer), as_expr(index), 4, s.transpose_a, s.span)


def ldmatrix_ok(ctx, r) -> bool:
    """Whether ldmatrix can read gemm operand ``r``: a 16-bit (or 8-bit, or 32-bit) shared tile stored row-major
    along its last dim with rows of whole 16-byte chunks (any swizzle moving whole chunks), the tile's last-dim start a
    multiple of one chunk (8, 16 or 4 elements)."""
    return r.buffer.scope == "shared" and _ldmatrix_readable(r, ctx.shared_layouts[r.buffer])


def ldmatrix_layout_ok(buf, layout) -> bool:
    """Whether ldmatrix can read rows of 16 bytes of shared tile ``buf`` stored with ``layout``: 8-, 16- or 32-bit
    elements, row-major along the last dim, every row stride a whole chunk, a swizzle (if any) moving whole chunks."""
    if buf.dtype.bytes not in (1, 2, 4):
        return False
    chunk = 16 // buf.dtype.bytes  # elements per 16-byte row of an 8x8 matrix of 16-bit units
    strides = layout._strides()
    return not (strides[-1] != 1 or any(x % chunk for x in strides[:-1]) or
                (layout.swizzle and layout.swizzle.base < chunk.bit_length() - 1))


def _ldmatrix_readable(r, layout) -> bool:
    """``ldmatrix_ok`` for shared operand ``r`` stored with ``layout``."""
    buf = r.buffer
    if not ldmatrix_layout_ok(buf, layout):
        return False
    chunk = 16 // buf.dtype.bytes
    dims = [d for d, e in enumerate(r.extents) if e != 1][-2:]
    return len(dims) == 2 and dims[1] == buf.ndim - 1 and known_multiple(r.starts[-1]) % chunk == 0


def _adjacent_pair(ctx, buf, idx) -> bool:
    """Whether shared elements idx[0] and idx[1] are neighbours in memory, the first at an even offset: they differ
    by one in the last dim from an even column, in a row-major tile with even row strides whose swizzle (if any)
    moves whole chunks of at least two elements."""
    layout = ctx.shared_layouts[buf]
    strides = layout._strides()
    if strides[-1] != 1 or any(s % 2 for s in strides[:-1]) or (layout.swizzle and layout.swizzle.base < 1):
        return False
    same_rows = all(difference(b, a) == 0 for a, b in zip(idx[0][:-1], idx[1][:-1]))
    return same_rows and difference(idx[1][-1], idx[0][-1]) == 1 and is_even(idx[0][-1])


def _element(r, i, j, transpose: bool):
    """Index into r.buffer of element (i, j) of op(r): the tile is stored transposed when ``transpose``."""
    a, b = (j, i) if transpose else (i, j)
    idx = list(r.starts)
    dims = [d for d, e in enumerate(r.extents) if e != 1][-2:]
    idx[dims[0]] = make_binop("+", idx[dims[0]], a)
    idx[dims[1]] = make_binop("+", idx[dims[1]], b)
    return tuple(idx)

