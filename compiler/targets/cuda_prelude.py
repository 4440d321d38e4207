"""The low-precision float headers of a generated CUDA module: CUDA's own, or a few lines of ours.

In: the headers the kernels' types need (``cuda_fp16.h``, ``cuda_bf16.h``, ``cuda_fp8.h``), the dtypes whose header
API the code generator knowingly used beyond the storage type and its two float32 conversions (atomics, shuffles,
integer conversions, vector types), and the text of the helpers and kernels.
Out: the lines that open the translation unit (:func:`preamble`): ``#include`` lines first, then our definitions.
Guarantees:

- A float16 or bfloat16 module whose use of the type is the 2-byte storage type, ``__half2float`` /
  ``__float2half_rn`` or ``__bfloat162float`` / ``__float2bfloat16_rn`` gets :data:`FP16_PRELUDE` /
  :data:`BF16_PRELUDE` instead of ``cuda_fp16.h`` / ``cuda_bf16.h`` (about 210 KB of C++ each, which NVRTC would
  parse on every compile: 20 to 30 ms of CPU for ``cuda_bf16.h``, which brings ``cuda_fp16.h`` too).
- The definitions are the headers' device paths for the archs this compiler emits for (sm_80 and newer): the same
  inline PTX (``cvt.f32.f16``, ``cvt.rn.f16.f32``, ``cvt.rn.bf16.f32``; ``cvt.f32.bf16`` from sm_90,
  ``mov.b32 {0, h}`` before), so the cubins are the headers' byte for byte (``tests/test_codegen_prelude.py`` and
  ``bench/codegen_golden.py --cubins`` check it) and the rounding is the hardware's round-to-nearest-even.
- Anything else of a header keeps the header: a dtype in ``header_api``, or any identifier of the type's family in the
  text that the prelude does not define (``__half2``, ``__floats2bfloat162_rn``, ``__hadd``, ...; the match is
  deliberately broad, so a false hit costs compile time, never a compile error). A header that includes another
  (``cuda_bf16.h`` includes ``cuda_fp16.h``; ``cuda_fp8.h`` both) brings that type too, so its prelude is left out.
"""

from __future__ import annotations

import re

FP16_PRELUDE = """\
struct __align__(2) __half { unsigned short __x; };
typedef __half half;
static __device__ __forceinline__ float __half2float(const __half a) {
  float val;
  asm("{  cvt.f32.f16 %0, %1;}\\n" : "=f"(val) : "h"(a.__x));
  return val;
}
static __device__ __forceinline__ __half __float2half_rn(const float a) {
  __half val;
  asm("{  cvt.rn.f16.f32 %0, %1;}\\n" : "=h"(val.__x) : "f"(a));
  return val;
}"""

BF16_PRELUDE = """\
struct __align__(2) __nv_bfloat16 { unsigned short __x; };
static __device__ __forceinline__ float __bfloat162float(const __nv_bfloat16 a) {
  float val;
#if __CUDA_ARCH__ >= 900
  asm("{ cvt.f32.bf16 %0, %1;}\\n" : "=f"(val) : "h"(a.__x));
#else
  asm("{ mov.b32 %0, {0,%1};}\\n" : "=f"(val) : "h"(a.__x));
#endif
  return val;
}
static __device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(const float a) {
  __nv_bfloat16 val;
  asm("{  cvt.rn.bf16.f32 %0, %1;}\\n" : "=h"(val.__x) : "f"(a));
  return val;
}"""

# header -> (dtype, our definitions, identifiers of the type's family, the ones the definitions provide). Overloads
# that both headers declare (``__hadd``, ``h2exp``, ...) are in both families; ``__half...`` is float16's alone.
_OWN = {
    "cuda_fp16.h": ("float16", FP16_PRELUDE, re.compile(r"\b(?:\w*half\w*|__h\w+|h2\w+)\b"),
                    {"half", "__half", "__half2float", "__float2half_rn"}),
    "cuda_bf16.h": ("bfloat16", BF16_PRELUDE, re.compile(r"\b(?:\w*bfloat\w*|\w*bf16\w*|__h(?!alf)\w+|h2\w+)\b"),
                    {"__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn"}),
}
_BRINGS = {"cuda_bf16.h": {"cuda_fp16.h"}, "cuda_fp8.h": {"cuda_fp16.h", "cuda_bf16.h"}}  # what a header includes


def preamble(headers, header_api, texts) -> list[str]:
    """The opening lines for a module whose types need ``headers``, which used the header API of the dtypes in
    ``header_api`` and whose helpers and kernels are ``texts``: the ``#include`` lines, then our definitions."""
    included = set()
    for h in headers:
        if h not in _OWN:
            included.add(h)
            continue
        dtype, _, family, defined = _OWN[h]
        if dtype in header_api or any(set(family.findall(t)) - defined for t in texts):
            included.add(h)
    for h in list(included):
        included |= _BRINGS.get(h, set()) & set(headers)
    own = [_OWN[h][1] for h in sorted(headers) if h not in included]
    return [f"#include <{h}>" for h in sorted(included)] + own
