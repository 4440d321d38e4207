"""The helper functions a generated CUDA module may call, defined once in its preamble when a kernel uses them.

In: nothing; ``compiler.targets.cuda`` adds a helper's name to its module state where it emits a call.
Out: :data:`HELPERS`, name -> CUDA text (each ``tl_``-prefixed, ``__device__``); :func:`fdiv_sites` and
:func:`fdiv_inline_limit`, which decide where float32 division is a call of ``tl_fdiv``.
Guarantees: every helper computes what the IR's operation means (``tl_floordiv`` floors, ``tl_fdiv`` is IEEE
division, ``a / b`` under the module's NVRTC options); only where a float result may differ does a comment say so
(``tl_exp2f``).
"""

from __future__ import annotations

import os

from tileagent.compiler.ir.expr import BinOp, Expr
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import For
from tileagent.compiler.ir.visit import stmt_exprs

FDIV_ENV = "TILEAGENT_FDIV_INLINE_LIMIT"
FDIV_INLINE_LIMIT = 64


def fdiv_inline_limit() -> int:
    """How many float32 divisions a kernel may execute inline (``fdiv_sites``; ``$TILEAGENT_FDIV_INLINE_LIMIT``,
    default 64). Beyond it, each is a call of ``tl_fdiv``, one ``__noinline__`` function: ptxas expands every IEEE
    ``div.rn.f32`` site into a fast path and a slow-path branch, and MLA decode's 128 divisions in its epilogue took
    0.13 s of its 0.5 s NVRTC compile (0.41 s with one function). Flash attention's 64 stay inline: its blocks are
    short, so the epilogue's calls would show."""
    return int(os.environ.get(FDIV_ENV, FDIV_INLINE_LIMIT))


def fdiv_sites(stmts, weight: int = 1) -> int:
    """The float divisions (float32, or 16-bit and fp8 ones computed in float32) the CUDA source of thread-IR
    ``stmts`` executes inline: each site once, times the trip counts of the static unrolled loops around it."""
    n = 0
    for s in stmts:
        n += weight * sum(1 for e in stmt_exprs(s) for d in _subexprs(e)
                          if isinstance(d, BinOp) and d.op == "/" and d.dtype.is_float and d.dtype.bits <= 32)
        inner = weight
        if isinstance(s, For) and s.kind == "unroll" and static_int(s.extent):
            inner *= static_int(s.extent)
        for name in ("body", "then_body", "else_body"):
            n += fdiv_sites(getattr(s, name, ()) or (), inner)
    return n


def _subexprs(e):
    yield e
    for name in getattr(e, "__slots__", ()):
        c = getattr(e, name)
        for x in (c if isinstance(c, tuple) else (c,)):
            if isinstance(x, Expr):
                yield from _subexprs(x)


HELPERS = {
    "fdiv": """\
// float32 division compiled once (compiler.targets.cuda_helpers.fdiv_inline_limit): ptxas expands every IEEE
// division site into a fast path and a slow-path branch
__device__ __noinline__ float tl_fdiv(float a, float b) { return a / b; }""",
    "floordiv": """\
template <typename T> __device__ __forceinline__ T tl_floordiv(T a, T b) {
  const T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <> __device__ __forceinline__ float tl_floordiv<float>(float a, float b) { return floorf(a / b); }
template <> __device__ __forceinline__ double tl_floordiv<double>(double a, double b) { return floor(a / b); }""",
    "floormod": """\
template <typename T> __device__ __forceinline__ T tl_floormod(T a, T b) {
  const T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <> __device__ __forceinline__ float tl_floormod<float>(float a, float b) { return a - floorf(a / b) * b; }
template <> __device__ __forceinline__ double tl_floormod<double>(double a, double b) {
  return a - floor(a / b) * b;
}""",
    "bitcast": """\
template <typename To, typename From> __device__ __forceinline__ To tl_bitcast(From v) {
  static_assert(sizeof(To) == sizeof(From), "tl_bitcast: the two types differ in width");
  return *reinterpret_cast<const To*>(&v);  // as TVM's CUDA codegen emits reinterpret (no memcpy under -minimal)
}""",
    "minmax": """\
template <typename T> __device__ __forceinline__ T tl_min(T a, T b) { return b < a ? b : a; }
template <typename T> __device__ __forceinline__ T tl_max(T a, T b) { return a < b ? b : a; }
template <typename T> __device__ __forceinline__ T tl_abs(T a) { return a < T(0) ? T(-a) : a; }""",
    "exp2": """\
// 2^x in one MUFU.EX2: exp2f's accuracy (2 ulp) on normal results; results below 2^-126 flush to zero, which saves
// exp2f's subnormal rescaling (a compare and two multiplies around every exp2 of an online softmax).
__device__ __forceinline__ float tl_exp2f(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}""",
    "dependent_launch": """\
// A dependent launch (DeviceKernel.dependent_launch): wait until the stream's previous kernel is done and its writes
// are visible, then let the next kernel launch once every block of this one has started (sm_90+; a no-op below).
__device__ __forceinline__ void tl_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}""",
}
