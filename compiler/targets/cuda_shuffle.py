"""CUDA for the warp shuffles of the thread IR: ``Call("shfl_xor", (value, mask, width))`` (the lowering's warp
reductions) and ``Call("shfl", (value, lane, width))`` (``T.tvm_warp_shuffle``, ``compiler.language.warp_shuffle``).

In: the kernel emitter and the call. Out: a C expression of the call's dtype: ``__shfl_xor_sync`` /
``__shfl_sync`` with the full mask. Guarantees: 16-, 32- and 64-bit floats and 32/64-bit integers are shuffled by
CUDA's own overloads (cuda_fp16.h's for __half); 8-bit floats through float32; other integers through int.
"""

from __future__ import annotations

from tileagent.compiler.ir.expr import Call
from tileagent.compiler.warp_shuffle import SHFL

CALLS = ("shfl_xor", SHFL)
_NATIVE = ("float16", "bfloat16", "float32", "float64", "int32", "uint32", "int64", "uint64")


def call(em, e: Call) -> str:
    from tileagent.compiler.targets.cuda import _LOWP, _strip

    if len(e.args) != 3:
        em.fail(f"{e.name} takes (value, {'mask' if e.name == 'shfl_xor' else 'lane'}, width)")
    value, other, width = e.args
    fn = "__shfl_xor_sync" if e.name == "shfl_xor" else "__shfl_sync"
    dt = value.dtype
    v, m, wd = _strip(em.ex(value)), _strip(em.ex(other)), _strip(em.ex(width))
    if dt in _NATIVE:
        em.state.uses_header_api(dt)  # cuda_fp16.h's overload for __half
        return f"{fn}(0xffffffffu, {v}, {m}, {wd})"
    if dt in _LOWP:  # fp8: shuffle the float32 value
        return em.from_f32(f"{fn}(0xffffffffu, {em.to_f32(v, dt)}, {m}, {wd})", dt)
    return f"(({em.ct(dt)}){fn}(0xffffffffu, (int)({v}), {m}, {wd}))"
