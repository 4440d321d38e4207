"""CUDA C++ for ``T.atomic_max`` / ``T.atomic_min`` (thread-IR ``AtomicAdd`` with ``op`` "max" / "min") and for the
vector ``VecAtomicAdd``.

In: the statement and the kernel emitter of ``compiler.targets.cuda`` (its ``ref``/``value_as``/``line`` helpers and
module state). Out: one line per statement, plus the helper functions it needs (``HELPERS``, emitted once per module).
Guarantees: 32- and 64-bit integers use CUDA's ``atomicMax``/``atomicMin``; float16, bfloat16, float32 and float64
(which CUDA has no such atomics for) use a compare-and-swap loop on the element's bits that stores the value while it
compares greater / less than the element, as TileLang's ``AtomicMax``/``AtomicMin`` do: a NaN value never stores
(``compiler.atomic_ops`` is the same rule on the CPU). 16-bit CAS needs sm_70 or newer. Other dtypes: CodegenError
(the lowering reports them first, as E602 at the statement's line). ``VecAtomicAdd`` is one ``atomicAdd`` on
``float2``/``float4`` (sm_90+), ``__half2`` or ``__nv_bfloat162``, with a per-element fallback for older
architectures in the same source (``#if __CUDA_ARCH__``). With ``prev`` (``return_prev=True``) the statement stores
the value the atomic returns (CUDA's ``atomicMax``/``atomicMin``, ``tl_atomic_fetch_max``/``_min``: the element before
the update) into that register.
"""

from __future__ import annotations


def _helper(ctype: str, bits: str, to_bits: str, from_bits: str, to_float: str, fetch: bool = False) -> str:
    """tl_atomic_max / tl_atomic_min for ``ctype`` (``fetch``: tl_atomic_fetch_max / _min, returning the element's
    value before the update, for ``return_prev=True``)."""
    out = []
    result, prefix = (ctype, "fetch_") if fetch else ("void", "")
    ret = f"\n  return {from_bits}(old);" if fetch else ""
    for name, cmp in (("max", ">"), ("min", "<")):
        out.append(f"""\
__device__ __forceinline__ {result} tl_atomic_{prefix}{name}({ctype}* addr, {ctype} val) {{
  {bits}* p = reinterpret_cast<{bits}*>(addr);
  const {bits} want = {to_bits}(val);
  {bits} old = *p;
  while ({to_float}(val) {cmp} {to_float}({from_bits}(old))) {{
    const {bits} assumed = old;
    old = atomicCAS(p, assumed, want);
    if (old == assumed) break;
  }}{ret}
}}""")
    return "\n".join(out)


_FLOATS = {"float32": ("float", "unsigned int", "__float_as_uint", "__uint_as_float", ""),
           "float64": ("double", "unsigned long long", "__double_as_longlong", "__longlong_as_double", ""),
           "float16": ("half", "unsigned short", "__half_as_ushort", "__ushort_as_half", "__half2float"),
           "bfloat16": ("__nv_bfloat16", "unsigned short", "__bfloat16_as_ushort", "__ushort_as_bfloat16",
                        "__bfloat162float")}
HELPERS = {f"atomic_{kind}_{dt}": _helper(*spec, fetch=kind == "fetch_extreme")
           for kind in ("extreme", "fetch_extreme") for dt, spec in _FLOATS.items()}
INTEGER_DTYPES = ("int32", "uint32", "int64", "uint64")


def atomic_extreme(emitter, s) -> None:
    """Emit ``s`` (an AtomicAdd whose op is "max" or "min") through ``emitter`` (a cuda ``_KernelEmitter``)."""
    from tileagent.compiler.targets.cuda import _strip

    dt = s.buffer.dtype
    ref = emitter.ref(s.buffer, s.indices)
    val = _strip(emitter.value_as(s.value, dt))
    into = f"{emitter.ref(s.prev.buffer, s.prev.indices)} = " if s.prev is not None else ""  # return_prev=True
    fetch = "fetch_" if s.prev is not None else ""
    if dt in INTEGER_DTYPES:
        emitter.line(f"{into}{'atomicMax' if s.op == 'max' else 'atomicMin'}(&{ref}, {val});")
    elif f"atomic_extreme_{dt}" in HELPERS:
        emitter.ct(dt)
        emitter.state.uses_header_api(dt)  # __half_as_ushort / __bfloat16_as_ushort: the header's, not our prelude's
        emitter.state.helpers.add(f"atomic_{fetch}extreme_{dt}")
        emitter.line(f"{into}tl_atomic_{fetch}{s.op}(&{ref}, {val});")
    else:
        emitter.fail(f"atomic {s.op} on {dt} buffer {s.buffer.name} is not supported by CUDA (32- and 64-bit "
                     f"integers and float16/bfloat16/float32/float64 are)")


# (dtype, width) -> (vector type, constructor, first __CUDA_ARCH__ with the vector atomicAdd)
_VECTOR_ATOMICS = {("float32", 2): ("float2", "make_float2", 900), ("float32", 4): ("float4", "make_float4", 900),
                   ("float16", 2): ("__half2", "__halves2half2", 600),
                   ("bfloat16", 2): ("__nv_bfloat162", "__halves2bfloat162", 800)}


def vec_atomic_add(emitter, s) -> None:
    """Emit ``s`` (a VecAtomicAdd) through ``emitter`` (a cuda ``_KernelEmitter``)."""
    from tileagent.compiler.targets.cuda import _strip

    dt, w = s.dst.dtype, s.width
    if s.dst.scope != "global" or (dt, w) not in _VECTOR_ATOMICS:
        emitter.fail(f"vector atomic add of {w} x {dt} into {s.dst.scope} buffer {s.dst.name} is not supported")
    dst, src = emitter.buf(s.dst), emitter.buf(s.src)
    di, si = emitter.index(s.dst, s.dst_index), emitter.index(s.src, s.src_index)
    vals = [_strip(emitter.convert(f"{src}[{si} + {v}]", s.src.dtype, dt)) for v in range(w)]
    vector, make, arch = _VECTOR_ATOMICS[(dt, w)]
    emitter.ct(dt)
    emitter.state.uses_header_api(dt)
    emitter.line(f"#if __CUDA_ARCH__ >= {arch}")
    emitter.line(f"atomicAdd(reinterpret_cast<{vector}*>(&{dst}[{di}]), {make}({', '.join(vals)}));")
    emitter.line("#else")
    for v in range(w):
        emitter.line(f"atomicAdd(&{dst}[{di} + {v}], {vals[v]});")
    emitter.line("#endif")
