"""CUDA C++ for the tensor-core and asynchronous-copy statements of the thread IR: ``Mma``, ``LdMatrix``,
``PackPairs``, ``AsyncCopy``, ``AsyncCommit``, ``AsyncWait``.

In: one such statement and the kernel emitter of ``compiler.targets.cuda`` (its ``line``, ``buf``, ``index``,
``register``, ``ct``, ``fail`` and module state). Out: lines of C++ appended to the kernel, and the names of the
preamble helpers they need (``HELPERS``).
Guarantees:

- ``Mma`` becomes one call of ``tl_mma_m16n8k16_{f16,bf16}``: inline PTX ``mma.sync.aligned.m16n8k16.row.col.f32``
  whose A/B operands are 32-bit registers passed by value (uint32 arrays as they are; 16-bit arrays packed in pairs,
  lower index in the low 16 bits) and whose four accumulators are passed by reference ("+f"), so register arrays are
  indexed by constants, never through a pointer. An 8-bit Mma (float8 e4m3/e5m2, int8) becomes
  ``tl_mma_m16n8k32_{e4m3,e5m2,s8}`` (``.f32`` / ``.s32`` accumulators, "+f" / "+r"); 8-bit register arrays are packed
  four at a time (``tl_pack_b8x4``, first element in the low byte). A float32/tfloat32 Mma becomes
  ``tl_mma_m16n8k8_tf32`` (one element a register, its bits passed as ``__float_as_uint``).
- ``LdMatrix`` becomes one ``ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`` writing its ``num`` 32-bit
  results straight into the destination's uint32 registers (an 8-bit or 32-bit source: rows of 16 bytes, never
  ``.trans``).
- ``PackPairs`` becomes an unrolled loop of ``__floats2half2_rn`` / ``__floats2bfloat162_rn`` (one convert-and-pack
  instruction per pair) into the destination's 32-bit registers.
- ``AsyncCopy`` becomes ``cp.async.{ca,cg}.shared.global`` with a source size of 0 (zero fill, nothing read) when its
  ``valid`` condition is false; the source pointer is then the tensor's base, so no out-of-range address is formed.
  16-byte copies use ``.cg`` (bypass L1), 4- and 8-byte ones ``.ca``.
- ``AsyncCommit`` / ``AsyncWait`` become ``cp.async.commit_group`` / ``cp.async.wait_group N``.
"""

from __future__ import annotations

from tileagent.compiler.intrinsics import TF32_DTYPES
from tileagent.compiler.ir.expr import make_binop
from tileagent.compiler.targets.swizzle_address import split_swizzled_index
from tileagent.compiler.tir import LANE, THREAD, WARP, AsyncCommit, AsyncCopy, AsyncWait, LdMatrix, Mma, PackPairs

_MMA_HELPER = """\
// mma.sync m16n8k16, fp32 accumulate, in place: {{d0..d3}} = A (16x16, {dt}) @ B (16x8, {dt}) + {{d0..d3}}.
// Per-lane fragment layout: compiler/tir.py (Mma). Each .b32 operand packs two elements, lower index in the low half.
__device__ __forceinline__ unsigned tl_pack_{sfx}x2({t} lo, {t} hi) {{
  const {t2} v = {halves}(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}}
__device__ __forceinline__ void tl_mma_m16n8k16_{sfx}(float& d0, float& d1, float& d2, float& d3,
    unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {{
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.{sfx}.{sfx}.f32 "
      "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}}"""
_CVT_PACK_HELPER = """\
// Two floats rounded to {dt} and packed into one 32-bit register, the first in the low half.
__device__ __forceinline__ unsigned tl_cvt_pack_{sfx}x2(float lo, float hi) {{
  const {t2} v = {floats}(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}}"""
_TYPES = {"float16": ("f16", "half", "__half2", "__halves2half2"),
          "bfloat16": ("bf16", "__nv_bfloat16", "__nv_bfloat162", "__halves2bfloat162")}
_FLOATS2 = {"float16": "__floats2half2_rn", "bfloat16": "__floats2bfloat162_rn"}
_MMA8_HELPER = """\
// mma.sync m16n8k32, {acc} accumulate, in place: {{d0..d3}} = A (16x32, {dt}) @ B (32x8, {dt}) + {{d0..d3}}.
// Per lane: the m16n8k16 fragments over byte pairs (compiler/tir.py, Mma); each .b32 operand packs four elements.
__device__ __forceinline__ void tl_mma_m16n8k32_{sfx}({ct}& d0, {ct}& d1, {ct}& d2, {ct}& d3,
    unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {{
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.{acc}.{sfx}.{sfx}.{acc} "
      "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"
      : "+{con}"(d0), "+{con}"(d1), "+{con}"(d2), "+{con}"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}}"""
_MMA4_HELPER = """\
// mma.sync m16n8k64, s32 accumulate, in place: {{d0..d3}} = A (16x64, {dt}) @ B (64x8, {dt}) + {{d0..d3}}; each .b32
// operand packs eight elements (m16n8k32's fragments, a byte two elements). sm_90 has no 4-bit tensor cores (ptxas
// emulates the .{sfx} mma: 46 TOPS on an H100 against int8's 862): there each operand register becomes two of four
// bytes, its even elements and its odd ones ({ext_doc}), and the product two m16n8k32 .{s8} mmas: the same
// sum over K in another order, A and B being split alike; exact either way.
{ext_fn}__device__ __forceinline__ void tl_mma_m16n8k32_{s8}_in_place(int& d0, int& d1, int& d2, int& d3,
    unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {{
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.{s8}.{s8}.s32 "
      "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"
      : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}}
__device__ __forceinline__ void tl_mma_m16n8k64_{sfx}(int& d0, int& d1, int& d2, int& d3,
    unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {{
#if __CUDA_ARCH__ >= 900
  const unsigned m = 0x0F0F0F0Fu;
  tl_mma_m16n8k32_{s8}_in_place(d0, d1, d2, d3, {ext}(a0 & m), {ext}(a1 & m), {ext}(a2 & m), {ext}(a3 & m),
                               {ext}(b0 & m), {ext}(b1 & m));
  tl_mma_m16n8k32_{s8}_in_place(d0, d1, d2, d3, {ext}((a0 >> 4) & m), {ext}((a1 >> 4) & m), {ext}((a2 >> 4) & m),
                               {ext}((a3 >> 4) & m), {ext}((b0 >> 4) & m), {ext}((b1 >> 4) & m));
#else
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.s32.{sfx}.{sfx}.s32 "
      "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"
      : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}}"""
_S4_BYTES = """\
// Four 4-bit values, one in the low nibble of each byte, sign-extended to four bytes.
__device__ __forceinline__ unsigned tl_s4_bytes(unsigned v) { return v | ((v & 0x08080808u) * 0x1Eu); }
"""
_PACK8_HELPER = """\
// Four 8-bit values in one 32-bit register, the first in the low byte.
template <typename T>
__device__ __forceinline__ unsigned tl_pack_b8x4(T a, T b, T c, T d) {
  return (unsigned)*reinterpret_cast<const unsigned char*>(&a) | (unsigned)*reinterpret_cast<const unsigned char*>(&b) << 8 |
         (unsigned)*reinterpret_cast<const unsigned char*>(&c) << 16 | (unsigned)*reinterpret_cast<const unsigned char*>(&d) << 24;
}"""
def _k8(dt: str) -> int:
    """K of the mma.sync of 8-bit (or packed 4-bit) ``dt``: 32, or 64 for int4 / uint4."""
    return 64 if dt in ("int4", "uint4") else 32


_TYPES8 = {"float8_e4m3fn": ("e4m3", "float32"), "float8_e5m2": ("e5m2", "float32"), "int8": ("s8", "int32"),
           "int4": ("s4", "int32"), "uint4": ("u4", "int32")}  # 4-bit: packed two a byte, m16n8k64
HELPERS = {f"mma_{sfx}": _MMA_HELPER.format(dt=dt, sfx=sfx, t=t, t2=t2, halves=halves)
           for dt, (sfx, t, t2, halves) in _TYPES.items()}
HELPERS.update({f"mma_{sfx}": _MMA8_HELPER.format(dt=dt, sfx=sfx, acc="f32" if acc == "float32" else "s32",
                                                  ct="float" if acc == "float32" else "int",
                                                  con="f" if acc == "float32" else "r")
                for dt, (sfx, acc) in _TYPES8.items() if _k8(dt) == 32})
HELPERS.update({f"mma_{sfx}": _MMA4_HELPER.format(dt=dt, sfx=sfx, s8=sfx.replace("4", "8"),
                                                  ext="tl_s4_bytes" if sfx == "s4" else "",
                                                  ext_doc="sign-extended" if sfx == "s4" else "zero-extended",
                                                  ext_fn=_S4_BYTES if sfx == "s4" else "")
                for dt, (sfx, _) in _TYPES8.items() if _k8(dt) == 64})
HELPERS["pack_b8x4"] = _PACK8_HELPER
HELPERS["mma_tf32"] = """\
// mma.sync m16n8k8 on TensorFloat-32, fp32 accumulate, in place: {d0..d3} = A (16x8) @ B (8x8) + {d0..d3}.
// One 32-bit element per operand register; the tensor core reads its upper 19 bits (float32 truncated to tf32).
__device__ __forceinline__ void tl_mma_m16n8k8_tf32(float& d0, float& d1, float& d2, float& d3,
    unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}"""
HELPERS["mma_f16acc"] = """\
// mma.sync m16n8k16 with float16 accumulators, in place: {d0..d3} = A (16x16, f16) @ B (16x8, f16) + {d0..d3},
// the accumulator pairs (d0, d1), (d2, d3) packed into two .f16x2 registers around the instruction.
__device__ __forceinline__ void tl_mma_m16n8k16_f16acc(half& d0, half& d1, half& d2, half& d3,
    unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  unsigned c0 = (unsigned)__half_as_ushort(d0) | (unsigned)__half_as_ushort(d1) << 16;
  unsigned c1 = (unsigned)__half_as_ushort(d2) | (unsigned)__half_as_ushort(d3) << 16;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
      "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};"
      : "+r"(c0), "+r"(c1)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  d0 = __ushort_as_half((unsigned short)(c0 & 0xFFFFu));
  d1 = __ushort_as_half((unsigned short)(c0 >> 16));
  d2 = __ushort_as_half((unsigned short)(c1 & 0xFFFFu));
  d3 = __ushort_as_half((unsigned short)(c1 >> 16));
}"""
HELPERS.update({f"cvt_pack_{sfx}": _CVT_PACK_HELPER.format(dt=dt, sfx=sfx, t2=t2, floats=_FLOATS2[dt])
                for dt, (sfx, _, t2, _) in _TYPES.items()})


def emit_mma(em, s: Mma) -> None:
    what = f"Mma into {s.c_buf.name}"
    if em.k.num_threads % 32:
        em.fail(f"{what}: mma.sync is warp-wide, but the block has {em.k.num_threads} threads (not whole warps)")
    ab = s.element_dtype
    if ab in _TYPES8:
        return _emit_mma8(em, s, what, ab)
    if ab in TF32_DTYPES:
        return _emit_mma_tf32(em, s, what)
    f16acc = ab == "float16" and s.c_buf.dtype == "float16"
    if ab not in _TYPES or any(b.dtype not in (ab, "uint32") for b in (s.a_buf, s.b_buf)) or \
            (s.c_buf.dtype != "float32" and not f16acc):
        em.fail(f"{what}: want float16 or bfloat16 A and B of one dtype (or uint32 packed pairs) and a float32 C, "
                f"got A {s.a_buf.dtype}, B {s.b_buf.dtype}, C {s.c_buf.dtype}")
    sfx = _TYPES[ab][0]
    regs = []
    for buf, idx, n in ((s.c_buf, s.c, 4), (s.a_buf, s.a, 8), (s.b_buf, s.b, 4)):
        packed = buf.dtype == "uint32"
        if buf.scope != "local" or len(idx) != (n // 2 if packed else n):
            em.fail(f"{what}: operand {buf.name} must be a local array with {n // 2 if packed else n} register "
                    f"indices, got a {buf.scope} buffer with {len(idx)}")
        names = [em.register(buf, i) for i in idx]
        if buf is not s.c_buf and not packed:
            names = [f"tl_pack_{sfx}x2({lo}, {hi})" for lo, hi in zip(names[::2], names[1::2])]
        regs.append(names)
    if len(set(regs[0])) != 4:
        em.fail(f"{what}: the four accumulator registers must be distinct, got {', '.join(regs[0])}")
    em.ct(ab)
    em.state.helpers.add(f"mma_{sfx}")
    if f16acc:
        em.state.helpers.add("mma_f16acc")
    call = "tl_mma_m16n8k16_f16acc(" if f16acc else f"tl_mma_m16n8k16_{sfx}("
    pad = " " * len(call)  # continuation lines line up with the first argument
    c, a, b = (", ".join(r) for r in regs)
    em.line(f"{call}{c},")
    em.lines.append("  " * em.depth + pad + f"{a},")
    em.lines.append("  " * em.depth + pad + f"{b});")


def _emit_mma8(em, s: Mma, what: str, ab: str) -> None:
    """mma.sync m16n8k32 on 8-bit A and B: 4 accumulators, A as 4 packed registers (or 16 byte registers, packed
    here four at a time), B as 2 packed registers."""
    sfx, acc = _TYPES8[ab]
    if s.c_buf.dtype != acc or any(b.dtype not in (ab, "uint32") or (_k8(ab) == 64 and b.dtype != "uint32")
                                   for b in (s.a_buf, s.b_buf)):
        em.fail(f"{what}: want {ab} A and B (or uint32 packed registers) and a {acc} C, got A {s.a_buf.dtype}, "
                f"B {s.b_buf.dtype}, C {s.c_buf.dtype}")
    regs = []
    for buf, idx, n in ((s.c_buf, s.c, 4), (s.a_buf, s.a, 4), (s.b_buf, s.b, 2)):
        packed = buf is s.c_buf or buf.dtype == "uint32"
        if buf.scope != "local" or len(idx) != (n if packed else 4 * n):
            em.fail(f"{what}: operand {buf.name} must be a local array with {n if packed else 4 * n} register "
                    f"indices, got a {buf.scope} buffer with {len(idx)}")
        names = [em.register(buf, i) for i in idx]
        if not packed:
            em.state.helpers.add("pack_b8x4")
            names = [f"tl_pack_b8x4({', '.join(names[i:i + 4])})" for i in range(0, len(names), 4)]
        regs.append(names)
    if len(set(regs[0])) != 4:
        em.fail(f"{what}: the four accumulator registers must be distinct, got {', '.join(regs[0])}")
    if _k8(ab) == 32:
        em.ct(ab)  # the fp8 header
    em.state.helpers.add(f"mma_{sfx}")
    call = f"tl_mma_m16n8k{_k8(ab)}_{sfx}("
    pad = " " * len(call)
    c, a, b = (", ".join(r) for r in regs)
    em.line(f"{call}{c},")
    em.lines.append("  " * em.depth + pad + f"{a},")
    em.lines.append("  " * em.depth + pad + f"{b});")


def _emit_mma_tf32(em, s: Mma, what: str) -> None:
    """mma.sync m16n8k8 .tf32: 4 accumulators, A as 4 registers, B as 2, each one float32/tfloat32 element (its bits
    passed as they are) or a uint32 register ldmatrix filled."""
    if s.c_buf.dtype != "float32" or any(b.dtype not in (*TF32_DTYPES, "uint32") for b in (s.a_buf, s.b_buf)):
        em.fail(f"{what}: want float32/tfloat32 A and B (or uint32 registers) and a float32 C, got A {s.a_buf.dtype}, "
                f"B {s.b_buf.dtype}, C {s.c_buf.dtype}")
    regs = []
    for buf, idx, n in ((s.c_buf, s.c, 4), (s.a_buf, s.a, 4), (s.b_buf, s.b, 2)):
        if buf.scope != "local" or len(idx) != n:
            em.fail(f"{what}: operand {buf.name} must be a local array with {n} register indices, got a {buf.scope} "
                    f"buffer with {len(idx)}")
        names = [em.register(buf, i) for i in idx]
        regs.append(names if buf is s.c_buf or buf.dtype == "uint32" else [f"__float_as_uint({r})" for r in names])
    if len(set(regs[0])) != 4:
        em.fail(f"{what}: the four accumulator registers must be distinct, got {', '.join(regs[0])}")
    em.state.helpers.add("mma_tf32")
    call = "tl_mma_m16n8k8_tf32("
    pad = " " * len(call)
    c, a, b = (", ".join(r) for r in regs)
    em.line(f"{call}{c},")
    em.lines.append("  " * em.depth + pad + f"{a},")
    em.lines.append("  " * em.depth + pad + f"{b});")


def emit_ldmatrix(em, s: LdMatrix) -> None:
    what = f"LdMatrix into {s.dst.name}"
    dt = s.src.dtype
    if (dt not in _TYPES and (dt not in (*_TYPES8, "uint8", *TF32_DTYPES) or s.trans)) or s.dst.dtype != "uint32" or \
            s.src.scope != "shared" or s.dst.scope != "local":
        em.fail(f"{what}: want a float16/bfloat16 (or, without .trans, 8-bit or 32-bit) shared source and a local "
                f"uint32 destination, got {s.src.scope} {dt}{' .trans' if s.trans else ''} -> {s.dst.scope} "
                f"{s.dst.dtype}")
    if s.num not in (1, 2, 4):
        em.fail(f"{what}: num must be 1, 2 or 4, got {s.num}")
    outs = ", ".join(f'"=r"({em.register(s.dst, _plus(s.dst_first, i))})' for i in range(s.num))
    regs = ", ".join(f"%{i}" for i in range(s.num))
    em.line(f'asm volatile("ldmatrix.sync.aligned.m8n8.x{s.num}{".trans" if s.trans else ""}.shared.b16 '
            f'{{{regs}}}, [%{s.num}];" : {outs} : "r"({_shared_address(em, s.src, s.src_index)}));')


def _shared_address(em, buf, index) -> str:
    """The 32-bit shared address of buf[index]; for a swizzled tile split as compiler.targets.swizzle_address says
    (a loop-invariant base, one add per iteration, an immediate XOR and offset per instruction)."""
    name, n, eb = em.buf(buf), em.k.num_threads, buf.dtype.bytes  # em.buf: a shared tile with an arena offset
    ranges = {THREAD: (0, n - 1), LANE: (0, 31), WARP: (0, max(0, (n - 1) // 32)), **em.unrolled}
    split = split_swizzled_index(index, ranges, set(em.unrolled), eb, em.k.shared_offsets[buf])
    if split is None:
        return f"(unsigned)__cvta_generic_to_shared(&{name}[{em.index(buf, index)}])"
    out = f"(unsigned)__cvta_generic_to_shared(&{name}[{em.index(buf, split.thread)}])"
    for op, part in (("+", split.runtime), ("^", split.xor_const), ("+", split.const)):
        if not (isinstance(part, int) and part == 0):
            out = f"({out} {op} {eb}u * (unsigned)({em.index(buf, part)}))"
    return out


def emit_pack_pairs(em, s: PackPairs) -> None:
    if s.dtype not in _TYPES or s.dst.dtype != "uint32" or s.src.dtype != "float32" or \
            s.dst.scope != "local" or s.src.scope != "local":
        em.fail(f"PackPairs {s.src.name} -> {s.dst.name}: want local float32 -> local uint32 as float16/bfloat16, got "
                f"{s.src.dtype} -> {s.dst.dtype} as {s.dtype}")
    sfx = _TYPES[s.dtype][0]
    em.ct(s.dtype)
    em.state.helpers.add(f"cvt_pack_{sfx}")
    if {s.dst, s.src} & em.scalars:  # an array written as scalars (compiler.targets.cuda_registers): each pair
        for i in range(s.count):
            em.line(f"{em.register(s.dst, i)} = tl_cvt_pack_{sfx}x2({em.register(s.src, 2 * i)}, "
                    f"{em.register(s.src, 2 * i + 1)});")
        return
    dst, src = em.buf(s.dst), em.buf(s.src)
    em.line("#pragma unroll")
    em.line(f"for (int tl_i = 0; tl_i < {s.count}; ++tl_i) {{")
    em.line(f"  {dst}[tl_i] = tl_cvt_pack_{sfx}x2({src}[2 * tl_i], {src}[2 * tl_i + 1]);")
    em.line("}")


def emit_async_copy(em, s: AsyncCopy) -> None:
    nbytes = s.width * s.src.dtype.bytes
    if s.src.scope != "global" or s.dst.scope != "shared" or s.src.dtype != s.dst.dtype or nbytes not in (4, 8, 16):
        em.fail(f"AsyncCopy {s.src.name} -> {s.dst.name}: want global -> shared of one dtype and 4, 8 or 16 bytes, "
                f"got {s.src.scope} {s.src.dtype} -> {s.dst.scope} {s.dst.dtype}, {nbytes} bytes")
    src, dst = em.buf(s.src), em.buf(s.dst)
    si, di = em.index(s.src, s.src_index), em.index(s.dst, s.dst_index)
    kind = "cg" if nbytes == 16 else "ca"
    em.line("{")
    em.depth += 1
    em.line(f"const unsigned tl_d = (unsigned)__cvta_generic_to_shared(&{dst}[{di}]);")
    if s.valid is None:
        em.line(f'asm volatile("cp.async.{kind}.shared.global [%0], [%1], {nbytes};" :: "r"(tl_d), '
                f'"l"(&{src}[{si}]) : "memory");')
    else:
        em.line(f"const bool tl_ok = {em.ex(s.valid)};")
        em.line(f"const void* tl_s = tl_ok ? (const void*)&{src}[{si}] : (const void*){src};")
        em.line(f'asm volatile("cp.async.{kind}.shared.global [%0], [%1], {nbytes}, %2;" :: "r"(tl_d), "l"(tl_s), '
                f'"r"(tl_ok ? {nbytes} : 0) : "memory");')
    em.depth -= 1
    em.line("}")


def emit_async_commit(em, s: AsyncCommit) -> None:
    em.line('asm volatile("cp.async.commit_group;" ::: "memory");')


def emit_async_wait(em, s: AsyncWait) -> None:
    em.line(f'asm volatile("cp.async.wait_group {int(s.pending)};" ::: "memory");')


def _plus(e, k: int):
    return make_binop("+", e, k) if k else e


HANDLERS = {Mma: emit_mma, LdMatrix: emit_ldmatrix, PackPairs: emit_pack_pairs, AsyncCopy: emit_async_copy,
            AsyncCommit: emit_async_commit, AsyncWait: emit_async_wait}
