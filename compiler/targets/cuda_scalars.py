"""CUDA C++ for register arrays written as named scalars (``compiler.targets.cuda_registers`` chooses them): their
declaration, the name of an element, the loops that reach them unrolled in the source, and vector copies from or to
them.

In: a statement and the kernel emitter of ``compiler.targets.cuda`` (``em.scalars`` the chosen arrays, ``em.consts``
the values of the variables of loops unrolled here and of Lets of them). Out: lines of C++.
Guarantees: every element is declared zero-initialized (``float acc_0 = 0.0f, ...``: NVVM compiles asm operands of
undefined values much slower, and the kernel's own first write follows); an element whose index is not static, or
lies outside the array, is a CodegenError (``scalar_arrays`` admits neither); a loop unrolled here binds its
variable to one number per copy (also as a one-value range for the shared-address splitter); a VecCopy keeps one
vector access on its other side where ``vec_copy`` would use one.
"""

from __future__ import annotations

from tileagent.compiler.ir.expr import Const
from tileagent.compiler.ir.stmt import Buffer, For, Let
from tileagent.compiler.targets.cuda_registers import static_value
from tileagent.compiler.tir import Declare, VecCopy


def unrolled_for(em, s: For, values: range) -> None:
    """The body once per value of the loop variable, which is that number in each copy."""
    em.nonneg_vars.add(s.var)  # static_loop: start >= 0
    for v in values:
        em.consts[s.var], em.unrolled[s.var] = v, (v, v)
        em.scopes.append({s.var: str(v)})
        em.body(s.body)
        em.scopes.pop()
    em.consts.pop(s.var, None)
    em.unrolled.pop(s.var, None)


def bind_let(em, s: Let) -> None:
    """Record the value of an integer Let that constants and variables of loops unrolled here fix."""
    value = static_value(s.value, em.consts) if s.var.dtype.is_int else None
    if value is not None:
        em.consts[s.var] = value


def declare_scalars(em, s: Declare) -> None:
    """One named, zero-initialized variable per element of the array ``s`` declares."""
    from tileagent.compiler.targets.cuda import _strip

    b, n = s.buffer, s.buffer.shape[0]
    base = em.fresh(b.name)
    while any(f"{base}_{i}" in em.taken for i in range(n)):
        base = em.fresh(f"{base}_r")
    em.taken.update(f"{base}_{i}" for i in range(n))
    em.buffers[b] = base
    init = _strip(em.value_as(s.init if s.init is not None else Const(0, b.dtype), b.dtype))
    for at in range(0, n, 8):
        em.line(f"{em.ct(b.dtype)} {', '.join(f'{base}_{i} = {init}' for i in range(at, min(n, at + 8)))};")


def element(em, b: Buffer, index) -> str:
    """The name of element ``index`` of an array written as scalars."""
    v = static_index(em, b, index)
    if not 0 <= v < b.shape[0]:
        em.fail(f"element {v} of register array {b.name} is outside its {b.shape[0]} registers")
    em.used_buffers.add(b)
    return f"{em.buffers[b]}_{v}"


def static_index(em, b: Buffer, index) -> int:
    v = static_value(index, em.consts)
    if v is None:  # cuda_registers.scalar_arrays admits only static accesses
        em.fail(f"an index of register array {b.name}, written as scalars, is not static here: {index!r}")
    return v


def vec_copy_scalars(em, s: VecCopy) -> None:
    """A VecCopy from or to an array written as scalars: element by element on that side, one vector access on
    the other where ``vec_copy`` would use one."""
    from tileagent.compiler.targets.cuda import _VECTOR_TYPES, _strip, vector_bytes

    w, sd, dd = s.width, s.src.dtype, s.dst.dtype
    st, dt_ = em.ct(sd), em.ct(dd)
    em.line(f"{{  // copy {w} x {st} -> {dt_}")
    em.depth += 1
    if s.src in em.scalars:
        first = static_index(em, s.src, s.src_index)
        elems = [element(em, s.src, first + k) for k in range(w)]
    else:
        src = em.buf(s.src)
        em.line(f"const {em.index_ctype(s.src)} tl_s = {em.index(s.src, s.src_index)};")
        sv = vector_bytes(sd, w) if s.src.scope != "local" else 0
        elems = [f"{src}[tl_s + {k}]" for k in range(w)]
        if sv:
            em.line(f"__align__(16) {st} tl_v[{w}];")
            em.line(f"*reinterpret_cast<{_VECTOR_TYPES[sv]}*>(tl_v) = "
                f"{em.vector_read(s, _VECTOR_TYPES[sv], f'&{src}[tl_s]')};")
            elems = [f"tl_v[{k}]" for k in range(w)]
    values = [_strip(em.convert(e, sd, dd)) for e in elems]
    if s.dst in em.scalars:
        first = static_index(em, s.dst, s.dst_index)
        for k in range(w):
            em.line(f"{element(em, s.dst, first + k)} = {values[k]};")
    else:
        dst = em.buf(s.dst)
        em.line(f"const {em.index_ctype(s.dst)} tl_d = {em.index(s.dst, s.dst_index)};")
        dv = vector_bytes(dd, w) if s.dst.scope != "local" else 0
        if dv:
            em.line(f"__align__(16) {dt_} tl_o[{w}];")
        for k in range(w):
            em.line(f"{f'tl_o[{k}]' if dv else f'{dst}[tl_d + {k}]'} = {values[k]};")
        if dv:
            v = _VECTOR_TYPES[dv]
            em.line(f"*reinterpret_cast<{v}*>(&{dst}[tl_d]) = *reinterpret_cast<const {v}*>(tl_o);")
    em.depth -= 1
    em.line("}")
