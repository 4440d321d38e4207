"""Cache-eviction hints of ``T.copy(..., eviction_policy=...)`` in the CUDA target: the device helpers and their calls.

In: a ``VecCopy``'s ``eviction_policy`` ("evict_first" or "evict_last"; ``compiler.language.tileops.eviction_hint``
turned "evict_normal" into None), the vector type the CUDA target reads its source through (``uint4``, ``uint2`` or
``uint1``: 16, 8 or 4 bytes) and the source address.
Out: the C++ expression reading that vector with the hint, ``tl_ld_<policy>((const uint4*)address)``; the helper
name is added to the module's helper set, so the preamble holds ``HELPERS[name]`` once.
What a helper does (measured best on the H200 among the forms tried): ``createpolicy.fractional.L2::<policy>`` makes
the 64-bit L2 policy (fraction 1.0), then one ``ld.global.L1::<policy>.L2::cache_hint.{v4,v2,}.u32`` reads the
vector with the L1 eviction priority and that L2 policy.
Guarantees: the value read is the plain load's (a hint has no semantic effect). The ``asm`` statements are neither
``volatile`` nor memory-clobbering, so the compiler may merge, hoist or reorder them as it does loads of a
``const __restrict__`` parameter; ``compiler.targets.cuda`` therefore calls them only for tensors the kernel never
writes (the ones it declares ``const __restrict__``) and reads the others plainly. Scalar copies (width 1) and runs
whose bytes are not 4, 8 or 16 are not vector reads and stay unhinted.
"""

from __future__ import annotations

POLICIES = ("evict_first", "evict_last")
_VECTORS = (("uint4", "v4.u32", "xyzw"), ("uint2", "v2.u32", "xy"), ("uint1", "u32", "x"))  # type, PTX shape, lanes


def _helper(policy: str) -> str:
    lines = [f"// T.copy(..., eviction_policy=\"{policy}\"): a global vector read with L1::{policy} and an L2 "
             f"{policy} policy"]
    for vtype, shape, lanes in _VECTORS:
        regs = ",".join(f"%{i}" for i in range(len(lanes)))
        regs = f"{{{regs}}}" if len(lanes) > 1 else regs
        outs = ", ".join(f'"=r"(r.{c})' for c in lanes)
        lines += [f"__device__ __forceinline__ {vtype} tl_ld_{policy}(const {vtype}* p) {{",
                  "  unsigned long long pol;",
                  f'  asm("createpolicy.fractional.L2::{policy}.b64 %0, 1.0;" : "=l"(pol));',
                  f"  {vtype} r;",
                  f'  asm("ld.global.L1::{policy}.L2::cache_hint.{shape} {regs}, [%{len(lanes)}], %{len(lanes) + 1};"',
                  f'      : {outs} : "l"(p), "l"(pol));',
                  "  return r;",
                  "}"]
    return "\n".join(lines)


HELPERS = {f"ld_{policy}": _helper(policy) for policy in POLICIES}


def hinted_load(helpers: set, policy: str, vtype: str, address: str) -> str:
    """The expression reading one ``vtype`` (``uint4``/``uint2``/``uint1``) at ``address`` with ``policy``'s hint;
    records the helper in ``helpers`` (the module's set, ``_ModuleState.helpers``).

    Raises:
        ValueError: for a policy outside ``POLICIES`` or another type (a bug of the caller, not of the program).
    """
    if policy not in POLICIES or vtype not in {v for v, _, _ in _VECTORS}:
        raise ValueError(f"no eviction-hinted read of {vtype} with policy {policy!r}")
    helpers.add(f"ld_{policy}")
    return f"tl_ld_{policy}(reinterpret_cast<const {vtype}*>({address}))"
